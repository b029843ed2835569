"""The design's end-to-end test plan for HostManagedIMEX, in the simulated cluster with the fake host IMEX.

1. Host IMEX running, one ComputeDomain, one pod per node: each pod gets channel 0
   (/dev/nvidia-caps-imex-channels/channel0 in its CDI edits); no DaemonSet, no daemon pod, no node label.
2. Stopping host IMEX on a node holding a workload: the plugin neither restarts it nor says anything about
   it, keeps serving (unprepare and a new prepare on that node still work), and the workload's IMEX client
   on that node finds no IMEX daemon (nvidia-imex-ctl: UNAVAILABLE; the peer: NOT_READY).
3. A second channel claim on a node: the scheduler leaves it unallocated while channel 0 is held, and a
   hand-allocated one is refused by Prepare's checkpoint conflict until the first claim releases channel 0.
4. allocationMode All: the pod fails with a clear permanent prepare error, listed by `cdctl sql`.
5. A node without an NVLink clique: the pod fails with a clear permanent prepare error naming the missing
   clique, listed by `cdctl sql`.
6. A plugin given the host's IMEX config (not the default): no channel while that IMEX is down.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from grpclib.client import Channel

from cdctl._proto.k8s.io.kubelet.pkg.apis.dra import v1
from cdctl.domain.computedomains import LABEL_COMPUTE_DOMAIN
from cdctl.plugin import cdi
from cdctl.sim.controllers.allocator import Allocator
from cdctl.sim.node.cdiresolver import resolve
from tests.hostmanaged.conftest import DRIVER, NAMESPACE, HostManagedCluster, until

pytestmark = pytest.mark.integration

CHANNEL0 = "/dev/nvidia-caps-imex-channels/channel0"


def cdi_spec(cluster: HostManagedCluster, node: str, claim_uid: str) -> Path:
    return cdi.claim_spec_path(cluster.sim.node_dir(node) / "cdi", claim_uid)


def channel_nodes(cluster: HostManagedCluster, pod_name: str) -> list[str]:
    pod = cluster.pod(pod_name)
    assert pod is not None
    node = pod["spec"]["nodeName"]
    devices = cluster.sim.kubelets[node].cdi_devices(pod["metadata"]["uid"])
    edits = resolve([cluster.sim.node_dir(node) / "cdi"], devices)
    return [str(d["path"]) for d in edits.device_nodes]


async def test_each_pod_of_the_domain_gets_channel_zero(cluster: HostManagedCluster) -> None:
    await cluster.admitted_domain("train-a")
    for slice_ in cluster.list("resource.k8s.io", "resourceslices"):
        assert [d["name"] for d in slice_["spec"]["devices"]] == ["channel-0"]
    for index, node in enumerate(cluster.fabric_nodes):
        cluster.create_workload(f"worker-{index}", node, "train-a")
    for index, _ in enumerate(cluster.fabric_nodes):
        await until(lambda i=index: cluster.running(f"worker-{i}"), f"worker-{index} Running")
        assert channel_nodes(cluster, f"worker-{index}") == [CHANNEL0]
    for node in cluster.fabric_nodes:
        assert await cluster.imex[node].query() == (0, "READY")  # the operator's IMEX domain is up
    assert cluster.list("apps", "daemonsets") == []
    assert [p["metadata"]["name"] for p in cluster.list("", "pods")] == ["worker-0", "worker-1"]
    assert not any(
        LABEL_COMPUTE_DOMAIN in (n["metadata"].get("labels") or {}) for n in cluster.list("", "nodes")
    )
    assert cluster.list("resource.nvidia.com", "computedomaincliques") == []


async def test_stopping_host_imex_is_left_to_the_operator(cluster: HostManagedCluster) -> None:
    await cluster.admitted_domain("train-a")
    node, peer = cluster.fabric_nodes
    cluster.create_workload("worker", node, "train-a")
    await until(lambda: cluster.running("worker"), "worker Running")
    plugin = cluster.plugins[node]
    prepares = len(cluster.sim.kubelets[node].prepare_calls)
    stopped_at = len(cluster.logs)

    await cluster.imex[node].stop()  # systemctl stop nvidia-imex

    assert await cluster.imex[node].query() == (
        1,
        f"UNAVAILABLE: no IMEX daemon at {cluster.imex[node].address}",
    )
    assert await cluster.imex[peer].query() == (0, "NOT_READY")
    # The plugin keeps serving the node: the workload goes and a new one comes, through unprepare and prepare.
    cluster.delete_pod("worker")
    await until(
        lambda: cluster.pod("worker") is None and cluster.sim.kubelets[node].unprepare_calls, "unprepared"
    )
    cluster.create_workload("worker-again", node, "train-a")
    await until(lambda: cluster.running("worker-again"), "worker-again Running")
    assert len(cluster.sim.kubelets[node].prepare_calls) == prepares + 1
    assert channel_nodes(cluster, "worker-again") == [CHANNEL0]
    # Nobody restarted host IMEX, the plugin did not restart, and nothing it logged is about IMEX.
    assert not cluster.imex[node].running() and cluster.imex[node].starts == 1
    assert not plugin.task.done() and cluster.plugins[node] is plugin
    since = cluster.logs[stopped_at:]
    assert since, "the plugin logged its unprepare and prepare"
    assert not [entry for entry in since if "imex" in str(entry).lower()]


async def test_a_plugin_given_the_host_imex_config_hands_out_no_channel_while_that_imex_is_down(
    cluster: HostManagedCluster,
) -> None:
    """`--host-imex-config`: the plugin asks `nvidia-imex-ctl -q` before each channel. The host's IMEX stopped
    (or restarting): the pod waits, its Prepare retried with the tool's answer as the reason, and no CDI spec
    is written; once the operator starts it again the pod runs with channel 0."""
    await cluster.admitted_domain("train-a")
    node, _ = cluster.fabric_nodes
    await cluster.stop_plugin(node)
    await cluster.start_plugin(node, host_imex_config=cluster.imex[node].config)
    await cluster.imex[node].stop()  # systemctl stop nvidia-imex (a restart's first half)

    cluster.create_workload("worker", node, "train-a")

    def waits() -> list[str]:
        return [
            str(e.get("reason"))
            for e in cluster.logs
            if e.get("event") == "prepare decision: wait, host IMEX not ready"
        ]

    await until(waits, "a Prepare waiting for the host's IMEX")
    assert "UNAVAILABLE: no IMEX daemon" in waits()[0]
    await asyncio.sleep(1)  # the wait goes on: the host's IMEX is asked again, and still answers not ready
    assert not cluster.running("worker")
    assert not list((cluster.sim.node_dir(node) / "cdi").glob("*claim_*.yaml")), "no channel handed out"

    await cluster.imex[node].start()  # systemctl start nvidia-imex
    await until(lambda: cluster.running("worker"), "worker Running once the host's IMEX is READY")
    assert channel_nodes(cluster, "worker") == [CHANNEL0]
    assert len(list((cluster.sim.node_dir(node) / "cdi").glob("*claim_*.yaml"))) == 1
    assert await cluster.imex[node].query() == (0, "READY")


async def test_a_second_channel_claim_on_a_node_is_refused(cluster: HostManagedCluster) -> None:
    uid = (await cluster.admitted_domain("train-a"))["metadata"]["uid"]
    node = cluster.fabric_nodes[0]
    cluster.create_workload("first", node, "train-a")
    await until(lambda: cluster.running("first"), "first Running")
    cluster.create_workload("second", node, "train-a")
    second_claim = await until(lambda: cluster.claim_of("second"), "second's claim created")
    claims = cluster.type_of("resource.k8s.io", "resourceclaims")
    await until(lambda: cluster.get("resource.k8s.io", "resourceclaims", second_claim), "claim stored")
    Allocator(cluster.sim.store).reconcile()  # one more scheduling pass over the pending pod
    assert (
        not (cluster.get("resource.k8s.io", "resourceclaims", second_claim) or {})
        .get("status", {})
        .get("allocation")
    )  # the scheduler sees one channel-0 per node, held by `first`
    assert not cluster.running("second")

    # Past the scheduler (a hand-allocated claim): Prepare's checkpoint conflict is the backstop.
    parameters = {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomainChannelConfig",
        "domainID": uid,
    }
    manual = cluster.sim.store.create(
        claims,
        NAMESPACE,
        {
            "metadata": {"name": "hand-made"},
            "spec": {"devices": {"requests": [{"name": "channel", "exactly": {"deviceClassName": "x"}}]}},
        },
    )
    manual["status"] = {
        "allocation": {
            "devices": {
                "results": [{"request": "channel", "driver": DRIVER, "pool": node, "device": "channel-0"}],
                "config": [
                    {
                        "source": "FromClaim",
                        "requests": ["channel"],
                        "opaque": {"driver": DRIVER, "parameters": parameters},
                    }
                ],
            }
        }
    }
    cluster.sim.store.update(claims, NAMESPACE, "hand-made", manual, subresource="status")
    servers = cluster.plugins[node].process.servers
    assert servers is not None
    channel = Channel(path=str(servers.paths.dra))
    try:
        ref = v1.Claim(namespace=NAMESPACE, name="hand-made", uid=manual["metadata"]["uid"])
        stub = v1.DraPluginStub(channel)
        call = asyncio.create_task(stub.node_prepare_resources(v1.NodePrepareResourcesRequest(claims=[ref])))
        row = await cluster.refused(node, "hand-made")  # the plugin retries it: the conflict is retriable
        assert "channel-0 is already allocated to different claim" in row["last_error"]
        assert not call.done() and not cdi_spec(cluster, node, manual["metadata"]["uid"]).exists()
        # Once `first` goes and channel 0 is released on the node, the same call succeeds.
        cluster.delete_pod("first")
        response = await call
    finally:
        channel.close()
    prepared = response.claims[manual["metadata"]["uid"]]
    assert prepared.error == ""
    assert cdi_spec(cluster, node, manual["metadata"]["uid"]).exists()


async def test_allocation_mode_all_fails_with_a_clear_permanent_error(cluster: HostManagedCluster) -> None:
    await cluster.admitted_domain("train-all", "All")  # the controller admits it: the refusal is the plugin's
    node = cluster.fabric_nodes[0]
    pod = cluster.create_workload("all", node, "train-all")
    # Until its claim is made and allocated the kubelet says it waits; then the plugin's refusal.
    words = "allocationMode All is not supported with HostManagedIMEX"
    await until(lambda: words in cluster.prepare_error(pod), "prepare error")
    assert not cluster.running("all")
    claim = cluster.claim_of("all")
    assert claim is not None
    row = await cluster.refused(node, claim)
    assert row["state"] == "PrepareFailed"
    assert "allocationMode All is not supported with HostManagedIMEX" in row["last_error"]
    (permanence,) = await cluster.sql(
        node,
        "SELECT json_extract(data, '$.retriable') AS retriable FROM events WHERE type = 'ClaimPrepareFailed'",
    )
    assert permanence == {"retriable": 0}


async def test_a_node_without_a_clique_fails_with_a_clear_permanent_error(
    cluster: HostManagedCluster,
) -> None:
    await cluster.admitted_domain("train-a")
    node = cluster.node_without_clique
    pod = cluster.create_workload("lonely", node, "train-a")
    words = "host-managed IMEX requires an NVLink clique on this node; NVML reports none"
    await until(lambda: words in cluster.prepare_error(pod), "prepare error")
    assert not cluster.running("lonely")
    claim = cluster.claim_of("lonely")
    assert claim is not None
    row = await cluster.refused(node, claim)
    assert "requires an NVLink clique" in row["last_error"]
