"""Fixtures for the simulated cluster's tests: an in-process API server, real kubernetes_asyncio clients."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from kubernetes_asyncio import client, config

from cdctl.sim.apiserver.server import ApiServer
from cdctl.sim.apiserver.settings import ServerSettings


@pytest.fixture
async def apiserver() -> AsyncIterator[ApiServer]:
    async with ApiServer(settings=ServerSettings(bookmark_interval_s=0.2, history_window=50)) as server:
        yield server


@pytest.fixture
async def api(apiserver: ApiServer, tmp_path: Path) -> AsyncIterator[client.ApiClient]:
    """A kubernetes_asyncio ApiClient configured from the kubeconfig the server writes."""
    path = apiserver.write_kubeconfig(tmp_path / "kubeconfig")
    api_client = await config.new_client_from_config(config_file=str(path))
    async with api_client:
        yield api_client
