"""Kubernetes Events: posted about an object, repeats suppressed, refusals reported rather than raised."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from cdctl.k8s.client import api_client
from cdctl.k8s.kube_events import FAILED, POSTED, SUPPRESSED, EventRecorder
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


async def test_events_are_posted_once_per_reason_and_message(served: tuple[ApiServer, KubeApi]) -> None:
    server, api = served
    recorder = EventRecorder(api, "cdctl-controller", "controller-0")
    assert await recorder.warn(CD, "CliqueFull", "no index left") == POSTED
    assert await recorder.warn(CD, "CliqueFull", "no index left") == SUPPRESSED
    assert await recorder.warn(CD, "CliqueFull", "no index left for node-b") == POSTED
    events = (await api.list_objects(EVENTS.collection_path("default")))["items"]
    assert len(events) == 2
    event = events[0]
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
