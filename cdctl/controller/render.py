"""Pure renderers of the objects a ComputeDomain owns, field for field as the Go driver renders them.

`workload_claim_template`, `daemon_claim_template` and `daemon_set` take the ComputeDomain (as a dict) and the
controller settings and return the object to create (deliberate differences: the daemon's readiness probe
runs every 2 s with failureThreshold 3, not every 10 s with 1, see `daemon_set`; the daemon container runs as
root by its securityContext, as the image's user is not root; it logs in the controller's LOG_FORMAT, which
the Go daemon has no twin of); ResourceClaimTemplates come in the resource.k8s.io version the cluster serves.
No ownerReferences (the Go driver sets none; teardown is explicit).
Called by the reconcilers in cdctl.controller.resourceclaimtemplate and cdctl.controller.daemonset.
"""

from __future__ import annotations

from typing import Any

from cdctl.api.configs import API_VERSION, CHANNEL_CONFIG_KIND, DAEMON_CONFIG_KIND
from cdctl.api.isolation import CHANNEL_ISOLATION_DEVICE_CLASS
from cdctl.controller.settings import ControllerSettings
from cdctl.domain.computedomains import (
    CHANNEL_DEVICE_CLASS,
    DAEMON_DEVICE_CLASS,
    DRIVER_NAME,
    FINALIZER,
    LABEL_COMPUTE_DOMAIN,
    LABEL_TARGET,
    TARGET_DAEMON,
    TARGET_WORKLOAD,
    daemon_claim_template_name,
    daemon_set_name,
)
from cdctl.domain.retention import DEFAULT_INTERVAL_S, RetentionPolicy, format_age, format_size
from cdctl.k8s.discovery import convert_claim_template

JsonObject = dict[str, Any]
READINESS_PERIOD_S = 2  # the daemon pods' readiness probe period (the Go driver's is 10 s; see daemon_set)
DAEMON_SERVICE_ACCOUNT = "compute-domain-daemon-service-account"
DAEMON_CONTAINER = "compute-domain-daemon"
DAEMON_CLAIM = "compute-domain-daemon"
# The image runs as 65532 (see the Dockerfile); the daemon writes its domain directory (/imexd) and
# /etc/hosts, both root's: the plugin creates the first, the kubelet mounts the second. The Go driver's image
# runs as root, so its template says nothing; ours must say root outright. Root, but no more: not privileged,
# no escalation.
DAEMON_SECURITY_CONTEXT = {
    "runAsUser": 0,
    "runAsGroup": 0,
    "privileged": False,
    "allowPrivilegeEscalation": False,
}


def domain_uid(cd: JsonObject) -> str:
    return str(cd["metadata"]["uid"])


def channel_template_name(cd: JsonObject) -> str:
    return str(cd.get("spec", {}).get("channel", {}).get("resourceClaimTemplate", {}).get("name", ""))


def _claim_template(
    name: str, namespace: str, uid: str, target: str, request: str, device_class: str, parameters: JsonObject
) -> JsonObject:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "finalizers": [FINALIZER],
            "labels": {LABEL_COMPUTE_DOMAIN: uid, LABEL_TARGET: target},
        },
        "spec": {
            "spec": {
                "devices": {
                    "requests": [{"name": request, "exactly": {"deviceClassName": device_class}}],
                    "config": [
                        {"requests": [request], "opaque": {"driver": DRIVER_NAME, "parameters": parameters}}
                    ],
                }
            }
        },
    }


def workload_claim_template(
    cd: JsonObject, resource_version: str, *, channel_isolation: bool = False
) -> JsonObject:
    """The channel template users reference: in the domain's namespace, named by the domain's spec.

    Under `channel` isolation it requests one device of the shared channel class, and every claim made from
    it carries the domain's label (`spec.metadata.labels`): the controller follows those claims to assign
    the domain a channel in each clique they are allocated in."""
    uid = domain_uid(cd)
    parameters: JsonObject = {"apiVersion": API_VERSION, "kind": CHANNEL_CONFIG_KIND, "domainID": uid}
    allocation_mode = cd.get("spec", {}).get("channel", {}).get("allocationMode")
    if allocation_mode:
        parameters["allocationMode"] = allocation_mode
    template = _claim_template(
        channel_template_name(cd),
        str(cd["metadata"]["namespace"]),
        uid,
        TARGET_WORKLOAD,
        "channel",
        CHANNEL_ISOLATION_DEVICE_CLASS if channel_isolation else CHANNEL_DEVICE_CLASS,
        parameters,
    )
    if channel_isolation:
        template["spec"]["metadata"] = {"labels": {LABEL_COMPUTE_DOMAIN: uid}}
    return convert_claim_template(template, resource_version)


