"""The chart rendered by a real Helm (helm-python-sdk) for each install mode, linted, and validated object
by object.

Validation uses kubernetes-validate in strict mode. It only warns (SchemaNotFoundError) for kinds it does not
know, so an unknown kind fails here unless it is one of ours, validated against the CRD schema instead.
"""

from __future__ import annotations

from typing import Any

import jsonschema
import kubernetes_validate
import pytest
from helm_python import chart as hc
from helm_python.errors import HelmRenderError, HelmValuesError

from tests.chart.conftest import CHART_DIR, NAMESPACE, SCENARIOS, env_of, find, one, render_objects

OUR_GROUP = "resource.nvidia.com"
# The oldest Kubernetes the chart supports (Chart.yaml kubeVersion) and the newest kubernetes-validate knows.
OLDEST = "1.32"
NEWEST = kubernetes_validate.latest_version()


def _validate_strict(obj: dict[str, Any], version: str, crds: dict[str, dict[str, Any]]) -> None:
    group = obj["apiVersion"].split("/")[0] if "/" in obj["apiVersion"] else ""
    if group == OUR_GROUP:
        schema = crds[obj["kind"]]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        jsonschema.Draft4Validator(schema).validate(obj)
        return
    try:
        kubernetes_validate.validate(obj, version, strict=True)
    except kubernetes_validate.SchemaNotFoundError as error:
        pytest.fail(
            f"no schema for {obj['kind']} {obj['apiVersion']} in Kubernetes {version}: {error.message}"
        )
    except kubernetes_validate.ValidationError as error:
        path = ".".join(str(p) for p in error.path)
        pytest.fail(
            f"{obj['kind']}/{obj['metadata']['name']} invalid for {version} at {path}: {error.message}"
        )


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_lint_is_clean_for_each_mode(scenario: str) -> None:
    report = hc.lint(CHART_DIR, SCENARIOS[scenario], strict=True, namespace=NAMESPACE, kube_version="v1.32.0")
    assert report["errors"] == []
    problems = [m for m in report["messages"] if m["severity"] >= 2]
    assert problems == []


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_every_rendered_object_validates_strictly(
    scenario: str, rendered: dict[str, list[dict[str, Any]]], crd_objects: dict[str, dict[str, Any]]
) -> None:
    objects = rendered[scenario]
    assert objects
    for obj in objects:
        _validate_strict(obj, NEWEST, crd_objects)


def test_oldest_supported_kubernetes_validates_with_v1beta1_classes(
    helm_chart: hc.Chart, crd_objects: dict[str, dict[str, Any]]
) -> None:
    objects = render_objects(helm_chart, {"resourceApiVersion": "v1beta1"})
    assert {o["apiVersion"] for o in find(objects, "DeviceClass")} == {"resource.k8s.io/v1beta1"}
    for obj in objects:
        _validate_strict(obj, OLDEST, crd_objects)


def test_an_unknown_kind_is_a_failure_not_a_warning() -> None:
    stray = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}
    with pytest.raises(pytest.fail.Exception, match="no schema for Widget"):
        _validate_strict(stray, NEWEST, {})


def test_crds_validate_as_customresourcedefinitions(crd_objects: dict[str, dict[str, Any]]) -> None:
    assert set(crd_objects) == {"ComputeDomain", "ComputeDomainClique"}
    for crd in crd_objects.values():
        kubernetes_validate.validate(crd, OLDEST, strict=True)
        kubernetes_validate.validate(crd, NEWEST, strict=True)


def test_default_render_holds_the_expected_objects(rendered: dict[str, list[dict[str, Any]]]) -> None:
    objects = rendered["default"]
    kinds = sorted((o["kind"], o["metadata"]["name"]) for o in objects)
    assert ("StatefulSet", "cdctl-controller") in kinds
    assert ("DaemonSet", "cdctl-kubelet-plugin") in kinds
    assert ("ValidatingAdmissionPolicy", "resourceslices-policy-cdctl") in kinds
    assert ("ValidatingAdmissionPolicyBinding", "resourceslices-policy-cdctl") in kinds
    assert {o["metadata"]["name"] for o in find(objects, "DeviceClass")} == {
        "compute-domain-default-channel.nvidia.com",
        "compute-domain-daemon.nvidia.com",
    }
    # Namespaced objects go to the release namespace; nothing is left to the client's default.
    for obj in objects:
        if obj["kind"] in {"StatefulSet", "Service", "DaemonSet", "ServiceAccount", "Role", "RoleBinding"}:
            assert obj["metadata"]["namespace"] == NAMESPACE


