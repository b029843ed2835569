"""The shared IMEX daemon's identity (channel isolation, driver-managed) under the chart's RBAC and admission
policies. It reads its namespace's pods (its peers) and sets its own pod's clique label, nothing else. A
compromised shared daemon, which every domain on its node relies on, still cannot rewrite the privileged
kubelet plugin pod beside it, another node's daemon pod, its own pod's spec or other labels, the clique
objects that carry every domain's channel, Nodes, ResourceSlices or Secrets."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from cdctl.domain.computedomains import LABEL_CLIQUE_ID
from cdctl.k8s.resources import COMPUTE_DOMAIN_CLIQUES, NODES, PODS
from cdctl.k8s.rest import KubeApi
from cdctl.sim.apiserver.identity import service_account_token
from tests.chart.enforcing import enforcing_server, identity, refused, seed

NAMESPACE = "cdctl-system"
VALUES = {"resources": {"computeDomains": {"imex": {"isolation": "channel"}}}}
ACCOUNT = "cdctl-imex-daemon"
PLUGIN_POD = "cdctl-kubelet-plugin-abcde"
CLIQUE = "cdctl-test.7"


def pod(name: str, node: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"app.kubernetes.io/component": "imex-daemon"}},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "cdctl:1"}]},
    }


@pytest.fixture
async def daemon(tmp_path: Path) -> AsyncIterator[KubeApi]:
    """The shared daemon of pod s0 on node n0; s1 on n1 and the kubelet plugin's pod beside it."""
    async with enforcing_server(NAMESPACE, VALUES) as server:
        for name, node in (("s0", "n0"), ("s1", "n1"), (PLUGIN_POD, "n0")):
            seed(server, "", "pods", NAMESPACE, pod(name, node))
        seed(server, "", "nodes", "", {"metadata": {"name": "n0"}})
        seed(server, "apiextensions.k8s.io", "customresourcedefinitions", "", _clique_crd())
        seed(
            server, "resource.nvidia.com", "computedomaincliques", NAMESPACE,
            {"metadata": {"name": f"d0000000-0000-4000-8000-000000000001.{CLIQUE}"}, "imexChannel": 5},
        )  # fmt: skip
        token = service_account_token(NAMESPACE, ACCOUNT, pod="s0", pod_uid="u0", node="n0")
        async with identity(server, tmp_path, token) as api:
            yield api


def _clique_crd() -> dict[str, Any]:
    from cdctl.sim.rack.chart import crds

    return next(c for c in crds() if c["spec"]["names"]["plural"] == "computedomaincliques")


def path(name: str) -> str:
    return PODS.object_path(NAMESPACE, name)


async def test_it_labels_its_own_pod_and_lists_its_peers(daemon: KubeApi) -> None:
    patched = await daemon.merge_patch(path("s0"), {"metadata": {"labels": {LABEL_CLIQUE_ID: CLIQUE}}})
    assert patched["metadata"]["labels"][LABEL_CLIQUE_ID] == CLIQUE
    listing = await daemon.list_objects(PODS.collection_path(NAMESPACE))
    assert {p["metadata"]["name"] for p in listing["items"]} >= {"s0", "s1"}


async def test_it_cannot_label_another_daemons_pod_or_the_plugins(daemon: KubeApi) -> None:
    for other in ("s1", PLUGIN_POD):
        status = await refused(
            daemon.merge_patch(path(other), {"metadata": {"labels": {LABEL_CLIQUE_ID: "x"}}})
        )
        assert status == 422
    image = [{"op": "replace", "path": "/spec/containers/0/image", "value": "attacker:latest"}]
    assert await refused(daemon.json_patch(path(PLUGIN_POD), image)) == 422


@pytest.mark.parametrize(
    "patch",
    [
        {"spec": {"containers": [{"name": "c", "image": "attacker:latest"}]}},
        {"metadata": {"labels": {"app.kubernetes.io/component": "other"}}},
        {"metadata": {"annotations": {"a": "b"}}},
    ],
)
async def test_it_may_change_nothing_else_on_its_own_pod(daemon: KubeApi, patch: dict[str, Any]) -> None:
    assert await refused(daemon.merge_patch(path("s0"), patch)) == 422


async def test_it_cannot_create_or_delete_pods(daemon: KubeApi) -> None:
    assert await refused(daemon.create(PODS.collection_path(NAMESPACE), pod("evil", "n0"))) in (403, 422)
    assert await refused(daemon.delete(path("s1"))) in (403, 422)


async def test_it_cannot_touch_the_cliques_that_carry_every_domains_channel(daemon: KubeApi) -> None:
    name = f"d0000000-0000-4000-8000-000000000001.{CLIQUE}"
    clique = COMPUTE_DOMAIN_CLIQUES.object_path(NAMESPACE, name)
    assert await refused(daemon.get(clique)) == 403
    assert await refused(daemon.merge_patch(clique, {"imexChannel": 6})) == 403
    body = {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomainClique",
        "metadata": {"name": "x"},
    }
    assert await refused(daemon.create(COMPUTE_DOMAIN_CLIQUES.collection_path(NAMESPACE), body)) == 403


async def test_it_cannot_write_nodes_slices_or_read_secrets(daemon: KubeApi) -> None:
    assert (
        await refused(daemon.merge_patch(NODES.object_path(None, "n0"), {"metadata": {"labels": {"a": "b"}}}))
        == 403
    )
    slices = "/apis/resource.k8s.io/v1/resourceslices"
    body = {"metadata": {"name": "s"}, "spec": {"driver": "compute-domain.nvidia.com", "nodeName": "n0"}}
    assert await refused(daemon.create(slices, body)) == 403
    assert await refused(daemon.list_objects(f"/api/v1/namespaces/{NAMESPACE}/secrets")) == 403
    assert await refused(daemon.list_objects("/api/v1/pods")) == 403  # pods of other namespaces
