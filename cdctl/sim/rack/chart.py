"""The cluster-wide objects the Helm chart installs, read from the chart itself for the simulated cluster.

The simulated cluster (`cdctl sim` and the integration tests) calls `cluster_bootstrap_objects()` to create
the CustomResourceDefinitions and DeviceClasses exactly as `helm install` would, so that the chart stays the
one source of truth for them. Helm is not needed at runtime (helm-python-sdk is a development dependency):

- CRDs are the documents of `charts/cdctl/crds/*.yaml`, which Helm installs verbatim (no templating).
- DeviceClasses come from `charts/cdctl/files/deviceclasses.yaml`, the list that
  `templates/deviceclasses.yaml` renders for Helm. This module applies the same rules as that template:
  the class apiVersion (`resourceApiVersion`, else `resource.k8s.io/v1`, which is what Helm picks offline and
  on any cluster serving v1), leaving out `driverManagedOnly` classes when the effective `HostManagedIMEX`
  gate is on, and keeping only the classes of the install's `imex.isolation`. Helm's bookkeeping labels
  (`helm.sh/chart`, `app.kubernetes.io/*`) are not added.
- The IMEX daemons' ServiceAccount (`daemon_service_accounts`), which `templates/rbac-daemon.yaml` renders in
  the release namespace and every `additionalNamespaces` entry unless HostManagedIMEX is on: without it the
  API server refuses the daemon pods. The other components run as processes here, not as pods, so their
  accounts are not needed.
  tests/chart checks the result against Helm's own rendering for several sets of values.
- ValidatingAdmissionPolicies and their bindings come from `charts/cdctl/files/admission-policies.yaml`, the
  list `templates/admission-policies.yaml` renders (`admission_policies(values, namespace=...)`): the same
  names, matchCondition on the component's service accounts, Fail and [Deny], `driverManagedOnly` entries
  left out under HostManagedIMEX (spelled either way, `feature_gates`), `pluginNodeLabelsOnly` ones when the
  plugin writes no Node label (`plugin_node_labels`), the claim policies (`admission` entries: their own
  matchConditions and the install's constants as their first variables) only while `admission.enabled`;
  labels carry only the component. The rack loads them, so the simulated cluster enforces them.
- The collector ServiceAccount (`collector_service_account`) of `templates/rbac-collector.yaml`, whose tokens
  the components accept on their event-log endpoint, and the components' HTTP ports (`http_ports`).
- The kubelet plugin's placement (`plugin_placement`): the nodeSelector, tolerations and affinity that
  `templates/kubelet-plugin.yaml` copies from `kubeletPlugin.*` into the DaemonSet's pod spec, so that the
  rack starts a plugin only where that DaemonSet would place one (tests/chart compares it with Helm's).

Values are merged over the chart's `values.yaml` and validated against its `values.schema.json`, like Helm.

Where the chart is found: `chart_dir()` looks for `charts/cdctl` at the root of the source checkout this
module was imported from (the editable install `make` sets up: `<repo>/cdctl/sim/rack/chart.py` gives
`<repo>/charts/cdctl`), then under `<sys.prefix>/share/cdctl/charts/cdctl` for an installation that ships the
chart as data files. Every function also takes an explicit `chart` directory.
"""

from __future__ import annotations

import copy
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from cdctl.api.shareddaemon import SHARED_DAEMON_COMPONENT, shared_daemon_name

CHART_NAME = "cdctl"

# Gate defaults, as in templates/_helpers.tpl ("cdctl.gate") and the components' own gate registry.
GATE_DEFAULTS: Mapping[str, bool] = {
    "IMEXDaemonsWithDNSNames": True,
    "ComputeDomainCliques": True,
    "CrashOnNVLinkFabricErrors": True,
    "HostManagedIMEX": False,
}
# Gates that HostManagedIMEX forces off.
_HOST_MANAGED_FORCES_OFF = ("IMEXDaemonsWithDNSNames", "ComputeDomainCliques")