def test_channel_isolation_reaches_the_controller(rendered: dict[str, list[dict[str, Any]]]) -> None:
    (container,) = one(rendered["channel-driver-managed"], "StatefulSet")["spec"]["template"]["spec"][
        "containers"
    ]
    env = env_of(container)
    assert (env["IMEX_ISOLATION"], env["IMEX_CHANNEL_COUNT"]) == ("channel", "64")


def test_controller_statefulset(rendered: dict[str, list[dict[str, Any]]]) -> None:
    controller = one(rendered["default"], "StatefulSet")
    pod = controller["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["command"] == ["cdctl", "controller"]
    assert container["image"] == "ghcr.io/cdctl/cdctl:0.1.0"
    env = env_of(container)
    assert env["POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert env["NAMESPACE"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    assert env["IMAGE_NAME"] == container["image"]
    assert env["HTTP_ENDPOINT"] == ":8080"
    assert env["METRICS_PATH"] == "/metrics"
    assert env["MAX_NODES_PER_IMEX_DOMAIN"] == "18"
    assert (env["IMEX_ISOLATION"], env["IMEX_CHANNEL_COUNT"]) == ("domain", "2048")
    assert env["LOG_VERBOSITY_CD_DAEMON"] == "2"  # the ladder's default in every component
    assert env["LEADER_ELECTION_ENABLED"] == "false"
    assert env["FEATURE_GATES"] == ""
    assert env["CDCTL_DB"] == "/var/lib/cdctl/controller.db"
    assert not any(name.startswith("LEADER_ELECTION_LEASE") for name in env)
    assert container["ports"] == [{"name": "http", "containerPort": 8080, "protocol": "TCP"}]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert container["startupProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    # Unprivileged: non-root, no escalation, no capabilities, read-only root.
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    assert pod["serviceAccountName"] == "cdctl-controller"


def test_leader_election_flags(rendered: dict[str, list[dict[str, Any]]]) -> None:
    controller = one(rendered["leader-election"], "StatefulSet")
    assert controller["spec"]["replicas"] == 2
    env = env_of(controller["spec"]["template"]["spec"]["containers"][0])
    assert env["LEADER_ELECTION_ENABLED"] == "true"
    assert env["LEADER_ELECTION_LEASE_LOCK_NAMESPACE"] == NAMESPACE
    assert env["LEADER_ELECTION_LEASE_LOCK_NAME"] == "cdctl-controller"
    assert env["LEADER_ELECTION_LEASE_DURATION"] == "3s"
    assert env["LEADER_ELECTION_RENEW_DEADLINE"] == "2s"
    assert env["LEADER_ELECTION_RETRY_PERIOD"] == "500ms"
    role = one(rendered["leader-election"], "Role", "cdctl-controller")
    lease_rules = [r for r in role["rules"] if r["apiGroups"] == ["coordination.k8s.io"]]
    assert lease_rules == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "create", "update"]}
    ]