def daemon_claim_template(cd: JsonObject, namespace: str, resource_version: str) -> JsonObject:
    """The template of each daemon pod's `daemon-0` claim, beside the DaemonSet in `namespace`."""
    uid = domain_uid(cd)
    parameters: JsonObject = {"apiVersion": API_VERSION, "kind": DAEMON_CONFIG_KIND, "domainID": uid}
    template = _claim_template(
        daemon_claim_template_name(uid),
        namespace,
        uid,
        TARGET_DAEMON,
        "daemon",
        DAEMON_DEVICE_CLASS,
        parameters,
    )
    return convert_claim_template(template, resource_version)


def _field_env(name: str, path: str) -> JsonObject:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def _exec_probe(*, initial_delay_s: int, period_s: int, timeout_s: int, failure_threshold: int) -> JsonObject:
    return {
        "exec": {"command": ["cdctl", "daemon", "check"]},
        "initialDelaySeconds": initial_delay_s,
        "periodSeconds": period_s,
        "timeoutSeconds": timeout_s,
        "failureThreshold": failure_threshold,
    }


def _retention_env(settings: ControllerSettings) -> list[JsonObject]:
    """The daemons keep their logs under the controller's retention policy; only a policy other than the
    default is spelled out, so that the DaemonSets (and their pods) of an upgrade that keeps it do not change.
    """
    policy, default = settings.retention, RetentionPolicy()
    env = []
    if policy.age_s != default.age_s:
        env.append({"name": "CDCTL_RETENTION_AGE", "value": format_age(policy.age_s)})
    if policy.size_bytes != default.size_bytes:
        env.append({"name": "CDCTL_RETENTION_SIZE", "value": format_size(policy.size_bytes)})
    if settings.retention_interval_s != DEFAULT_INTERVAL_S:
        env.append({"name": "CDCTL_RETENTION_INTERVAL", "value": format_age(settings.retention_interval_s)})
    return env


def daemon_set(cd: JsonObject, namespace: str, settings: ControllerSettings) -> JsonObject:
    """The domain's IMEX daemon DaemonSet: one pod on each node labelled with the domain's uid."""
    uid = domain_uid(cd)
    labels = {LABEL_COMPUTE_DOMAIN: uid}
    pod_spec: JsonObject = {
        "serviceAccountName": DAEMON_SERVICE_ACCOUNT,
        "nodeSelector": {LABEL_COMPUTE_DOMAIN: uid},
        "tolerations": [
            {"operator": "Exists", "effect": effect}
            for effect in ("NoSchedule", "NoExecute", "PreferNoSchedule")
        ],
        "resourceClaims": [
            {"name": DAEMON_CLAIM, "resourceClaimTemplateName": daemon_claim_template_name(uid)}
        ],
        "containers": [
            {
                "name": DAEMON_CONTAINER,
                "image": settings.image_name,
                "command": ["cdctl", "daemon", "run"],
                "resources": {"claims": [{"name": DAEMON_CLAIM}]},
                "securityContext": dict(DAEMON_SECURITY_CONTEXT),
                "env": [
                    {"name": "LOG_VERBOSITY", "value": str(settings.log_verbosity_cd_daemon)},
                    {"name": "LOG_FORMAT", "value": settings.log_format},
                    {"name": "MAX_NODES_PER_IMEX_DOMAIN", "value": str(settings.max_nodes_per_imex_domain)},
                    _field_env("NODE_NAME", "spec.nodeName"),
                    _field_env("POD_IP", "status.podIP"),
                    _field_env("POD_UID", "metadata.uid"),
                    _field_env("POD_NAME", "metadata.name"),
                    _field_env("POD_NAMESPACE", "metadata.namespace"),
                    {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"},
                    {"name": "FEATURE_GATES", "value": settings.feature_gates.to_string()},
                    *_retention_env(settings),
                ],
                "startupProbe": _exec_probe(
                    initial_delay_s=0, period_s=1, timeout_s=10, failure_threshold=1200
                ),
                "livenessProbe": _exec_probe(
                    initial_delay_s=0, period_s=60, timeout_s=10, failure_threshold=20
                ),
                # The Go driver probes readiness every 10 s (failureThreshold 1). While a clique fills, each
                # new peer holds IMEX at NOT_READY until its own IMEX is up, so a probe landing in that gap
                # left the pod NotReady, and its node's channel Prepare waiting, for the rest of 10 s. Every
                # 2 s with failureThreshold 3: a pod turns Ready within 2 s of IMEX, a gap of under 4 s
                # does not take a Ready pod out, and a failed daemon is NotReady within 6 s (10 s before).
                "readinessProbe": _exec_probe(
                    initial_delay_s=0, period_s=READINESS_PERIOD_S, timeout_s=10, failure_threshold=3
                ),
            }
        ],
    }
    if settings.daemon_image_pull_secret_names:
        pod_spec["imagePullSecrets"] = [{"name": name} for name in settings.daemon_image_pull_secret_names]
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {
            "name": daemon_set_name(uid),
            "namespace": namespace,
            "finalizers": [FINALIZER],
            "labels": dict(labels),
        },
        "spec": {
            "selector": {"matchLabels": dict(labels)},
            "template": {"metadata": {"labels": dict(labels)}, "spec": pod_spec},
        },
    }