_DEFAULT_RESOURCE_API_VERSION = "resource.k8s.io/v1"
DAEMON_SERVICE_ACCOUNT = "compute-domain-daemon-service-account"  # templates/_helpers.tpl, as the Go driver
# templates/_helpers.tpl "cdctl.claimControllerUsers": who makes a pod's claims from its templates.
CLAIM_CONTROLLER_USERS = (
    "system:serviceaccount:kube-system:resource-claim-controller",
    "system:kube-controller-manager",
)


class ChartError(Exception):
    """The chart could not be found or read, or the values are not acceptable to it."""


class ChartNotFoundError(ChartError):
    """No chart directory at any of the places `chart_dir` looks."""


class ChartValuesError(ChartError):
    """Values the chart refuses (schema violation or a gate combination the components reject)."""


def chart_dir() -> Path:
    """The chart directory: `<repo>/charts/cdctl` of this checkout, else under `<sys.prefix>/share/cdctl`."""
    candidates = [
        Path(__file__).resolve().parents[3] / "charts" / CHART_NAME,
        Path(sys.prefix) / "share" / "cdctl" / "charts" / CHART_NAME,
    ]
    for candidate in candidates:
        if (candidate / "Chart.yaml").is_file():
            return candidate
    looked = ", ".join(str(c) for c in candidates)
    raise ChartNotFoundError(f"the {CHART_NAME} Helm chart was not found (looked in {looked})")


def _resolve(chart: Path | None) -> Path:
    return chart if chart is not None else chart_dir()


def _load_yaml(path: Path) -> Any:
    try:
        with path.open(encoding="utf-8") as handle:
            return yaml.safe_load(handle)
    except (OSError, yaml.YAMLError) as error:
        raise ChartError(f"{path}: {error}") from error


def default_values(chart: Path | None = None) -> dict[str, Any]:
    """The chart's `values.yaml`."""
    values = _load_yaml(_resolve(chart) / "values.yaml")
    if not isinstance(values, dict):
        raise ChartError(f"{_resolve(chart) / 'values.yaml'}: not a mapping")
    return values