def test_kubelet_plugin_daemonset(rendered: dict[str, list[dict[str, Any]]]) -> None:
    daemonset = one(rendered["default"], "DaemonSet")
    pod = daemonset["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["command"] == ["cdctl", "kubelet-plugin"]
    host_paths = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    assert host_paths == {
        "plugins-registry": "/var/lib/kubelet/plugins_registry",
        "plugins": "/var/lib/kubelet/plugins",
        "cdi": "/var/run/cdi",
        "proc-devices": "/proc/devices",
        "driver-root": "/",
    }
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    env = env_of(container)
    assert env["NODE_NAME"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert env["CDI_ROOT"] == mounts["cdi"]
    assert env["PROC_DEVICES"] == mounts["proc-devices"]
    assert env["KUBELET_REGISTRAR_DIRECTORY_PATH"] == mounts["plugins-registry"]
    assert env["KUBELET_PLUGINS_DIRECTORY_PATH"] == mounts["plugins"]
    assert env["DRIVER_ROOT_CTR_PATH"] == mounts["driver-root"]
    # The event log (the claim checkpoint) sits on the host, under the plugin's own directory.
    assert env["CDCTL_DB"] == "/var/lib/kubelet/plugins/compute-domain.nvidia.com/events.db"
    assert env["CDCTL_DB"].startswith(mounts["plugins"] + "/")
    # Health probes call the gRPC health service on the health port.
    assert env["HEALTHCHECK_PORT"] == "51515"
    for probe in ("startupProbe", "livenessProbe"):
        assert container[probe]["grpc"] == {"port": 51515, "service": "liveness"}
    assert container["startupProbe"]["failureThreshold"] * container["startupProbe"]["periodSeconds"] >= 600
    assert container["securityContext"]["privileged"] is True
    assert pod["serviceAccountName"] == "cdctl-kubelet-plugin"


GPU_TERMS = [
    {"matchExpressions": [{"key": "feature.node.kubernetes.io/pci-10de.present", "operator": "In",
                           "values": ["true"]}]},
    {"matchExpressions": [{"key": "feature.node.kubernetes.io/cpu-model.vendor_id", "operator": "In",
                           "values": ["NVIDIA"]}]},
    {"matchExpressions": [{"key": "nvidia.com/gpu.present", "operator": "In", "values": ["true"]}]},
]  # fmt: skip


def test_the_plugin_goes_only_to_gpu_nodes_by_default(rendered: dict[str, list[dict[str, Any]]]) -> None:
    for scenario, objects in rendered.items():
        pod = one(objects, "DaemonSet", "cdctl-kubelet-plugin")["spec"]["template"]["spec"]
        required = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert required["nodeSelectorTerms"] == GPU_TERMS, scenario


def test_the_plugin_placement_can_be_replaced_or_dropped(helm_chart: hc.Chart) -> None:
    pod = one(render_objects(helm_chart, {"kubeletPlugin": {"affinity": None}}), "DaemonSet")
    assert "affinity" not in pod["spec"]["template"]["spec"]
    mine = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["gb200"]}]}]}}}  # fmt: skip
    pod = one(render_objects(helm_chart, {"kubeletPlugin": {"affinity": mine}}), "DaemonSet")
    assert pod["spec"]["template"]["spec"]["affinity"] == mine
    pod = one(render_objects(helm_chart, {"kubeletPlugin": {"nodeSelector": {"gpu": "yes"}}}), "DaemonSet")
    assert pod["spec"]["template"]["spec"]["nodeSelector"] == {"gpu": "yes"}


def test_plugin_can_run_unprivileged_when_asked(helm_chart: hc.Chart) -> None:
    objects = render_objects(helm_chart, {"kubeletPlugin": {"privileged": False}})
    container = one(objects, "DaemonSet")["spec"]["template"]["spec"]["containers"][0]
    assert container["securityContext"]["privileged"] is False
    assert container["securityContext"]["allowPrivilegeEscalation"] is False


def test_only_the_kubelet_plugin_is_privileged(rendered: dict[str, list[dict[str, Any]]]) -> None:
    for scenario, objects in rendered.items():
        privileged = [
            (o["metadata"]["name"], c["name"])
            for o in objects
            if o["kind"] in {"StatefulSet", "DaemonSet"}
            for c in o["spec"]["template"]["spec"]["containers"]
            if c.get("securityContext", {}).get("privileged")
        ]
        expected = [("cdctl-kubelet-plugin", "compute-domains")]
        if scenario in ("channel-driver-managed", "channel-no-cleanup"):  # the shared IMEX daemon opens them
            expected.insert(0, ("cdctl-imex-daemon", "imex"))
        assert privileged == expected, scenario


def test_feature_gates_reach_controller_and_plugin(helm_chart: hc.Chart) -> None:
    values = {"featureGates": {"CrashOnNVLinkFabricErrors": False, "ComputeDomainCliques": True}}
    objects = render_objects(helm_chart, values)
    for kind in ("StatefulSet", "DaemonSet"):
        container = one(objects, kind)["spec"]["template"]["spec"]["containers"][0]
        assert (
            env_of(container)["FEATURE_GATES"] == "ComputeDomainCliques=true,CrashOnNVLinkFabricErrors=false"
        )


def test_host_managed_mode(rendered: dict[str, list[dict[str, Any]]]) -> None:
    objects = rendered["host-managed"]
    assert [o["metadata"]["name"] for o in find(objects, "DeviceClass")] == [
        "compute-domain-default-channel.nvidia.com"
    ]
    names = {(o["kind"], o["metadata"]["name"]) for o in objects}
    assert not [n for n in names if "daemon" in n[1]], names
    assert ("ServiceAccount", "compute-domain-daemon-service-account") not in names
    for kind in ("StatefulSet", "DaemonSet"):
        container = one(objects, kind)["spec"]["template"]["spec"]["containers"][0]
        assert env_of(container)["FEATURE_GATES"] == "HostManagedIMEX=true"


