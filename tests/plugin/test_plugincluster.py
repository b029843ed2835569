"""The plugin's Kubernetes adapter against the simulated API server: claims, domains, labels, readiness."""

from __future__ import annotations

import pytest

from cdctl.api.refs import COMPUTE_DOMAIN_LABEL, DomainInfo
from cdctl.domain.errors import RetriableError
from cdctl.k8s.plugincluster import KubeClusterPort
from cdctl.k8s.rest import KubeApi
from cdctl.sim.apiserver.server import ApiServer
from tests.plugin.conftest import SIM_NODE as NODE
from tests.plugin.fakes import DOM1, DOM2

CDS = "/apis/resource.nvidia.com/v1beta1/namespaces/default/computedomains"
CLIQUES = "/apis/resource.nvidia.com/v1beta1/namespaces/default/computedomaincliques"


async def make_domain(api: KubeApi, name: str = "cd") -> DomainInfo:
    cd = await api.create(
        CDS,
        {
            "apiVersion": "resource.nvidia.com/v1beta1",
            "kind": "ComputeDomain",
            "metadata": {"name": name},
            "spec": {"numNodes": 0, "channel": {"resourceClaimTemplate": {"name": f"{name}-ch"}}},
        },
    )
    return DomainInfo(cd["metadata"]["uid"], name, "default")


def port(api: KubeApi, cliques: bool = True, watch_claims: bool = False) -> KubeClusterPort:
    return KubeClusterPort(
        api, resource_version="v1", driver_namespace="default", node_uid="x", use_cliques=cliques,
        watch_claims=watch_claims,
    )  # fmt: skip


async def node_label(api: KubeApi) -> str | None:
    return ((await api.get(f"/api/v1/nodes/{NODE}"))["metadata"].get("labels") or {}).get(
        COMPUTE_DOMAIN_LABEL
    )


async def test_domain_lookup_by_uid_and_missing_claim(env: tuple[ApiServer, KubeApi, object]) -> None:
    _, api, _ = env
    cluster = port(api)
    domain = await make_domain(api)
    assert await cluster.get_compute_domain(domain.uid) == domain  # found right after creation
    assert await cluster.get_compute_domain("no-such-uid") is None
    assert await cluster.get_claim("default", "nope") is None


async def test_labels_conflict_and_removal(env: tuple[ApiServer, KubeApi, object]) -> None:
    _, api, _ = env
    cluster = port(api)
    await cluster.add_node_label(NODE, DOM1)
    await cluster.add_node_label(NODE, DOM1)  # idempotent
    assert await node_label(api) == DOM1
    with pytest.raises(RetriableError, match="different ComputeDomain"):
        await cluster.add_node_label(NODE, DOM2)
    await cluster.remove_node_label(NODE, DOM2)  # not ours: left alone
    assert await node_label(api) == DOM1
    await cluster.remove_node_label(NODE, DOM1)
    assert await node_label(api) is None
    await cluster.remove_node_label("gone-node", DOM1)  # a missing node is nothing to unlabel


async def test_daemon_readiness_from_clique_then_domain_status(
    env: tuple[ApiServer, KubeApi, object],
) -> None:
    _, api, _ = env
    domain = await make_domain(api)
    cluster = port(api)
    assert not await cluster.daemon_ready(domain, NODE, "u.1")
    await api.create(
        CLIQUES,
        {
            "apiVersion": "resource.nvidia.com/v1beta1",
            "kind": "ComputeDomainClique",
            "metadata": {"name": f"{domain.uid}.u.1"},
            "daemons": [
                {"nodeName": NODE, "ipAddress": "10.0.0.1", "cliqueID": "u.1", "index": 0, "status": "Ready"}
            ],
        },
    )
    assert await cluster.daemon_ready(domain, NODE, "u.1")
    assert not await cluster.daemon_ready(domain, "other-node", "u.1")
    # legacy mode (gate off) and no-clique nodes read the domain's status.nodes
    legacy = port(api, cliques=False)
    assert not await legacy.daemon_ready(domain, NODE, "u.1")
    cd = await api.get(f"{CDS}/cd")
    cd["status"] = {
        "status": "Ready",
        "nodes": [{"name": NODE, "ipAddress": "10.0.0.1", "cliqueID": "", "index": -1, "status": "Ready"}],
    }
    await api.replace(f"{CDS}/cd/status", cd)
    assert await legacy.daemon_ready(domain, NODE, "u.1")
    assert await cluster.daemon_ready(domain, NODE, "")
