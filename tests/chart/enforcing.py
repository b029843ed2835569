"""A simulated API server enforcing the chart's RBAC and admission policies, and clients that are one
component's bound identity: the rig of the tests that attack a component's grants (tests/daemon,
tests/plugin, tests/controller `test_chart_policies.py`).

`enforcing_server(namespace)` loads the chart rendered for a release in `namespace`; `seed(server, ...)`
creates objects as the admin (not subject to RBAC); `identity(server, path, token)` is a KubeApi that
connects with a service-account token (bound to a pod and node when the token says so);
`refused(call)` awaits a write that must fail and returns the API server's status code (a 422 must come
from an admission policy).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from cdctl.k8s.errors import KubeApiError
from cdctl.k8s.plugincluster import connect, disconnect
from cdctl.k8s.rest import KubeApi
from cdctl.sim.apiserver.server import ApiServer
from tests.chart.conftest import chart_policies, chart_rbac


@asynccontextmanager
async def enforcing_server(
    namespace: str, values: Mapping[str, Any] | None = None
) -> AsyncIterator[ApiServer]:
    async with ApiServer() as server:
        server.store.create(server.store.type_of("", "namespaces"), "", {"metadata": {"name": namespace}})
        server.rbac.load(chart_rbac(namespace, values))
        assert server.load_policies(chart_policies(namespace, values)) > 0
        yield server


def seed(server: ApiServer, group: str, plural: str, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
    """Create `body` as the admin (namespaces are created when missing)."""
    store = server.store
    if namespace and not store.exists_name(store.type_of("", "namespaces"), "", namespace):
        store.create(store.type_of("", "namespaces"), "", {"metadata": {"name": namespace}})
    return store.create(store.type_of(group, plural), namespace, body)


@asynccontextmanager
async def identity(server: ApiServer, directory: Path, token: str) -> AsyncIterator[KubeApi]:
    kubeconfig = server.write_kubeconfig(directory / f"kubeconfig-{abs(hash(token))}", token)
    api = await connect(str(kubeconfig), 0, 0)
    try:
        yield api
    finally:
        await disconnect(api)


async def refused(call: Awaitable[Any]) -> int:
    """The status of a request that must be refused (a test failure when it succeeds): 403 from RBAC, or 422
    from an admission policy (a 422 for any other reason fails the test)."""
    with pytest.raises(KubeApiError) as caught:
        await call
    if caught.value.status == 422:
        assert "ValidatingAdmissionPolicy" in caught.value.message, caught.value.message
    return caught.value.status
