"""`kubectl get` tables from the simulated API server: a custom resource's printer columns (the chart's
ComputeDomain: Status, Nodes, Channels, Age), a pod's kubectl columns, Name and Age for the rest, as the real
server answers `Accept: application/json;as=Table;v=v1;g=meta.k8s.io`."""

from __future__ import annotations

from typing import Any

import aiohttp
import yaml
from kubernetes_asyncio import client

from cdctl.sim.apiserver.server import ApiServer
from tests.chart.conftest import CHART_DIR
from tests.sim.fixtures import GROUP, PLURAL, VERSION, compute_domain, pod

TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"


async def get_table(apiserver: ApiServer, path: str) -> dict[str, Any]:
    headers = {"Accept": TABLE, "Authorization": "Bearer admin"}
    async with (
        aiohttp.ClientSession() as session,
        session.get(apiserver.url + path, headers=headers) as reply,
    ):
        assert reply.status == 200, await reply.text()
        body: dict[str, Any] = await reply.json()
    assert body["kind"] == "Table"
    return body


def columns(table: dict[str, Any]) -> list[str]:
    return [c["name"] for c in table["columnDefinitions"]]


async def test_a_custom_resource_shows_its_printer_columns(
    apiserver: ApiServer, api: client.ApiClient
) -> None:
    crd = yaml.safe_load((CHART_DIR / "crds" / "resource.nvidia.com_computedomains.yaml").read_text())
    await client.ApiextensionsV1Api(api).create_custom_resource_definition(crd)
    custom = client.CustomObjectsApi(api)
    await custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, compute_domain("cd1"))
    await custom.patch_namespaced_custom_object_status(
        GROUP, VERSION, "default", PLURAL, "cd1", {"status": {"status": "Ready"}},
        _content_type="application/merge-patch+json",
    )  # fmt: skip
    listed = await get_table(apiserver, f"/apis/{GROUP}/{VERSION}/{PLURAL}")
    assert columns(listed) == ["Name", "Status", "Nodes", "Channels", "Age"]
    [row] = listed["rows"]
    name, status, nodes, channels, age = row["cells"]
    assert (name, status, nodes, channels) == ("cd1", "Ready", 0, None)  # no status.channels: a null cell
    assert age.endswith("s")
    one = await get_table(apiserver, f"/apis/{GROUP}/{VERSION}/namespaces/default/{PLURAL}/cd1")
    assert one["rows"][0]["cells"][:3] == ["cd1", "Ready", 0]


async def test_a_pod_shows_kubectls_columns_and_wide_ones(
    apiserver: ApiServer, api: client.ApiClient
) -> None:
    await client.CoreV1Api(api).create_namespaced_pod("default", pod("p1", node="n1"))
    table = await get_table(apiserver, "/api/v1/pods")
    assert columns(table) == ["Name", "Ready", "Status", "Restarts", "Age", "IP", "Node"]
    assert [c["priority"] for c in table["columnDefinitions"]] == [0, 0, 0, 0, 0, 1, 1]
    [row] = table["rows"]
    assert row["cells"][:4] == ["p1", "0/1", "Pending", 0]
    assert row["cells"][6] == "n1"


async def test_other_kinds_show_name_and_age(apiserver: ApiServer, api: client.ApiClient) -> None:
    table = await get_table(apiserver, "/api/v1/namespaces")
    assert columns(table) == ["Name", "Age"]
