"""What a real kube-apiserver v1.36 adds to an object it stores and answers with, beyond what a client sent.

Pure functions called by cdctl.sim.apiserver.store and cdctl.sim.apiserver.admission on every write, held to a
real server's recorded answers by tests/sim/apiserver/test_fidelity.py:
- `tracks_generation`: only some kinds carry `metadata.generation` (each registry strategy decides: Nodes,
  Events, ResourceClaims and ResourceClaimTemplates have none; custom objects always have one).
- `normalize_metadata`: ObjectMeta is a typed struct on the server, so empty labels, annotations, finalizers
  and owner references are dropped (`finalizers: []` in a patch leaves no `finalizers` key).
- `apply_scheme_defaults`: the API types' defaulting functions (k8s.io/kubernetes/pkg/apis/*/v1/defaults.go)
  for the kinds our components write: ResourceClaim(Template) requests, DaemonSets and pod specs, and the
  empty `spec.metadata` a ResourceClaimTemplate answers with.
"""

from __future__ import annotations

from typing import Any

# Built-in kinds whose registry strategy sets no generation (storage keys).
_NO_GENERATION = frozenset(
    {
        ("", "namespaces"),
        ("", "nodes"),
        ("", "events"),
        ("events.k8s.io", "events"),
        ("", "configmaps"),
        ("", "secrets"),
        ("", "serviceaccounts"),
        ("", "services"),
        ("coordination.k8s.io", "leases"),
        ("rbac.authorization.k8s.io", "clusterroles"),
        ("rbac.authorization.k8s.io", "clusterrolebindings"),
        ("rbac.authorization.k8s.io", "roles"),
        ("rbac.authorization.k8s.io", "rolebindings"),
        ("resource.k8s.io", "resourceclaims"),
        ("resource.k8s.io", "resourceclaimtemplates"),
    }
)
_EMPTY_DROPPED = ("labels", "annotations", "finalizers", "ownerReferences")
_CONTAINER_LISTS = ("initContainers", "containers", "ephemeralContainers")
_PROBES = ("livenessProbe", "readinessProbe", "startupProbe")
_PROBE_DEFAULTS = {"timeoutSeconds": 1, "periodSeconds": 10, "successThreshold": 1, "failureThreshold": 3}
_DEFAULT_MODE = 0o644  # configMap, secret, projected and downwardAPI volumes


def tracks_generation(storage_key: tuple[str, str], builtin: bool) -> bool:
    return not builtin or storage_key not in _NO_GENERATION


def normalize_metadata(obj: dict[str, Any]) -> None:
    metadata = obj.get("metadata")
    if not isinstance(metadata, dict):
        return
    for key in _EMPTY_DROPPED:
        if key in metadata and not metadata[key]:
            del metadata[key]


def apply_scheme_defaults(storage_key: tuple[str, str], obj: dict[str, Any]) -> None:
    """Default `obj` (the storage version of `storage_key`) in place, on create and on update alike."""
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return
    if storage_key == ("resource.k8s.io", "resourceclaims"):
        _default_claim_spec(spec)
    elif storage_key == ("resource.k8s.io", "resourceclaimtemplates"):
        if not isinstance(spec.get("metadata"), dict):
            spec["metadata"] = {}
        if isinstance(spec.get("spec"), dict):
            _default_claim_spec(spec["spec"])
    elif storage_key == ("apps", "daemonsets"):
        _default_daemon_set(spec)
    elif storage_key == ("", "pods"):
        _default_pod_spec(spec, pod=True)


def _default_claim_spec(spec: dict[str, Any]) -> None:
    devices = spec.get("devices")
    for request in (devices.get("requests") or []) if isinstance(devices, dict) else []:
        exactly = request.get("exactly") if isinstance(request, dict) else None
        candidates = [exactly] if isinstance(exactly, dict) else []
        candidates += [s for s in request.get("firstAvailable") or [] if isinstance(s, dict)]
        for device_request in candidates:
            device_request.setdefault("allocationMode", "ExactCount")
            if device_request["allocationMode"] == "ExactCount":
                device_request.setdefault("count", 1)


def _default_daemon_set(spec: dict[str, Any]) -> None:
    strategy = spec.setdefault("updateStrategy", {})
    strategy.setdefault("type", "RollingUpdate")
    if strategy["type"] == "RollingUpdate":
        rolling = strategy.setdefault("rollingUpdate", {})
        rolling.setdefault("maxUnavailable", 1)
        rolling.setdefault("maxSurge", 0)
    spec.setdefault("revisionHistoryLimit", 10)
    template = spec.get("template")
    if isinstance(template, dict) and isinstance(template.get("spec"), dict):
        _default_pod_spec(template["spec"], pod=False)


def _default_pod_spec(spec: dict[str, Any], *, pod: bool) -> None:
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("securityContext", {})
    spec.setdefault("schedulerName", "default-scheduler")
    if spec.get("serviceAccountName"):
        spec.setdefault("serviceAccount", spec["serviceAccountName"])  # the deprecated alias, kept in step
    if pod:
        spec.setdefault("enableServiceLinks", True)
    for list_name in _CONTAINER_LISTS:
        for container in spec.get(list_name) or []:
            if isinstance(container, dict):
                _default_container(container)
    for volume in spec.get("volumes") or []:
        if isinstance(volume, dict):
            _default_volume(volume)


def _default_container(container: dict[str, Any]) -> None:
    container.setdefault("terminationMessagePath", "/dev/termination-log")
    container.setdefault("terminationMessagePolicy", "File")
    image = str(container.get("image") or "")
    tag = image.rsplit("/", 1)[-1]
    latest = "@" not in image and (":" not in tag or tag.endswith(":latest"))
    container.setdefault("imagePullPolicy", "Always" if latest else "IfNotPresent")
    for port in container.get("ports") or []:
        if isinstance(port, dict):
            port.setdefault("protocol", "TCP")
    for env in container.get("env") or []:
        field_ref = ((env or {}).get("valueFrom") or {}).get("fieldRef")
        if isinstance(field_ref, dict):
            field_ref.setdefault("apiVersion", "v1")
    for probe_name in _PROBES:
        probe = container.get(probe_name)
        if isinstance(probe, dict):
            for key, value in _PROBE_DEFAULTS.items():
                probe.setdefault(key, value)


def _default_volume(volume: dict[str, Any]) -> None:
    if isinstance(volume.get("hostPath"), dict):
        volume["hostPath"].setdefault("type", "")
    for source in ("configMap", "secret", "projected", "downwardAPI"):
        if isinstance(volume.get(source), dict):
            volume[source].setdefault("defaultMode", _DEFAULT_MODE)
