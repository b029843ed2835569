"""The JSON transport: typed errors from the API server's answers, the client-side rate limit."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from cdctl.k8s import rest
from cdctl.k8s.client import api_client
from cdctl.k8s.errors import AlreadyExistsError, ConflictError, NotFoundError
from cdctl.k8s.resources import NODES
from cdctl.k8s.rest import KubeApi, TokenBucket
from cdctl.sim.apiserver.server import ApiServer


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[KubeApi]:
    async with ApiServer() as server:
        client = await api_client(str(server.write_kubeconfig(tmp_path / "kubeconfig")))
        try:
            yield KubeApi(client)
        finally:
            await client.close()


async def test_crud_with_typed_errors_and_explicit_patch_types(api: KubeApi) -> None:
    path = NODES.collection_path()
    created = await api.create(path, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}})
    with pytest.raises(AlreadyExistsError):
        await api.create(path, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}})
    patched = await api.merge_patch(NODES.object_path(None, "n1"), {"metadata": {"labels": {"a": "1"}}})
    assert patched["metadata"]["labels"] == {"a": "1"}
    stale = {**created, "metadata": {**created["metadata"], "labels": {"b": "2"}}}
    with pytest.raises(ConflictError):
        await api.replace(NODES.object_path(None, "n1"), stale)
    ops = [
        {"op": "test", "path": "/metadata/labels/a", "value": "1"},
        {"op": "remove", "path": "/metadata/labels/a"},
    ]
    assert "a" not in (await api.json_patch(NODES.object_path(None, "n1"), ops))["metadata"].get("labels", {})
    listed = await api.list_objects(path, label_selector="a=1")
    assert listed["items"] == []
    await api.delete(NODES.object_path(None, "n1"))
    assert await api.get_or_none(NODES.object_path(None, "n1")) is None
    with pytest.raises(NotFoundError):
        await api.delete(NODES.object_path(None, "n1"))


async def test_the_token_bucket_waits_only_when_the_burst_is_spent(monkeypatch: pytest.MonkeyPatch) -> None:
    waits: list[float] = []

    async def fake_sleep(delay: float) -> None:
        waits.append(delay)

    monkeypatch.setattr(rest.asyncio, "sleep", fake_sleep)
    bucket = TokenBucket(qps=10.0, burst=2)
    for _ in range(3):
        await asyncio.wait_for(bucket.acquire(), 30)
    assert len(waits) == 1 and 0 < waits[0] <= 0.1
    unlimited = TokenBucket(qps=0, burst=0)
    for _ in range(100):
        await asyncio.wait_for(unlimited.acquire(), 30)
    assert len(waits) == 1
