"""The simulated kubelet over a node's life: its Lease heartbeat, a restart that keeps the Node's allocatable,
a pod status someone else changed written back, and a node that goes down and comes back: claims of pods
deleted meanwhile are unprepared by the DRA manager's reconcile, not at once."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from cdctl.sim.apiserver.store import ObjectStore
from cdctl.sim.controllers.allocator import Allocator
from cdctl.sim.controllers.claimtemplates import ClaimTemplateController
from cdctl.sim.node.kubelet import SimKubelet
from cdctl.sim.node.noderegistration import NODE_LEASE_NAMESPACE
from tests.sim.fakeplugin import serve_plugin
from tests.sim.node.conftest import claim_cluster
from tests.sim.standins import DAEMON_CLASS, DRIVER, add_pod, add_slice, add_template, get

NODE = "n1"


async def _until(condition: Callable[[], bool]) -> None:
    async with asyncio.timeout(10):
        while True:
            if condition():
                return
            await asyncio.sleep(0.05)


def _ready(store: ObjectStore, name: str) -> str:
    pod = get(store, "", "pods", name)
    return next(c["status"] for c in pod["status"]["conditions"] if c["type"] == "Ready")


def test_registration_renews_the_node_lease_owned_by_the_node_and_keeps_allocatable(
    socket_root: Path,
) -> None:
    store = claim_cluster()
    kubelet = SimKubelet(store, NODE, socket_root / "registry")
    kubelet.register_node()
    nodes = store.type_of("", "nodes")
    node = store.get(nodes, "", NODE)
    node["status"]["allocatable"] = {"nvidia.com/gpu": "4"}
    store.update(nodes, "", NODE, node, subresource="status")
    lease = get(store, "coordination.k8s.io", "leases", NODE, namespace=NODE_LEASE_NAMESPACE)
    assert lease["metadata"]["ownerReferences"][0]["uid"] == node["metadata"]["uid"]
    first = lease["spec"]["renewTime"]
    kubelet.register_node()  # the kubelet starts again
    assert store.get(nodes, "", NODE)["status"]["allocatable"] == {"nvidia.com/gpu": "4"}
    renewed = get(store, "coordination.k8s.io", "leases", NODE, namespace=NODE_LEASE_NAMESPACE)
    assert renewed["spec"]["renewTime"] > first
    store.delete(nodes, "", NODE)
    leases, _ = store.list_objects(store.type_of("coordination.k8s.io", "leases"), NODE_LEASE_NAMESPACE)
    assert leases == [], "the Lease goes with its Node"


async def test_a_pod_marked_not_ready_by_someone_else_is_written_back_ready(socket_root: Path) -> None:
    store = claim_cluster()
    kubelet = SimKubelet(store, NODE, socket_root / "registry")
    kubelet.register_node()
    add_slice(store, NODE)
    add_pod(store, "worker", "tmpl")
    async with serve_plugin(socket_root / "registry", socket_root / "plugin", DRIVER, ["v1.DRAPlugin"]):
        await kubelet.plugins.scan()
        ClaimTemplateController(store).reconcile()
        Allocator(store).reconcile()
        await kubelet.sync()
        assert _ready(store, "worker") == "True"
        pods = store.type_of("", "pods")
        pod = store.get(pods, "default", "worker")
        for condition in pod["status"]["conditions"]:
            if condition["type"] == "Ready":
                condition["status"] = "False"
        store.update(pods, "default", "worker", pod, subresource="status")
        await kubelet.sync()
        assert _ready(store, "worker") == "True"


@pytest.mark.parametrize("force", [True, False], ids=["force-deleted", "deleted"])
async def test_a_pod_deleted_while_its_node_was_down_has_its_claims_unprepared_when_the_kubelet_can(
    socket_root: Path, force: bool
) -> None:
    """Force-deleted (grace period 0, as an operator removes a pod stuck on a down node), the pod is gone at
    once and the kubelet, back up, never sees it: only its DRA reconcile unprepares the claims it kept in its
    checkpoint. Deleted gracefully, the pod stays Terminating on the dead node (nothing removes it) until the
    kubelet is back, which then unprepares its claims and removes it."""
    store = claim_cluster()
    kubelet = SimKubelet(store, NODE, socket_root / "registry", dra_reconcile_s=3600)
    kubelet.register_node()
    add_slice(store, NODE)
    add_pod(store, "worker", "tmpl")
    pods = store.type_of("", "pods")
    async with serve_plugin(
        socket_root / "registry", socket_root / "plugin", DRIVER, ["v1.DRAPlugin"]
    ) as log:
        await kubelet.plugins.scan()
        ClaimTemplateController(store).reconcile()
        Allocator(store).reconcile()
        await kubelet.sync()
        assert len(log.prepared) == 1
        claim = log.prepared[0][1]
        await kubelet.power_off()
        assert kubelet.running == {} and kubelet.claim_refs, (
            "its DRA checkpoint outlives the node's containers"
        )
        store.delete(pods, "default", "worker", grace_period_s=0 if force else None)
        assert store.exists_name(pods, "default", "worker") is not force
        await kubelet.power_on()
        await kubelet.stop()  # drive it by hand from here
        await kubelet.sync()
        if force:
            assert log.unprepared == [], (
                "the kubelet never saw that pod: only the DRA reconcile unprepares it"
            )
            await kubelet.reconcile_dra()
        assert log.unprepared == [("v1", claim)]
        assert kubelet.claim_refs == {}
        assert not store.exists_name(pods, "default", "worker")


async def test_a_re_prepare_that_waits_after_a_restart_does_not_hold_back_other_pods(
    socket_root: Path,
) -> None:
    """As the kubelet's pod workers do, each running pod is prepared again on its own: one whose plugin call
    waits (its claim's prepare is held) does not keep another pod, deleted meanwhile, from being torn down."""
    store = claim_cluster()
    add_template(store, "daemon-tmpl", device_class=DAEMON_CLASS, request="daemon")
    kubelet = SimKubelet(store, NODE, socket_root / "registry")
    kubelet.register_node()
    add_slice(store, NODE)
    add_pod(store, "slow", "tmpl")
    add_pod(store, "gone", "daemon-tmpl")
    async with serve_plugin(
        socket_root / "registry", socket_root / "plugin", DRIVER, ["v1.DRAPlugin"]
    ) as log:
        await kubelet.plugins.scan()
        ClaimTemplateController(store).reconcile()
        Allocator(store).reconcile()
        await kubelet.sync()
        assert len(kubelet.running) == 2
        claim_of = {get(store, "", "pods", n)["metadata"]["uid"]: n for n in ("slow", "gone")}
        refs = {claim_of[uid]: refs[DRIVER][0].uid for uid, refs in kubelet.claim_refs.items()}
        log.held_claims.add(refs["slow"])
        calls = len(log.prepared)
        await kubelet.restart()
        try:
            # the restarted kubelet is preparing "slow" again: that call waits
            await _until(lambda: any(refs["slow"] in uids for _, uids in log.prepared[calls:]))
            store.delete(store.type_of("", "pods"), "default", "gone")
            await _until(lambda: any(refs["gone"] in uids for _, uids in log.unprepared))
            assert refs["slow"] not in {uid for _, uids in log.unprepared for uid in uids}
        finally:
            log.release.set()
            await kubelet.stop()
