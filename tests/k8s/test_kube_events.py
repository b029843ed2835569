"""Kubernetes Events: posted about an object, repeats aggregated into it (count, lastTimestamp) as client-go's
recorder does, an expired Event posted again with the running count, refusals reported rather than raised."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from cdctl.k8s.client import api_client
from cdctl.k8s.kube_events import AGGREGATED, FAILED, POSTED, SUPPRESSED, EventRecorder
from cdctl.k8s.resources import EVENTS
from cdctl.k8s.rest import KubeApi
from cdctl.sim.apiserver.server import ApiServer

CD = {
    "apiVersion": "resource.nvidia.com/v1beta1",
    "kind": "ComputeDomain",
    "metadata": {"name": "cd1", "namespace": "default", "uid": "u-1", "resourceVersion": "7"},
}


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[ApiServer, KubeApi]]:
    async with ApiServer() as server:
        client = await api_client(str(server.write_kubeconfig(tmp_path / "kubeconfig")))
        try:
            yield server, KubeApi(client)
        finally:
            await client.close()


async def events(api: KubeApi) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = (await api.list_objects(EVENTS.collection_path("default")))["items"]
    return items


async def test_events_are_posted_once_per_reason_and_message(served: tuple[ApiServer, KubeApi]) -> None:
    server, api = served
    recorder = EventRecorder(api, "cdctl-controller", "controller-0", patch_every_s=3600)
    assert await recorder.warn(CD, "CliqueFull", "no index left") == POSTED
    assert await recorder.warn(CD, "CliqueFull", "no index left") == SUPPRESSED
    assert await recorder.warn(CD, "CliqueFull", "no index left for node-b") == POSTED
    assert len(await events(api)) == 2
    event = (await events(api))[0]
    assert event["type"] == "Warning" and event["reason"] == "CliqueFull"
    assert event["involvedObject"] == {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomain",
        "name": "cd1",
        "namespace": "default",
        "uid": "u-1",
        "resourceVersion": "7",
    }
    assert event["source"] == {"component": "cdctl-controller"}
    assert event["reportingInstance"] == "controller-0"
    server.faults.fail_next(500)
    assert await recorder.warn(CD, "ReconcileFailed", "boom") == FAILED


async def test_repeats_bump_count_and_last_timestamp_of_one_event(served: tuple[ApiServer, KubeApi]) -> None:
    _, api = served
    recorder = EventRecorder(api, "cdctl-controller", "controller-0", patch_every_s=0)
    assert await recorder.warn(CD, "ResourceClaimTemplateConflict", "taken") == POSTED
    [first] = await events(api)
    assert first["count"] == 1 and first["firstTimestamp"] == first["lastTimestamp"]
    for _ in range(4):
        assert await recorder.warn(CD, "ResourceClaimTemplateConflict", "taken") == AGGREGATED
    assert await recorder.normal(CD, "ResourceClaimTemplateConflict", "taken") == POSTED  # another type
    [warning] = [e for e in await events(api) if e["type"] == "Warning"]
    assert warning["metadata"]["name"] == first["metadata"]["name"]
    assert warning["count"] == 5 and warning["firstTimestamp"] == first["firstTimestamp"]


async def test_repeats_between_writes_are_counted_and_written_with_the_next(
    served: tuple[ApiServer, KubeApi],
) -> None:
    _, api = served
    recorder = EventRecorder(api, "cdctl-controller", "controller-0", patch_every_s=3600)
    assert await recorder.warn(CD, "Conflict", "taken") == POSTED
    assert [await recorder.warn(CD, "Conflict", "taken") for _ in range(3)] == [SUPPRESSED] * 3
    recorder.patch_every_s = 0
    assert await recorder.warn(CD, "Conflict", "taken") == AGGREGATED
    [event] = await events(api)
    assert event["count"] == 5


async def test_an_expired_event_is_posted_again_with_the_running_count(
    served: tuple[ApiServer, KubeApi],
) -> None:
    _, api = served
    recorder = EventRecorder(api, "cdctl-controller", "controller-0", patch_every_s=0)
    assert await recorder.warn(CD, "Conflict", "taken") == POSTED
    [event] = await events(api)
    await api.delete(EVENTS.object_path("default", event["metadata"]["name"]))  # the API server's TTL
    assert await recorder.warn(CD, "Conflict", "taken") == POSTED
    [again] = await events(api)
    assert again["count"] == 2 and again["firstTimestamp"] == event["firstTimestamp"]


async def test_node_events_name_the_host_and_aggregate_too(served: tuple[ApiServer, KubeApi]) -> None:
    _, api = served
    recorder = EventRecorder(api, "compute-domain-kubelet-plugin", "node-a", host="node-a", patch_every_s=0)
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-a", "uid": "n-1"}}
    for _ in range(3):
        await recorder.warn(node, "NVLinkFabricNotReady", "fabric IN_PROGRESS")
    [event] = await events(api)  # cluster-scoped objects' Events live in "default"
    assert event["source"] == {"component": "compute-domain-kubelet-plugin", "host": "node-a"}
    assert event["count"] == 3 and event["involvedObject"]["kind"] == "Node"
