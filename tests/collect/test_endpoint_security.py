"""Who can read a component's event log over its HTTP port: only a token of the collector ServiceAccount,
minted for that very pod. The port is reachable from the whole pod network, so these are a tenant's
attacks: no token, a forged one, one of another account, one minted for another pod, and a bad log name."""

from __future__ import annotations

from pathlib import Path

import aiohttp
import pytest

from cdctl.k8s.errors import KubeApiError
from cdctl.k8s.plugincluster import connect, disconnect
from cdctl.k8s.podproxy import PodProxy
from cdctl.k8s.tokens import audience_for, mint_token
from cdctl.sim.apiserver.identity import issue_token
from cdctl.store.export import LogRef
from cdctl.store.logserver import TOKEN_HEADER
from tests.collect.harness import HTTP_PORT, NAMESPACE, READER, Cluster, cluster, write_log
from tests.collect.test_collect import claim_events


async def _direct(
    c: Cluster, pod: str, path: str, token: str | None = None
) -> tuple[int, dict[str, str], str]:
    """What a pod on the pod network gets from the component's port, with no API server in between."""
    host = c.hosts[pod]
    local = c.api_server.pod_network.resolve(host.ip, HTTP_PORT[host.component])
    assert local is not None
    headers = {TOKEN_HEADER: token} if token else {}
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://{local[0]}:{local[1]}/{path}", headers=headers) as answer,
    ):
        return answer.status, dict(answer.headers), await answer.text()


async def two_plugins(c: Cluster, root: Path) -> None:
    for node in ("n0", "n1"):
        await write_log(root / f"{node}.db", claim_events(node, "d", f"secret-claim-of-{node}"))
        await c.add("kubelet-plugin", node, [LogRef("plugin", "kubelet-plugin", root / f"{node}.db")])


async def test_without_a_token_the_answer_says_which_token_to_bring(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        await two_plugins(c, tmp_path)
        status, headers, body = await _direct(c, "plugin-n0", "eventlog/events?log=plugin")
        assert status == 401 and "secret-claim" not in body
        assert headers["WWW-Authenticate"] == (
            f'CdctlEventlog serviceaccount="{NAMESPACE}/{READER}",'
            f' audience="cdctl-eventlog/{NAMESPACE}/plugin-n0"'
        )
        status, _, body = await _direct(c, "plugin-n0", "metrics")
        assert status == 404  # the harness serves no metrics; the log routes alone are guarded


@pytest.mark.parametrize(
    "token",
    [
        "forged",  # not a token at all
        f"system:serviceaccount:{NAMESPACE}:{READER}",  # the simulator's plain identity: not reviewable
        "sim-bound.e30.AAAA",  # shaped like an issued token, signature wrong
    ],
)
async def test_a_forged_token_is_refused(tmp_path: Path, token: str) -> None:
    async with cluster(tmp_path) as c:
        await two_plugins(c, tmp_path)
        status, _, body = await _direct(c, "plugin-n0", "eventlog/events?log=plugin", token)
    assert status == 401 and "secret-claim" not in body


async def test_a_token_minted_for_another_pod_or_of_another_account_is_refused(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        await two_plugins(c, tmp_path)
        other_pod, _ = issue_token(NAMESPACE, READER, [audience_for(NAMESPACE, "plugin-n1")], 600)
        status, _, body = await _direct(c, "plugin-n0", "eventlog/events?log=plugin", other_pod)
        assert status == 401 and "plugin-n0" in body and "secret-claim" not in body
        stranger, _ = issue_token(NAMESPACE, "default", [audience_for(NAMESPACE, "plugin-n0")], 600)
        status, _, body = await _direct(c, "plugin-n0", "eventlog/events?log=plugin", stranger)
        assert status == 403 and "secret-claim" not in body
        right, _ = issue_token(NAMESPACE, READER, [audience_for(NAMESPACE, "plugin-n0")], 600)
        status, _, body = await _direct(c, "plugin-n0", "eventlog/events?log=plugin", right)
        assert status == 200 and "secret-claim-of-n0" in body


async def test_a_reader_token_is_good_for_nothing_at_the_api_server(tmp_path: Path) -> None:
    """A component that receives a reader token cannot use it against the API server (not its audience)."""
    async with cluster(tmp_path) as c:
        await two_plugins(c, tmp_path)
        admin = await connect(str(c.kubeconfig), 0, 0)
        try:
            token = await mint_token(admin, NAMESPACE, READER, audience_for(NAMESPACE, "plugin-n0"))
        finally:
            await disconnect(admin)
        stolen = await connect(str(c.api_server.write_kubeconfig(tmp_path / "stolen", token)), 0, 0)
        try:
            with pytest.raises(KubeApiError) as refused:
                await stolen.get(f"/api/v1/namespaces/{NAMESPACE}/pods")
        finally:
            await disconnect(stolen)
    assert refused.value.status == 401


async def test_log_names_and_parameters_are_checked(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        await two_plugins(c, tmp_path)
        token, _ = issue_token(NAMESPACE, READER, [audience_for(NAMESPACE, "plugin-n0")], 600)
        for query, status, said in [
            ("log=../../../etc/passwd", 404, "no log"),
            ("log=plugin&after=-1", 400, "after"),
            ("log=plugin&after_hash=zz", 400, "after_hash"),
            ("log=plugin&since=yesterday", 400, "since"),
            ("log=plugin&domain=a%20b", 400, "domain"),
            ("log=plugin&limit=0", 400, "limit"),
        ]:
            got, _, body = await _direct(c, "plugin-n0", f"eventlog/events?{query}", token)
            assert (got, said in body) == (status, True), (query, got, body)


async def test_through_the_proxy_the_callers_credentials_do_not_reach_the_pod(tmp_path: Path) -> None:
    """The API server drops the caller's Authorization header: the operator's own credentials never reach a
    component (which could replay them)."""
    seen: list[str] = []
    async with cluster(tmp_path) as c:
        await two_plugins(c, tmp_path)
        host = c.hosts["plugin-n0"]
        assert host.server is not None
        real = host.server._denied

        async def spy(request: aiohttp.web.Request) -> aiohttp.web.Response | None:
            seen.append(request.headers.get("Authorization", ""))
            return await real(request)

        host.server._denied = spy  # type: ignore[method-assign]
        admin = await connect(str(c.kubeconfig), 0, 0)
        try:
            proxy = PodProxy(admin, NAMESPACE, "plugin-n0", HTTP_PORT["kubelet-plugin"])
            status, _ = await proxy.get_raw("eventlog")
        finally:
            await disconnect(admin)
    assert status == 401 and seen == [""]
