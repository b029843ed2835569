"""The simulated API server counts requests by verb, resource and code, as apiserver_request_total does."""

from __future__ import annotations

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client import ApiException

from cdctl.sim.apiserver.server import ApiServer
from tests.sim.fixtures import pod


async def test_each_verb_is_counted_once_per_request(apiserver: ApiServer, api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    await core.create_namespaced_pod("default", pod("p1"))
    await core.read_namespaced_pod("p1", "default")
    await core.list_namespaced_pod("default")
    await core.patch_namespaced_pod("p1", "default", {"metadata": {"labels": {"a": "b"}}})
    current = await core.read_namespaced_pod("p1", "default")
    current.metadata.labels = {"a": "c"}
    replaced = await core.replace_namespaced_pod("p1", "default", current)
    await core.replace_namespaced_pod_status("p1", "default", replaced)
    await core.delete_namespaced_pod("p1", "default")
    with pytest.raises(ApiException):
        await core.read_namespaced_pod("p1", "default")
    assert apiserver.requests.by_verb_and_resource() == {
        "create pods": 1,
        "delete pods": 1,
        "get pods": 3,
        "list pods": 1,
        "patch pods": 1,
        "update pods": 1,
        "update pods/status": 1,
    }
    assert apiserver.requests.writes() == 5
    assert apiserver.requests.failed() == {"get pods 404": 1}


async def test_discovery_is_not_counted_and_reset_starts_over(
    apiserver: ApiServer, api: client.ApiClient
) -> None:
    await client.CoreApi(api).get_api_versions()
    assert apiserver.requests.total() == 0
    await client.AppsV1Api(api).list_namespaced_daemon_set("default")
    assert apiserver.requests.by_verb_and_resource() == {"list apps/daemonsets": 1}
    apiserver.requests.reset()
    assert apiserver.requests.total() == 0


async def test_a_watch_is_counted_when_its_stream_opens(apiserver: ApiServer, api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    listing = await core.list_namespaced_pod("default")
    response = await core.list_namespaced_pod(
        "default", watch=True, resource_version=listing.metadata.resource_version, timeout_seconds=1,
        _preload_content=False,
    )  # fmt: skip
    response.close()
    assert apiserver.requests.by_verb_and_resource() == {"list pods": 1, "watch pods": 1}


async def test_each_request_is_counted_under_the_user_it_authenticated_as(
    apiserver: ApiServer, api: client.ApiClient
) -> None:
    await client.CoreV1Api(api).list_namespaced_pod("default")
    [(user, verb, resource)] = apiserver.requests.by_user_verb_and_resource()
    assert (verb, resource) == ("list", "pods")
    assert user and user == apiserver_user(api)


def apiserver_user(api: client.ApiClient) -> str:
    """The user the test client's token names (the simulated server's admin, unless a test says else)."""
    from cdctl.sim.apiserver.identity import user_for_authorization

    return user_for_authorization(api.configuration.api_key.get("authorization") or
                                  api.default_headers.get("Authorization")).username  # fmt: skip
