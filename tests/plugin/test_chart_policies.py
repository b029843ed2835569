"""The kubelet plugin's identity under the chart's RBAC and admission policies: on its own node it may set the
ComputeDomain label (and, with kubeletPlugin.gpuCliqueLabelEnabled, nvidia.com/gpu.clique) and publish the
driver's ResourceSlices, and nothing more. A compromised plugin cannot
cordon or taint another node, relabel one, change its own node otherwise, or write another node's or another
driver's slices.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from cdctl.api.refs import GPU_CLIQUE_LABEL
from cdctl.domain.computedomains import DRIVER_NAME, LABEL_COMPUTE_DOMAIN
from cdctl.k8s.nodes import set_gpu_clique_label
from cdctl.k8s.resources import NODES
from cdctl.k8s.rest import KubeApi
from cdctl.sim.apiserver.identity import service_account_token
from tests.chart.conftest import NAMESPACE
from tests.chart.enforcing import enforcing_server, identity, refused, seed

PLUGIN_ACCOUNT = "cdctl-kubelet-plugin"
SLICES = "/apis/resource.k8s.io/v1/resourceslices"
TAINT = {"spec": {"taints": [{"key": "evil", "effect": "NoExecute"}]}}


def a_slice(name: str, node: str, driver: str = DRIVER_NAME) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node, "resourceSliceCount": 1},
            "devices": [],
        },
    }


@pytest.fixture
async def plugin(tmp_path: Path) -> AsyncIterator[KubeApi]:
    """The plugin of node n0 (its token bound to its pod there), with node n1 and n1's slice beside it."""
    async with enforcing_server(NAMESPACE) as server:
        for node in ("n0", "n1"):
            seed(
                server,
                "",
                "nodes",
                "",
                {"metadata": {"name": node, "labels": {"nvidia.com/gpu.clique": "c.1"}}},
            )
        seed(server, "resource.k8s.io", "resourceslices", "", a_slice("n1-slice", "n1"))
        token = service_account_token(NAMESPACE, PLUGIN_ACCOUNT, pod="plugin-n0", pod_uid="u0", node="n0")
        async with identity(server, tmp_path, token) as api:
            yield api


def node(name: str) -> str:
    return NODES.object_path(None, name)


async def test_the_plugin_sets_its_own_nodes_compute_domain_label(plugin: KubeApi) -> None:
    patched = await plugin.merge_patch(node("n0"), {"metadata": {"labels": {LABEL_COMPUTE_DOMAIN: "uid-1"}}})
    assert patched["metadata"]["labels"][LABEL_COMPUTE_DOMAIN] == "uid-1"
    cleared = await plugin.merge_patch(node("n0"), {"metadata": {"labels": {LABEL_COMPUTE_DOMAIN: None}}})
    assert LABEL_COMPUTE_DOMAIN not in cleared["metadata"].get("labels", {})


@pytest.mark.parametrize(
    "patch",
    [
        {"spec": {"unschedulable": True}},
        TAINT,
        {"metadata": {"labels": {LABEL_COMPUTE_DOMAIN: "uid-1"}}},
    ],
    ids=["cordon", "taint", "label"],
)
async def test_the_plugin_cannot_touch_another_node(plugin: KubeApi, patch: dict[str, Any]) -> None:
    assert await refused(plugin.merge_patch(node("n1"), patch)) == 422


@pytest.mark.parametrize(
    "patch",
    [
        {"spec": {"unschedulable": True}},
        TAINT,
        {"metadata": {"labels": {"nvidia.com/gpu.clique": "c.2"}}},
        {"metadata": {"labels": {"node-role.kubernetes.io/control-plane": ""}}},
        {"metadata": {"annotations": {"a": "b"}}},
    ],
    ids=["cordon", "taint", "clique-label", "new-label", "annotation"],
)
async def test_the_plugin_may_change_only_the_compute_domain_label_on_its_node(
    plugin: KubeApi, patch: dict[str, Any]
) -> None:
    assert await refused(plugin.merge_patch(node("n0"), patch)) == 422


