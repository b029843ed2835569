"""Per-kind rules the API server applies on writes: create-time defaults and validation (admission).

Called by cdctl.sim.apiserver.store on every create and update: custom objects are defaulted and validated
against their CRD (cdctl.sim.apiserver.crd), CRDs themselves are checked, ResourceClaim specs and the
ResourceSlice driver and pool name are immutable, and new Pods, DaemonSets, Namespaces and CRDs get the status
the API server gives them; a new Pod tolerates the not-ready and unreachable NoExecute taints for 300 s
unless it says otherwise (`default_toleration_seconds`, the DefaultTolerationSeconds plugin). A new Pod must
name a ServiceAccount of its namespace (`default` when it names none), as the ServiceAccount admission
plugin requires (`admit_service_account`); `default_service_account`
is the one the controller-manager's service-account controller creates in every namespace.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from cdctl.sim.apiserver import crd as crds
from cdctl.sim.apiserver.errors import Forbidden, Invalid
from cdctl.sim.apiserver.objectmeta import now_rfc3339
from cdctl.sim.apiserver.resources import ResourceRegistry, ResourceType

CRD_KEY = ("apiextensions.k8s.io", "customresourcedefinitions")
NAMESPACE_KEY = ("", "namespaces")
CLAIM_KEY = ("resource.k8s.io", "resourceclaims")
TEMPLATE_KEY = ("resource.k8s.io", "resourceclaimtemplates")
SLICE_KEY = ("resource.k8s.io", "resourceslices")
SERVICE_ACCOUNT_KEY = ("", "serviceaccounts")
DAEMON_SET_KEY = ("apps", "daemonsets")
TEMPLATE_GENERATION_ANNOTATION = "deprecated.daemonset.template.generation"
DEFAULT_SERVICE_ACCOUNT = "default"
# (field path, where it lives) that may not change once set.
_IMMUTABLE: dict[tuple[str, str], tuple[tuple[str, ...], ...]] = {
    CLAIM_KEY: (("spec",),),
    SLICE_KEY: (("spec", "driver"), ("spec", "pool", "name")),
}


def _at(obj: dict[str, Any], path: tuple[str, ...]) -> Any:
    current: Any = obj
    for part in path:
        current = current.get(part) if isinstance(current, dict) else None
    return current


def apply_create_defaults(resource_type: ResourceType, obj: dict[str, Any]) -> None:
    key = resource_type.storage_key
    if key == ("", "pods"):
        default_toleration_seconds(obj.setdefault("spec", {}))
        obj.setdefault("status", {}).setdefault("phase", "Pending")
    elif key == DAEMON_SET_KEY:
        obj["status"] = {
            "currentNumberScheduled": 0,
            "desiredNumberScheduled": 0,
            "numberMisscheduled": 0,
            "numberReady": 0,
        }
    elif key == NAMESPACE_KEY:
        obj.setdefault("spec", {"finalizers": ["kubernetes"]})
        obj.setdefault("status", {})["phase"] = "Active"
    elif key == CRD_KEY:
        obj["status"] = crds.accepted_status(obj, now_rfc3339())
    if key == DAEMON_SET_KEY:  # the DaemonSet strategy's template generation, which labels its pods
        annotations = obj.setdefault("metadata", {}).setdefault("annotations", {})
        annotations[TEMPLATE_GENERATION_ANNOTATION] = "1"
    if resource_type.builtin and resource_type.status_subresource:
        obj.setdefault("status", {})  # a built-in kind's status is a struct: answered as {} when empty


def on_spec_change(resource_type: ResourceType, new: dict[str, Any], old: dict[str, Any]) -> None:
    """A write that changed more than metadata and status: a DaemonSet's template generation follows its
    template (the DaemonSet strategy's PrepareForUpdate)."""
    if resource_type.storage_key != DAEMON_SET_KEY:
        return
    old_spec, new_spec = old.get("spec") or {}, new.get("spec") or {}
    annotations = new["metadata"].setdefault("annotations", {})
    current = int((old["metadata"].get("annotations") or {}).get(TEMPLATE_GENERATION_ANNOTATION, "1"))
    changed = old_spec.get("template") != new_spec.get("template")
    annotations[TEMPLATE_GENERATION_ANNOTATION] = str(current + 1 if changed else current)


def admit(
    registry: ResourceRegistry,
    resource_type: ResourceType,
    new: dict[str, Any],
    old: dict[str, Any] | None,
    *,
    strict: bool = False,
) -> dict[str, Any]:
    """The object to store (defaulted); raises Invalid (422) when a rule refuses it, and BadRequest for an
    unknown field of a custom object under `strict` field validation."""
    if not resource_type.builtin:
        served = registry.find(resource_type.group, resource_type.version, resource_type.plural)
        new = crds.admit_custom_object(served or resource_type, new, old, strict=strict)
    if resource_type.storage_key == CRD_KEY:
        crds.validate_definition(new)
    if resource_type.storage_key in (CLAIM_KEY, TEMPLATE_KEY):
        _validate_opaque_parameters(resource_type, new)
    if old is not None:
        for path in _IMMUTABLE.get(resource_type.storage_key, ()):
            if _at(new, path) != _at(old, path):
                name = new["metadata"]["name"]
                raise Invalid(
                    f'{resource_type.kind}.{resource_type.group} "{name}" is invalid: {".".join(path)}: '
                    'Invalid value: "object": field is immutable'
                )
    return new


def _validate_opaque_parameters(resource_type: ResourceType, obj: dict[str, Any]) -> None:
    """A claim's (or template's) opaque config parameters must be a JSON object: the API server's own
    validation, before any admission policy sees the object."""
    spec = obj.get("spec") or {}
    path = "spec.devices"
    if resource_type.storage_key == TEMPLATE_KEY:
        spec, path = (spec.get("spec") or {}) if isinstance(spec, dict) else {}, "spec.spec.devices"
    devices = spec.get("devices") if isinstance(spec, dict) else None
    configs = (devices.get("config") or []) if isinstance(devices, dict) else []
    for index, config in enumerate(configs if isinstance(configs, list) else []):
        opaque = config.get("opaque") if isinstance(config, dict) else None
        if isinstance(opaque, dict) and "parameters" in opaque and not isinstance(opaque["parameters"], dict):
            name = (obj.get("metadata") or {}).get("name", "")
            raise Invalid(
                f'{resource_type.kind} "{name}" is invalid: {path}.config[{index}].opaque.parameters: '
                'Invalid value: "<value omitted>": must be a valid JSON object'
            )


# The DefaultTolerationSeconds admission plugin: what a new pod tolerates of a node gone silent.
NOT_READY_TAINT = "node.kubernetes.io/not-ready"
UNREACHABLE_TAINT = "node.kubernetes.io/unreachable"
DEFAULT_TOLERATION_SECONDS = 300


def default_toleration_seconds(spec: dict[str, Any]) -> None:
    """Add `tolerationSeconds: 300` tolerations of the not-ready and unreachable NoExecute taints to a pod
    spec that has none for them (DefaultTolerationSeconds)."""
    tolerations = list(spec.get("tolerations") or [])
    for key in (NOT_READY_TAINT, UNREACHABLE_TAINT):
        if any(_covers_no_execute(t, key) for t in tolerations):
            continue
        tolerations.append({"key": key, "operator": "Exists", "effect": "NoExecute",
                            "tolerationSeconds": DEFAULT_TOLERATION_SECONDS})  # fmt: skip
    spec["tolerations"] = tolerations


def _covers_no_execute(toleration: dict[str, Any], key: str) -> bool:
    if toleration.get("effect") not in (None, "", "NoExecute"):
        return False
    if toleration.get("operator") == "Exists" and not toleration.get("key"):
        return True  # tolerates every taint
    return toleration.get("key") == key


def default_service_account(namespace: str) -> dict[str, Any]:
    """The ServiceAccount the service-account controller creates in every namespace."""
    return {"metadata": {"name": DEFAULT_SERVICE_ACCOUNT, "namespace": namespace}}


def admit_service_account(namespace: str, pod: dict[str, Any], exists: Callable[[str, str], bool]) -> None:
    """Default the Pod's `spec.serviceAccountName` and refuse it (403) when its namespace has no such account.

    The message is the real plugin's (plugin/pkg/admission/serviceaccount): the pod is named as admission sees
    it, so a pod created with `generateName` is named by its prefix. `exists(namespace, name)` looks up the
    account.
    """
    spec = pod.setdefault("spec", {})
    account = spec.get("serviceAccountName") or DEFAULT_SERVICE_ACCOUNT
    spec["serviceAccountName"] = account
    if exists(namespace, account):
        return
    metadata = pod.get("metadata") or {}
    name = metadata.get("name") or metadata.get("generateName") or ""
    raise Forbidden(
        f'pods "{name}" is forbidden: error looking up service account {namespace}/{account}: '
        f'serviceaccount "{account}" not found'
    )
