"""ServiceAccount admission: a Pod naming a ServiceAccount its namespace lacks is refused, as the real API
server's ServiceAccount admission plugin refuses it; every namespace gets its `default` ServiceAccount, as the
controller-manager's service-account controller creates it."""

from __future__ import annotations

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client import ApiException

from cdctl.sim.apiserver.errors import Forbidden
from cdctl.sim.apiserver.store import ObjectStore
from tests.sim.fixtures import pod

PODS = ("", "pods")
SERVICE_ACCOUNTS = ("", "serviceaccounts")


def test_every_namespace_has_its_default_service_account() -> None:
    store = ObjectStore()
    store.create(store.type_of("", "namespaces"), "", {"metadata": {"name": "team-a"}})
    for namespace in ("default", "kube-system", "team-a"):
        assert (
            store.get(store.type_of(*SERVICE_ACCOUNTS), namespace, "default")["metadata"]["name"] == "default"
        )


def test_a_pod_without_a_service_account_gets_default() -> None:
    store = ObjectStore()
    created = store.create(store.type_of(*PODS), "default", {"metadata": {"name": "p"}, "spec": {}})
    assert created["spec"]["serviceAccountName"] == "default"


def test_a_pod_naming_a_missing_service_account_is_refused_with_the_real_message() -> None:
    store = ObjectStore()
    body = {"metadata": {"name": "p"}, "spec": {"serviceAccountName": "robot"}}
    with pytest.raises(Forbidden) as refused:
        store.create(store.type_of(*PODS), "default", body)
    assert refused.value.message == (
        'pods "p" is forbidden: error looking up service account default/robot: '
        'serviceaccount "robot" not found'
    )
    store.create(store.type_of(*SERVICE_ACCOUNTS), "default", {"metadata": {"name": "robot"}})
    assert store.create(store.type_of(*PODS), "default", body)["spec"]["serviceAccountName"] == "robot"


def test_a_generated_pod_name_is_not_known_yet_so_the_refusal_names_the_prefix() -> None:
    store = ObjectStore()
    body = {"metadata": {"generateName": "ds-"}, "spec": {"serviceAccountName": "robot"}}
    with pytest.raises(Forbidden, match=r'^pods "ds-" is forbidden: error looking up service account'):
        store.create(store.type_of(*PODS), "default", body)


async def test_the_refusal_reaches_a_client_as_403(api: client.ApiClient) -> None:
    body = pod("p1")
    body["spec"]["serviceAccountName"] = "robot"
    with pytest.raises(ApiException) as refused:
        await client.CoreV1Api(api).create_namespaced_pod("default", body)
    assert refused.value.status == 403
    assert 'serviceaccount \\"robot\\" not found' in refused.value.body