async def test_the_plugin_publishes_only_its_drivers_slices_of_its_node(plugin: KubeApi) -> None:
    await plugin.create(SLICES, a_slice("n0-slice", "n0"))
    assert await refused(plugin.create(SLICES, a_slice("n1-other", "n1"))) == 422
    assert await refused(plugin.create(SLICES, a_slice("n0-gpu", "n0", driver="gpu.nvidia.com"))) == 422
    assert await refused(plugin.delete(f"{SLICES}/n1-slice")) == 422
    moved = a_slice("n1-slice", "n0")
    moved["spec"]["pool"]["name"] = "n1"  # the pool name is immutable; the node name is not
    assert await refused(plugin.replace(f"{SLICES}/n1-slice", moved)) == 422  # taking over n1's slice


async def test_a_plugin_token_bound_to_no_node_writes_no_slice(tmp_path: Path) -> None:
    async with (
        enforcing_server(NAMESPACE) as server,
        identity(server, tmp_path, service_account_token(NAMESPACE, PLUGIN_ACCOUNT)) as api,
    ):
        assert await refused(api.create(SLICES, a_slice("n0-slice", "n0"))) == 422


@pytest.fixture(params=["driver-managed", "host-managed"])
async def labelling_plugin(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[tuple[KubeApi, bool]]:
    """The plugin of node n0 with kubeletPlugin.gpuCliqueLabelEnabled, in either IMEX mode; True when
    driver-managed (so it also writes the ComputeDomain label)."""
    driver_managed = request.param == "driver-managed"
    values: dict[str, Any] = {"kubeletPlugin": {"gpuCliqueLabelEnabled": True}}
    if not driver_managed:
        values["featureGates"] = {"HostManagedIMEX": True}
    async with enforcing_server(NAMESPACE, values) as server:
        for name in ("n0", "n1"):
            seed(server, "", "nodes", "", {"metadata": {"name": name, "labels": {GPU_CLIQUE_LABEL: "c.1"}}})
        token = service_account_token(NAMESPACE, PLUGIN_ACCOUNT, pod="plugin-n0", pod_uid="u0", node="n0")
        async with identity(server, tmp_path, token) as api:
            yield api, driver_managed


async def test_with_the_clique_label_on_the_plugin_sets_it_on_its_own_node(
    labelling_plugin: tuple[KubeApi, bool],
) -> None:
    plugin, _ = labelling_plugin
    await set_gpu_clique_label(plugin, "n0", "c.2")
    assert (await plugin.get(node("n0")))["metadata"]["labels"][GPU_CLIQUE_LABEL] == "c.2"
    await set_gpu_clique_label(plugin, "n0", "")  # no clique: the label goes
    assert GPU_CLIQUE_LABEL not in (await plugin.get(node("n0")))["metadata"].get("labels", {})


@pytest.mark.parametrize(
    ("target", "patch"),
    [
        ("n1", {"metadata": {"labels": {GPU_CLIQUE_LABEL: "c.2"}}}),
        ("n1", {"metadata": {"labels": {GPU_CLIQUE_LABEL: None}}}),
        ("n0", {"metadata": {"labels": {"nvidia.com/gpu.product": "fake"}}}),
        (
            "n0",
            {"metadata": {"labels": {GPU_CLIQUE_LABEL: "c.2", "node-role.kubernetes.io/control-plane": ""}}},
        ),
        ("n0", TAINT),
    ],
    ids=["other-node", "other-node-removal", "other-label", "piggy-backed-label", "taint"],
)
async def test_with_the_clique_label_on_the_plugin_still_writes_nothing_else(
    labelling_plugin: tuple[KubeApi, bool], target: str, patch: dict[str, Any]
) -> None:
    plugin, _ = labelling_plugin
    assert await refused(plugin.merge_patch(node(target), patch)) in (403, 422)


async def test_the_compute_domain_label_stays_driver_managed_only(
    labelling_plugin: tuple[KubeApi, bool],
) -> None:
    plugin, driver_managed = labelling_plugin
    patch = {"metadata": {"labels": {LABEL_COMPUTE_DOMAIN: "uid-1"}}}
    if driver_managed:
        await plugin.merge_patch(node("n0"), patch)
    else:
        assert await refused(plugin.merge_patch(node("n0"), patch)) == 422
