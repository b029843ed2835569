"""The audit log: every request with its user, bound pod, verb, object and code; faults and refusals too."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from kubernetes_asyncio import client, config
from kubernetes_asyncio.client import ApiException

from cdctl.sim.apiserver.identity import ADMIN_USER, service_account_token
from cdctl.sim.apiserver.server import ApiServer
from tests.sim.fixtures import pod


async def test_each_request_is_entered_with_its_user_pod_verb_object_and_code(
    apiserver: ApiServer, api: client.ApiClient, tmp_path: Path
) -> None:
    core = client.CoreV1Api(api)
    await core.create_namespaced_pod("default", pod("p1"))
    await core.read_namespaced_pod("p1", "default")
    token = service_account_token("kube-system", "ctl", pod="ctl-0", node="n1")
    path = apiserver.write_kubeconfig(tmp_path / "sa.kubeconfig", token)
    async with await config.new_client_from_config(config_file=str(path)) as bound:
        await client.CoreV1Api(bound).list_namespaced_pod("default")
        apiserver.faults.fail_next(503)
        with pytest.raises(ApiException):
            await client.CoreV1Api(bound).delete_namespaced_pod("p1", "default")

    admin = apiserver.audit.select(username=ADMIN_USER, resource="pods")
    assert [(e.verb, e.namespace, e.name, e.code) for e in admin] == [
        ("create", "default", "", 201),
        ("get", "default", "p1", 200),
    ]
    mine = apiserver.audit.select(pod="ctl-0")
    assert [(e.username, e.verb, e.resource, e.code) for e in mine] == [
        ("system:serviceaccount:kube-system:ctl", "list", "pods", 200),
        ("system:serviceaccount:kube-system:ctl", "delete", "pods", 503),
    ]
    assert [e.verb for e in apiserver.audit.writes(pod="ctl-0")] == ["delete"]
    assert apiserver.audit.writes(pod="ctl-0", since=time.time() + 60) == []


async def test_a_slow_path_delays_only_its_requests(apiserver: ApiServer, api: client.ApiClient) -> None:
    apiserver.faults.slow("/namespaces/slow/", 0.3)
    assert apiserver.faults.decide("/api/v1/namespaces/default/pods", False).delay_s == 0
    assert apiserver.faults.decide("/api/v1/namespaces/slow/pods", True).delay_s == 0.3
    started = time.monotonic()
    await client.CoreV1Api(api).list_namespaced_pod("slow")
    assert time.monotonic() - started >= 0.3  # a lower bound the delay guarantees, not a timing
    apiserver.faults.heal()
    assert apiserver.faults.slow_paths == {}
