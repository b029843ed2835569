"""RBAC per component, least privilege: exactly the rules each component needs in each mode, never beyond
the Go driver's rules for the same component except where a cdctl requirement asks for it (with the reason).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest
from helm_python import chart as hc

from tests.chart.conftest import NAMESPACE, SCENARIOS, render_objects

Grants = dict[tuple[str, str, str], set[str]]  # (namespace or "*", apiGroup, resource) -> verbs

CONTROLLER = f"{NAMESPACE}/cdctl-controller"
PLUGIN = f"{NAMESPACE}/cdctl-kubelet-plugin"
DAEMON = f"{NAMESPACE}/compute-domain-daemon-service-account"

CRUD = {"get", "list", "watch", "create", "update", "delete"}
READ = {"get", "list", "watch"}

# The Go driver's chart (reference section 6), per component: (apiGroup, resource) -> verbs.
GO_UPPER_BOUND: dict[str, dict[tuple[str, str], set[str]]] = {
    "controller": {
        ("resource.nvidia.com", "computedomains"): READ | {"update"},
        ("resource.nvidia.com", "computedomains/status"): {"update"},
        ("resource.k8s.io", "resourceclaimtemplates"): CRUD,
        ("coordination.k8s.io", "leases"): {"get", "create", "update"},
        ("", "nodes"): READ | {"update"},
        ("", "pods"): READ,
        ("apps", "daemonsets"): CRUD | {"patch"},
        ("resource.nvidia.com", "computedomaincliques"): READ | {"update"},
    },
    "kubelet-plugin": {
        ("resource.nvidia.com", "computedomains"): READ,
        ("resource.k8s.io", "resourceclaims"): READ,
        ("resource.k8s.io", "resourceslices"): CRUD,
        ("", "nodes"): READ | {"update"},
        ("", "pods"): READ,
        ("resource.nvidia.com", "computedomaincliques"): {"get"},
    },
    "daemon": {
        ("resource.nvidia.com", "computedomains"): READ | {"update", "patch"},
        ("resource.nvidia.com", "computedomains/status"): READ | {"update", "patch"},
        ("resource.nvidia.com", "computedomaincliques"): READ | {"create", "update", "patch"},
        ("", "pods"): READ | {"patch"},
    },
}
# Beyond the Go driver, on purpose.
EXCEPTIONS: dict[str, dict[tuple[str, str], set[str]]] = {
    # The controller, not each daemon, keeps the cliques (it assigns indices centrally) and removes them.
    "controller": {
        ("resource.nvidia.com", "computedomaincliques"): {"create", "delete"},
        ("", "events"): {"create", "patch"},  # Events on ComputeDomains a user must act on.
        # Rack domains (controller.rackDomains.enabled): the controller creates one ComputeDomain per rack,
        # deletes it when the rack is gone, and reads claims to keep a domain a workload still uses.
        ("resource.nvidia.com", "computedomains"): {"create", "delete"},
        # Channel isolation: the workload claims say where each domain needs a channel.
        ("resource.k8s.io", "resourceclaims"): READ,
        # The Node label is removed by a patch of that label alone (the controller admission policy keeps it
        # so), not by an update of the whole Node.
        ("", "nodes"): {"patch"},
        # The event-log endpoint (collector.enabled) reviews each reader's token: cdctl collect.
        ("authentication.k8s.io", "tokenreviews"): {"create"},
    },
    "kubelet-plugin": {
        ("", "events"): {"create", "patch"},  # Events on the Node (fabric not ready).
        # Prepare reads readiness from watched cliques, and decides the Node label on the watched Node, which
        # it patches (with the copy's resourceVersion) instead of replacing the whole object.
        ("resource.nvidia.com", "computedomaincliques"): READ,
        ("", "nodes"): {"patch"},
        # The event-log endpoint (collector.enabled) reviews each reader's token: cdctl collect.
        ("authentication.k8s.io", "tokenreviews"): {"create"},
    },
    "daemon": {},
}
ACCOUNTS = {"controller": CONTROLLER, "kubelet-plugin": PLUGIN, "daemon": DAEMON}


def _grants(objects: list[dict[str, Any]]) -> dict[str, Grants]:
    """What each service account ("ns/name") may do, resolved through the bindings."""
    roles: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for obj in objects:
        if obj["kind"] in {"ClusterRole", "Role"}:
            roles[(obj["kind"], obj["metadata"].get("namespace", "*"), obj["metadata"]["name"])] = obj[
                "rules"
            ]
    grants: dict[str, Grants] = defaultdict(lambda: defaultdict(set))
    for obj in objects:
        if obj["kind"] not in {"ClusterRoleBinding", "RoleBinding"}:
            continue
        namespace = obj["metadata"].get("namespace", "*")
        ref = obj["roleRef"]
        rules = roles[(ref["kind"], namespace if ref["kind"] == "Role" else "*", ref["name"])]
        for subject in obj["subjects"]:
            account = f"{subject['namespace']}/{subject['name']}"
            for rule in rules:
                assert "resourceNames" not in rule and "nonResourceURLs" not in rule
                for group in rule["apiGroups"]:
                    for resource in rule["resources"]:
                        grants[account][(namespace, group, resource)] |= set(rule["verbs"])
    return grants


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_no_component_exceeds_the_go_drivers_rules(
    scenario: str, rendered: dict[str, list[dict[str, Any]]]
) -> None:
    grants = _grants(rendered[scenario])
    for component, account in ACCOUNTS.items():
        for (_, group, resource), verbs in grants.get(account, {}).items():
            allowed = GO_UPPER_BOUND[component].get((group, resource), set()) | EXCEPTIONS[component].get(
                (group, resource), set()
            )
            assert verbs <= allowed, (component, group, resource, verbs - allowed)
            assert "*" not in verbs


def test_default_mode_grants_exactly_what_is_needed(rendered: dict[str, list[dict[str, Any]]]) -> None:
    grants = _grants(rendered["default"])
    assert grants[CONTROLLER] == {
        ("*", "resource.nvidia.com", "computedomains"): READ | {"update"},
        ("*", "resource.nvidia.com", "computedomains/status"): {"update"},
        ("*", "resource.k8s.io", "resourceclaimtemplates"): CRUD,
        ("*", "", "events"): {"create", "patch"},
        ("*", "authentication.k8s.io", "tokenreviews"): {"create"},
        ("*", "", "nodes"): READ | {"patch"},
        (NAMESPACE, "apps", "daemonsets"): CRUD | {"patch"},
        (NAMESPACE, "", "pods"): READ,
        (NAMESPACE, "resource.nvidia.com", "computedomaincliques"): CRUD,
    }
    assert grants[PLUGIN] == {
        ("*", "resource.nvidia.com", "computedomains"): READ,
        ("*", "resource.k8s.io", "resourceclaims"): {"get"},
        ("*", "resource.k8s.io", "resourceslices"): CRUD,
        ("*", "", "nodes"): READ | {"patch"},
        ("*", "", "events"): {"create", "patch"},
        ("*", "authentication.k8s.io", "tokenreviews"): {"create"},
        (NAMESPACE, "resource.nvidia.com", "computedomaincliques"): READ,
        (NAMESPACE, "", "pods"): {"get"},  # the owner of a daemon claim, read before it is prepared
    }
    assert grants[DAEMON] == {
        (NAMESPACE, "", "pods"): {"patch"},
        (NAMESPACE, "resource.nvidia.com", "computedomaincliques"): READ,
    }


# What tearing down a domain made before a switch to a mode without per-domain daemons needs
# (controller.cleanupAfterModeSwitch): its DaemonSet read, released and deleted, its cliques deleted, its Node
# label found and patched off. Nothing creates, lists or watches DaemonSets in these modes.
CLEANUP_AFTER_SWITCH = {
    (NAMESPACE, "apps", "daemonsets"): {"get", "patch", "delete"},
    ("*", "", "nodes"): {"get", "list", "patch"},
}


def test_host_managed_mode_drops_everything_daemon_related(rendered: dict[str, list[dict[str, Any]]]) -> None:
    grants = _grants(rendered["host-managed-no-cleanup"])
    assert DAEMON not in grants
    assert grants[CONTROLLER] == {
        ("*", "resource.nvidia.com", "computedomains"): READ | {"update"},
        ("*", "resource.nvidia.com", "computedomains/status"): {"update"},
        ("*", "resource.k8s.io", "resourceclaimtemplates"): CRUD,
        ("*", "", "events"): {"create", "patch"},
        ("*", "authentication.k8s.io", "tokenreviews"): {"create"},
    }
    assert _grants(rendered["host-managed"])[CONTROLLER] == {
        **grants[CONTROLLER],
        **CLEANUP_AFTER_SWITCH,
        (NAMESPACE, "resource.nvidia.com", "computedomaincliques"): {"get", "delete"},
    }
    assert grants[PLUGIN] == {
        ("*", "resource.nvidia.com", "computedomains"): READ,
        ("*", "resource.k8s.io", "resourceclaims"): {"get"},
        ("*", "resource.k8s.io", "resourceslices"): CRUD,
        ("*", "", "nodes"): {"get"},
        ("*", "", "events"): {"create", "patch"},
        ("*", "authentication.k8s.io", "tokenreviews"): {"create"},
    }


def test_channel_isolation_grants_claims_nodes_and_cliques_and_no_daemonsets(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    common = {
        ("*", "resource.nvidia.com", "computedomains"): READ | {"update"},
        ("*", "resource.nvidia.com", "computedomains/status"): {"update"},
        ("*", "resource.k8s.io", "resourceclaimtemplates"): CRUD,
        ("*", "", "events"): {"create", "patch"},
        ("*", "authentication.k8s.io", "tokenreviews"): {"create"},
        ("*", "resource.k8s.io", "resourceclaims"): READ,
        ("*", "", "nodes"): READ,  # the clique label; a per-domain node label only from before a switch
        (NAMESPACE, "resource.nvidia.com", "computedomaincliques"): CRUD,
    }
    assert _grants(rendered["channel-no-cleanup"])[CONTROLLER] == {**common, (NAMESPACE, "", "pods"): READ}
    cleanup = {**CLEANUP_AFTER_SWITCH, ("*", "", "nodes"): READ | {"patch"}}
    assert _grants(rendered["channel-driver-managed"])[CONTROLLER] == {
        **common,
        **cleanup,
        (NAMESPACE, "", "pods"): READ,
    }
    assert _grants(rendered["channel-host-managed"])[CONTROLLER] == {**common, **cleanup}


def test_leader_election_adds_only_the_lease_in_the_release_namespace(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    without = _grants(rendered["default"])[CONTROLLER]
    with_election = _grants(rendered["leader-election"])[CONTROLLER]
    added = {key: verbs for key, verbs in with_election.items() if key not in without}
    assert added == {(NAMESPACE, "coordination.k8s.io", "leases"): {"get", "create", "update"}}


def test_additional_namespaces_get_the_namespaced_grants(rendered: dict[str, list[dict[str, Any]]]) -> None:
    grants = _grants(rendered["driver-managed"])
    assert grants[CONTROLLER][("team-a", "apps", "daemonsets")] == CRUD | {"patch"}
    assert grants["team-a/compute-domain-daemon-service-account"] == {
        ("team-a", "", "pods"): {"patch"},
        ("team-a", "resource.nvidia.com", "computedomaincliques"): READ,
    }
    # The plugin reads a daemon claim's owner pod there (the controller reuses DaemonSets it finds there),
    # and nothing else of that namespace.
    assert {k: v for k, v in grants[PLUGIN].items() if k[0] == "team-a"} == {("team-a", "", "pods"): {"get"}}
    plugin = next(o for o in rendered["driver-managed"] if o["kind"] == "DaemonSet")
    env = {e["name"]: e.get("value") for e in plugin["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["ADDITIONAL_NAMESPACES"] == "team-a"


def test_without_cliques_daemons_read_computedomains_instead(helm_chart: hc.Chart) -> None:
    values = {"featureGates": {"ComputeDomainCliques": False, "IMEXDaemonsWithDNSNames": False}}
    grants = _grants(render_objects(helm_chart, values))
    assert grants[DAEMON] == {
        ("*", "resource.nvidia.com", "computedomains"): READ,
        (NAMESPACE, "", "pods"): {"patch"},
    }
    assert (NAMESPACE, "resource.nvidia.com", "computedomaincliques") not in grants[CONTROLLER]
    assert (NAMESPACE, "resource.nvidia.com", "computedomaincliques") not in grants[PLUGIN]
    assert grants[PLUGIN][(NAMESPACE, "", "pods")] == {"get"}