def _coalesce(base: dict[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """Helm's value merge: maps merge key by key, anything else replaces; a null override deletes the key."""
    merged = copy.deepcopy(base)
    for key, value in overrides.items():
        if value is None:
            merged.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(merged.get(key), dict):
            merged[key] = _coalesce(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def merged_values(values: Mapping[str, Any] | None = None, *, chart: Path | None = None) -> dict[str, Any]:
    """`values` merged over the chart defaults and checked against `values.schema.json` and the gate rules."""
    directory = _resolve(chart)
    merged = _coalesce(default_values(directory), values or {})
    schema_path = directory / "values.schema.json"
    try:
        schema = json.loads(schema_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise ChartError(f"{schema_path}: {error}") from error
    errors = sorted(
        jsonschema.Draft7Validator(schema).iter_errors(merged), key=lambda e: [str(p) for p in e.path]
    )
    if errors:
        first = errors[0]
        where = "".join(f"/{part}" for part in first.absolute_path)
        raise ChartValuesError(f"values don't meet the chart's schema: at '{where}': {first.message}")
    _check_imex_mode(merged)
    gates = feature_gates(merged)
    if gates["ComputeDomainCliques"] and not gates["IMEXDaemonsWithDNSNames"]:
        raise ChartValuesError(
            "feature gate validation failed: feature gate ComputeDomainCliques requires "
            "IMEXDaemonsWithDNSNames to also be enabled"
        )
    return merged


def imex_mode(values: Mapping[str, Any]) -> str:
    """`resources.computeDomains.imex.mode` (the Go chart's spelling of HostManagedIMEX), "" when unset."""
    imex = ((values.get("resources") or {}).get("computeDomains") or {}).get("imex") or {}
    return str(imex.get("mode") or "")


def gpu_clique_label_enabled(values: Mapping[str, Any]) -> bool:
    """templates/_compat.tpl gpuCliqueLabelEnabled: the Go chart's kubeletPlugin.containers.computeDomains
    name when set, else kubeletPlugin.gpuCliqueLabelEnabled."""
    plugin = values.get("kubeletPlugin") or {}
    container = (plugin.get("containers") or {}).get("computeDomains") or {}
    if "gpuCliqueLabelEnabled" in container:
        return bool(container["gpuCliqueLabelEnabled"])
    return bool(plugin.get("gpuCliqueLabelEnabled"))


def plugin_node_labels(values: Mapping[str, Any]) -> list[str]:
    """The Node labels the kubelet plugin may write (templates/admission-policies.yaml)."""
    labels = [] if feature_gates(values)["HostManagedIMEX"] else ["resource.nvidia.com/computeDomain"]
    return labels + (["nvidia.com/gpu.clique"] if gpu_clique_label_enabled(values) else [])


def _check_imex_mode(values: Mapping[str, Any]) -> None:
    """templates/upstream-compat.yaml's rules for the two spellings of host-managed IMEX."""
    mode, configured = imex_mode(values), values.get("featureGates") or {}
    if (
        mode
        and "HostManagedIMEX" in configured
        and (mode == "hostManaged") != bool(configured["HostManagedIMEX"])
    ):
        raise ChartValuesError(
            f"resources.computeDomains.imex.mode={mode} conflicts with featureGates.HostManagedIMEX: they "
            "are two spellings of one setting; set only one (see docs/upgrade-from-nvidia.md)"
        )
    if mode == "hostManaged" and not (
        configured.get("HostManagedIMEXDaemon") or configured.get("HostManagedIMEX")
    ):
        raise ChartValuesError(
            "resources.computeDomains.imex.mode=hostManaged requires featureGates.HostManagedIMEXDaemon=true "
            "(see docs/upgrade-from-nvidia.md)"
        )


def feature_gates(values: Mapping[str, Any]) -> dict[str, bool]:
    """Effective gates of merged values: defaults, then `featureGates`, then the IMEX mode (the Go chart's
    spelling of HostManagedIMEX), then HostManagedIMEX's overrides."""
    configured = values.get("featureGates") or {}
    gates = {name: bool(configured.get(name, default)) for name, default in GATE_DEFAULTS.items()}
    if imex_mode(values):
        gates["HostManagedIMEX"] = imex_mode(values) == "hostManaged"
    if gates["HostManagedIMEX"]:
        for name in _HOST_MANAGED_FORCES_OFF:
            gates[name] = False
    return gates


def crds(chart: Path | None = None) -> list[dict[str, Any]]:
    """The CustomResourceDefinitions in the chart's `crds/`, in file-name order (as Helm installs them)."""
    directory = _resolve(chart) / "crds"
    objects: list[dict[str, Any]] = []
    for path in sorted(directory.glob("*.yaml")):
        try:
            documents = list(yaml.safe_load_all(path.read_text(encoding="utf-8")))
        except (OSError, yaml.YAMLError) as error:
            raise ChartError(f"{path}: {error}") from error
        for document in documents:
            if document is None:
                continue
            if not isinstance(document, dict) or document.get("kind") != "CustomResourceDefinition":
                raise ChartError(f"{path}: every document in crds/ must be a CustomResourceDefinition")
            objects.append(document)
    if not objects:
        raise ChartError(f"{directory}: no CustomResourceDefinitions")
    return objects


def device_classes(
    values: Mapping[str, Any] | None = None,
    *,
    chart: Path | None = None,
    resource_api_version: str | None = None,
) -> list[dict[str, Any]]:
    """The DeviceClasses Helm renders for `values`.

    `resource_api_version` ("resource.k8s.io/v1beta1", ...) stands in for what Helm reads from the cluster
    when `resourceApiVersion` is empty; the default is v1.
    """
    directory = _resolve(chart)
    merged = merged_values(values, chart=directory)
    host_managed = feature_gates(merged)["HostManagedIMEX"]
    isolation = "channel" if channel_isolation(merged) else "domain"
    if merged.get("resourceApiVersion"):
        api_version = f"resource.k8s.io/{merged['resourceApiVersion']}"
    else:
        api_version = resource_api_version or _DEFAULT_RESOURCE_API_VERSION
    classes = _load_yaml(directory / "files" / "deviceclasses.yaml")
    if not isinstance(classes, list):
        raise ChartError(f"{directory / 'files' / 'deviceclasses.yaml'}: not a list")
    return [
        {
            "apiVersion": api_version,
            "kind": "DeviceClass",
            "metadata": {"name": entry["name"]},
            "spec": {"selectors": [{"cel": {"expression": entry["selector"]}}]},
        }
        for entry in classes
        if not (entry.get("driverManagedOnly") and host_managed)
        and str(entry.get("isolation") or "domain") == isolation
    ]


def cluster_bootstrap_objects(
    values: Mapping[str, Any] | None = None,
    *,
    chart: Path | None = None,
    resource_api_version: str | None = None,
) -> list[dict[str, Any]]:
    """CRDs first, then DeviceClasses: what the simulated cluster creates before starting any component."""
    directory = _resolve(chart)
    return crds(directory) + device_classes(
        values, chart=directory, resource_api_version=resource_api_version
    )


def daemon_service_accounts(
    namespace: str, values: Mapping[str, Any] | None = None, *, chart: Path | None = None
) -> list[dict[str, Any]]:
    """The daemon ServiceAccounts Helm renders for a release in `namespace`: one per managed namespace."""
    merged = merged_values(values, chart=_resolve(chart))
    if feature_gates(merged)["HostManagedIMEX"] or channel_isolation(merged):
        return []
    managed = list(dict.fromkeys([namespace, *(merged.get("additionalNamespaces") or [])]))
    return [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": DAEMON_SERVICE_ACCOUNT, "namespace": ns},
        }
        for ns in managed
    ]


def _fullname(values: Mapping[str, Any], release: str) -> str:
    """templates/_helpers.tpl "cdctl.fullname"."""
    if values.get("fullnameOverride"):
        return str(values["fullnameOverride"])[:63].rstrip("-")
    name = str(values.get("nameOverride") or CHART_NAME)
    return (release if name in release else f"{release}-{name}")[:63].rstrip("-")


def channel_isolation(values: Mapping[str, Any]) -> bool:
    """templates/_helpers.tpl "cdctl.channelIsolation": `resources.computeDomains.imex.isolation` is
    "channel"."""
    imex = ((values.get("resources") or {}).get("computeDomains") or {}).get("imex")
    return isinstance(imex, Mapping) and str(imex.get("isolation") or "domain") == "channel"


def _cel_json(value: Any) -> str:
    """Helm's `toJson`, which is a CEL literal too."""
    return json.dumps(value, separators=(",", ":"))


def admission_policies(
    values: Mapping[str, Any] | None = None,
    *,
    namespace: str,
    release: str = CHART_NAME,
    chart: Path | None = None,
) -> list[dict[str, Any]]:
    """The ValidatingAdmissionPolicies and bindings Helm renders for a release in `namespace`, each policy
    followed by its binding."""
    directory = _resolve(chart)
    merged = merged_values(values, chart=directory)
    host_managed = feature_gates(merged)["HostManagedIMEX"]
    fullname = _fullname(merged, release)
    managed = list(dict.fromkeys([namespace, *(merged.get("additionalNamespaces") or [])]))
    accounts = {
        "controller": [f"system:serviceaccount:{namespace}:{fullname}-controller"],
        "kubeletPlugin": [f"system:serviceaccount:{namespace}:{fullname}-kubelet-plugin"],
        "daemon": [f"system:serviceaccount:{ns}:compute-domain-daemon-service-account" for ns in managed],
    }
    if not host_managed and channel_isolation(merged):  # the shared IMEX daemon, held as the daemons are
        accounts["daemon"].append(f"system:serviceaccount:{namespace}:{shared_daemon_name(fullname)}")
    node_labels = plugin_node_labels(merged)
    constants = {
        "pluginNodeLabels": _cel_json(node_labels),
        "controllerUser": _cel_json(accounts["controller"][0]),
        "claimControllers": _cel_json(list(CLAIM_CONTROLLER_USERS)),
        "hostManaged": "true" if host_managed else "false",
        "channelIsolation": "true" if channel_isolation(merged) else "false",
    }
    admission_enabled = bool((merged.get("admission") or {}).get("enabled"))
    entries = _load_yaml(directory / "files" / "admission-policies.yaml")
    if not isinstance(entries, list):
        raise ChartError(f"{directory / 'files' / 'admission-policies.yaml'}: not a list")
    objects: list[dict[str, Any]] = []
    for entry in entries:
        if (
            (entry.get("driverManagedOnly") and host_managed)
            or (entry.get("pluginNodeLabelsOnly") and not node_labels)
            or (entry.get("admission") and not admission_enabled)
        ):
            continue
        name = f"{entry['name']}-policy-{fullname}"
        labels = {"app.kubernetes.io/component": entry["component"]}
        spec: dict[str, Any] = {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": copy.deepcopy(entry["resourceRules"])},
        }
        conditions = copy.deepcopy(entry.get("matchConditions") or [])
        if entry.get("serviceAccount"):
            condition = "request.userInfo.username in " + _cel_json(accounts[entry["serviceAccount"]])
            conditions.insert(0, {"name": "isServiceAccount", "expression": condition})
        if conditions:
            spec["matchConditions"] = conditions
        variables = [{"name": n, "expression": constants[n]} for n in entry.get("constants") or []]
        variables += copy.deepcopy(entry.get("variables") or [])
        if variables:
            spec["variables"] = variables
        spec["validations"] = copy.deepcopy(entry["validations"])
        objects.append(
            {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "ValidatingAdmissionPolicy",
                "metadata": {"name": name, "labels": dict(labels)},
                "spec": spec,
            }
        )
        objects.append(
            {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "ValidatingAdmissionPolicyBinding",
                "metadata": {"name": name, "labels": dict(labels)},
                "spec": {"policyName": name, "validationActions": ["Deny"]},
            }
        )
    return objects


def plugin_placement(values: Mapping[str, Any] | None = None, *, chart: Path | None = None) -> dict[str, Any]:
    """The placement fields of the kubelet plugin's pod spec for `values`, as Helm renders them (empty
    values are left out, as the template's `with` blocks do)."""
    plugin = merged_values(values, chart=_resolve(chart)).get("kubeletPlugin") or {}
    return {
        key: copy.deepcopy(plugin[key])
        for key in ("nodeSelector", "tolerations", "affinity")
        if plugin.get(key)
    }


def collector_service_account(
    values: Mapping[str, Any] | None = None, *, release: str = CHART_NAME, chart: Path | None = None
) -> str:
    """The name of the collector ServiceAccount Helm renders (`<fullname>-collector`); '' when
    collector.enabled is false."""
    merged = merged_values(values, chart=_resolve(chart))
    if not (merged.get("collector") or {}).get("enabled"):
        return ""
    return f"{_fullname(merged, release)}-collector"


def http_ports(values: Mapping[str, Any] | None = None, *, chart: Path | None = None) -> dict[str, int]:
    """The container port of each component's HTTP server (metrics, health, event log)."""
    merged = merged_values(values, chart=_resolve(chart))

    def port(component: Mapping[str, Any], endpoint_key: str) -> int:
        # templates/_compat.tpl: the Go chart's "<host>:<port>" endpoint when set, else httpPort
        endpoint = str((component.get("metrics") or {}).get(endpoint_key) or "")
        return int(endpoint.rpartition(":")[2]) if endpoint else int(component["httpPort"])

    return {
        "controller": port(merged["controller"], "httpEndpoint"),
        "kubelet-plugin": port(merged["kubeletPlugin"], "computeDomainHttpEndpoint"),
    }


def shared_daemon_objects(
    namespace: str,
    values: Mapping[str, Any] | None = None,
    *,
    release: str = CHART_NAME,
    chart: Path | None = None,
) -> list[dict[str, Any]]:
    """templates/imex-daemon.yaml for a release in `namespace`: the shared IMEX daemon's ServiceAccount, Role,
    RoleBinding and DaemonSet (channel isolation with driver-managed IMEX; none otherwise). Helm's
    bookkeeping labels are left out, and the container's volumes: the simulated runtime gives the daemon its
    node's shared directory itself (cdctl.sim.node.daemonruntime)."""
    merged = merged_values(values, chart=_resolve(chart))
    if feature_gates(merged)["HostManagedIMEX"] or not channel_isolation(merged):
        return []
    name = shared_daemon_name(_fullname(merged, release))
    labels = {"app.kubernetes.io/component": SHARED_DAEMON_COMPONENT}
    selector = {
        "app.kubernetes.io/name": str(merged.get("nameOverride") or CHART_NAME),
        "app.kubernetes.io/instance": release,
        **labels,
    }
    meta = {"name": name, "namespace": namespace, "labels": dict(labels)}
    field = {
        "NODE_NAME": "spec.nodeName", "POD_IP": "status.podIP", "POD_NAME": "metadata.name",
        "POD_NAMESPACE": "metadata.namespace", "POD_UID": "metadata.uid",
    }  # fmt: skip
    env: list[dict[str, Any]] = [
        {"name": key, "valueFrom": {"fieldRef": {"fieldPath": path}}} for key, path in field.items()
    ]
    env += [
        {"name": key, "value": str(value)}
        for key, value in (
            ("IMEX_SHARED_DAEMON", "true"),
            ("IMEXD_DIR", "/imexd"),
            ("MAX_NODES_PER_IMEX_DOMAIN", merged["maxNodesPerIMEXDomain"]),
            ("LOG_VERBOSITY", merged["daemonLogVerbosity"]),
            ("LOG_FORMAT", merged["logFormat"]),
            ("CDCTL_RETENTION_AGE", merged["eventLog"]["retention"]["age"]),
            ("CDCTL_RETENTION_SIZE", merged["eventLog"]["retention"]["size"]),
            ("CDCTL_RETENTION_INTERVAL", merged["eventLog"]["retention"]["interval"]),
            ("NVIDIA_VISIBLE_DEVICES", "void"),
        )
    ]
    container = {
        "name": "imex",
        "command": ["cdctl", "daemon", "run", "--shared"],
        "securityContext": {"runAsUser": 0, "runAsGroup": 0, "privileged": True},
        "env": env,
        "readinessProbe": {
            "exec": {"command": ["cdctl", "daemon", "check", "--shared"]},
            "periodSeconds": 2,
            "timeoutSeconds": 10,
            "failureThreshold": 3,
        },
    }
    pod_spec: dict[str, Any] = {"serviceAccountName": name, "containers": [container]}
    pod_spec.update(plugin_placement(values, chart=chart))
    rbac = "rbac.authorization.k8s.io/v1"
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": dict(meta)},
        {
            "apiVersion": rbac, "kind": "Role", "metadata": dict(meta),
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "patch"]}],
        },
        {
            "apiVersion": rbac, "kind": "RoleBinding", "metadata": dict(meta),
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        },
        {
            "apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": dict(meta),
            "spec": {
                "selector": {"matchLabels": selector},
                "template": {"metadata": {"labels": dict(selector)}, "spec": pod_spec},
            },
        },
    ]  # fmt: skip
