"""The chart's own CRDs served by the simulated API server: defaults, status, immutable spec, cliques."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from cdctl.sim.apiserver.errors import Invalid
from cdctl.sim.apiserver.store import ObjectStore

CRD_DIR = Path(__file__).resolve().parents[3] / "charts" / "cdctl" / "crds"
API_VERSION = "resource.nvidia.com/v1beta1"


@pytest.fixture
def store() -> ObjectStore:
    if not CRD_DIR.is_dir():
        pytest.skip("the chart's CRDs are not in this checkout")
    store = ObjectStore()
    crds = store.type_of("apiextensions.k8s.io", "customresourcedefinitions")
    for path in sorted(CRD_DIR.glob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            if document:
                store.create(crds, "", document)
    return store


def _domain(store: ObjectStore) -> dict[str, Any]:
    return store.create(
        store.type_of("resource.nvidia.com", "computedomains"),
        "default",
        {
            "apiVersion": API_VERSION,
            "kind": "ComputeDomain",
            "metadata": {"name": "cd1"},
            "spec": {"numNodes": 2, "channel": {"resourceClaimTemplate": {"name": "cd1-channel"}}},
        },
    )


def test_compute_domain_defaults_and_immutable_spec(store: ObjectStore) -> None:
    domains = store.type_of("resource.nvidia.com", "computedomains")
    created = _domain(store)
    assert created["spec"]["channel"]["allocationMode"] == "Single"
    changed = store.get(domains, "default", "cd1")
    changed["spec"]["numNodes"] = 3
    with pytest.raises(Invalid, match="immutable"):
        store.update(domains, "default", "cd1", changed)


def test_compute_domain_status_round_trips(store: ObjectStore) -> None:
    domains = store.type_of("resource.nvidia.com", "computedomains")
    domain = _domain(store)
    node = {"name": "n1", "ipAddress": "10.0.0.1", "cliqueID": "u.1", "index": 0, "status": "Ready"}
    domain["status"] = {"status": "Ready", "nodes": [node]}
    updated = store.update(domains, "default", "cd1", domain, subresource="status")
    assert updated["status"] == {"status": "Ready", "nodes": [node]}


def test_clique_daemons_are_kept(store: ObjectStore) -> None:
    cliques = store.type_of("resource.nvidia.com", "computedomaincliques")
    daemon = {"nodeName": "n1", "ipAddress": "10.0.0.1", "cliqueID": "u.1", "index": 0, "status": "NotReady"}
    created = store.create(
        cliques,
        "default",
        {
            "apiVersion": API_VERSION,
            "kind": "ComputeDomainClique",
            "metadata": {"name": "uid.u.1"},
            "daemons": [daemon],
        },
    )
    assert created["daemons"] == [daemon]
