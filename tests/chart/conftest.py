"""Shared fixtures of the chart tests: the chart loaded once into the embedded Helm, and rendering helpers.

Used by every module in tests/chart. Helm (helm-python-sdk) loads the chart once per session; each render is a
call into it that returns the manifests, parsed here into plain dicts.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from helm_python import chart as hc

CHART_DIR = Path(__file__).resolve().parents[2] / "charts" / "cdctl"
RELEASE = "cdctl"
NAMESPACE = "cdctl-system"

# The value sets rendered by every test: defaults, driver-managed and host-managed modes, leader election,
# rack domains in each mode, and channel isolation in each mode.
SCENARIOS: dict[str, dict[str, Any]] = {
    "default": {},
    "driver-managed": {
        "featureGates": {"HostManagedIMEX": False, "ComputeDomainCliques": True},
        "additionalNamespaces": ["team-a"],
        "imagePullSecrets": [{"name": "registry-creds"}],
    },
    "host-managed": {"featureGates": {"HostManagedIMEX": True}},
    "host-managed-no-cleanup": {
        "featureGates": {"HostManagedIMEX": True},
        "controller": {"cleanupAfterModeSwitch": False},
    },
    "channel-no-cleanup": {
        "resources": {"computeDomains": {"imex": {"isolation": "channel"}}},
        "controller": {"cleanupAfterModeSwitch": False},
    },
    "leader-election": {"controller": {"replicas": 2, "leaderElection": {"enabled": True}}},
    "rack-domains": {
        "controller": {
            "rackDomains": {
                "enabled": True,
                "label": "ds.coreweave.com/nvlink.domain",
                "namespace": "training",
            }
        }
    },
    "rack-domains-host-managed": {
        "featureGates": {"HostManagedIMEX": True},
        "controller": {"rackDomains": {"enabled": True}},
    },
    "channel-driver-managed": {
        "resources": {"computeDomains": {"imex": {"isolation": "channel"}, "imexChannelCount": 64}}
    },
    "channel-host-managed": {
        "featureGates": {"HostManagedIMEX": True},
        "resources": {"computeDomains": {"imex": {"isolation": "channel"}}},
    },
}


@pytest.fixture(scope="session")
def helm_chart() -> Iterator[hc.Chart]:
    chart = hc.Chart.load(CHART_DIR)
    yield chart
    chart.close()


def render_objects(
    chart: hc.Chart, values: Mapping[str, Any] | None = None, *, namespace: str = NAMESPACE
) -> list[dict[str, Any]]:
    """The chart's templates rendered by Helm for `values`, as objects (CRDs not included)."""
    manifests = chart.render(dict(values or {}), name=RELEASE, namespace=namespace, is_install=True)
    objects: list[dict[str, Any]] = []
    for name in sorted(manifests):
        if not name.endswith(".yaml"):
            continue  # NOTES.txt: text shown after install, not a manifest
        for document in yaml.safe_load_all(manifests[name]):
            if document is not None:
                objects.append(document)
    return objects


def _chart_objects(namespace: str, values: Mapping[str, Any] | None, kinds: set[str]) -> list[dict[str, Any]]:
    chart = hc.Chart.load(CHART_DIR)
    try:
        objects = render_objects(chart, values, namespace=namespace)
    finally:
        chart.close()
    return [o for o in objects if o["kind"] in kinds]


def chart_rbac(namespace: str, values: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """The Roles, ClusterRoles and bindings the chart renders into `namespace`: what the simulated API server
    enforces when a component test runs under the chart's own RBAC (cdctl.sim.apiserver.rbac)."""
    return _chart_objects(namespace, values, {"ClusterRole", "Role", "ClusterRoleBinding", "RoleBinding"})


def chart_policies(namespace: str, values: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """The ValidatingAdmissionPolicies and bindings the chart renders for a release in `namespace`: what the
    simulated API server evaluates once given them (`ApiServer.load_policies`)."""
    return _chart_objects(
        namespace, values, {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
    )


def find(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]


def one(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = find(objects, kind, name)
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    """A container's env as name -> value (or the valueFrom mapping)."""
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


@pytest.fixture(scope="session")
def rendered(helm_chart: hc.Chart) -> dict[str, list[dict[str, Any]]]:
    """Every scenario rendered once per session."""
    return {name: render_objects(helm_chart, values) for name, values in SCENARIOS.items()}


@pytest.fixture(scope="session")
def crd_objects(helm_chart: hc.Chart) -> dict[str, dict[str, Any]]:
    """The chart's CRDs as Helm sees them, by kind."""
    crds: dict[str, dict[str, Any]] = {}
    for entry in helm_chart.crds:
        for document in yaml.safe_load_all(entry["data"]):
            if document is not None:
                crds[document["spec"]["names"]["kind"]] = document
    return crds