def test_the_host_imex_config_is_mounted_read_only_and_named_to_the_plugin(helm_chart: hc.Chart) -> None:
    values = {"featureGates": {"HostManagedIMEX": True}}
    pod = one(render_objects(helm_chart, values), "DaemonSet")["spec"]["template"]["spec"]
    assert "HOST_IMEX_CONFIG" not in env_of(pod["containers"][0]), "off by default (seed 003: not asked)"
    assert "host-imex-config" not in {v["name"] for v in pod["volumes"]}

    values["kubeletPlugin"] = {"hostImexConfig": "/etc/nvidia-imex/config.cfg"}
    pod = one(render_objects(helm_chart, values), "DaemonSet")["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert env_of(container)["HOST_IMEX_CONFIG"] == "/etc/nvidia-imex/config.cfg"
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == "host-imex-config"]
    assert mount == {"name": "host-imex-config", "mountPath": "/etc/nvidia-imex", "readOnly": True}
    (volume,) = [v for v in pod["volumes"] if v["name"] == "host-imex-config"]
    assert volume["hostPath"] == {"path": "/etc/nvidia-imex", "type": "Directory"}
    for wrong in ("etc/nvidia-imex/config.cfg", "/etc/nvidia-imex/", "/etc/nvidia imex/config.cfg"):
        with pytest.raises(HelmValuesError, match="/kubeletPlugin/hostImexConfig"):
            render_objects(helm_chart, {"kubeletPlugin": {"hostImexConfig": wrong}})


def test_driver_managed_mode_provides_what_daemon_pods_need(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    objects = rendered["driver-managed"]
    for namespace in (NAMESPACE, "team-a"):
        accounts = [
            o
            for o in find(objects, "ServiceAccount", "compute-domain-daemon-service-account")
            if o["metadata"]["namespace"] == namespace
        ]
        assert len(accounts) == 1, namespace
        bindings = [
            o for o in find(objects, "RoleBinding", "cdctl-daemon") if o["metadata"]["namespace"] == namespace
        ]
        assert bindings[0]["subjects"] == [
            {
                "kind": "ServiceAccount",
                "name": "compute-domain-daemon-service-account",
                "namespace": namespace,
            }
        ]
    env = env_of(one(objects, "StatefulSet")["spec"]["template"]["spec"]["containers"][0])
    assert env["ADDITIONAL_NAMESPACES"] == "team-a"
    assert env["CD_DAEMON_IMAGE_PULL_SECRET_NAMES"] == "registry-creds"
    assert "compute-domain-daemon.nvidia.com" in {o["metadata"]["name"] for o in find(objects, "DeviceClass")}


@pytest.mark.parametrize(
    ("values", "namespace", "message"),
    [
        ({}, "default", 'refusing to install into the "default" namespace'),
        (
            {"featureGates": {"IMEXDaemonsWithDNSNames": False}},
            NAMESPACE,
            "ComputeDomainCliques requires IMEXDaemonsWithDNSNames",
        ),
        ({"controller": {"replicas": 2}}, NAMESPACE, "needs controller.leaderElection.enabled"),
    ],
)
def test_install_guards(helm_chart: hc.Chart, values: dict[str, Any], namespace: str, message: str) -> None:
    with pytest.raises(HelmRenderError, match=message):
        render_objects(helm_chart, values, namespace=namespace)


def test_guards_let_allowed_combinations_through(helm_chart: hc.Chart) -> None:
    objects = render_objects(helm_chart, {"allowDefaultNamespace": True}, namespace="default")
    assert one(objects, "StatefulSet")["metadata"]["namespace"] == "default"
    # Host-managed mode forces both gates off itself, so turning DNS names off alone is fine there.
    objects = render_objects(
        helm_chart, {"featureGates": {"HostManagedIMEX": True, "IMEXDaemonsWithDNSNames": False}}
    )
    assert find(objects, "DeviceClass", "compute-domain-daemon.nvidia.com") == []


@pytest.mark.parametrize(
    ("values", "mode"), [({}, "driver-managed"), (SCENARIOS["host-managed"], "host-managed")]
)
def test_install_notes_name_the_mode_and_the_crd_upgrade(
    helm_chart: hc.Chart, values: dict[str, Any], mode: str
) -> None:
    notes = helm_chart.render(values, name="cdctl", namespace=NAMESPACE, is_install=True)[
        "cdctl/templates/NOTES.txt"
    ]
    assert f"({mode} IMEX" in notes
    assert "kubectl apply --server-side -f charts/cdctl/crds/" in notes
