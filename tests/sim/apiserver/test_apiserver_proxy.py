"""The pods proxy subresource, TokenRequest and TokenReview of the simulated API server, as the real one
answers them: a pod reached at its IP and port through the pod network, 400 for a pod without a routable
address, 503 `error trying to reach service` for one that does not answer, the caller's credentials not
passed on, RBAC on `pods/proxy` and `serviceaccounts/token`, User subjects, and tokens that are signed,
expire, and authenticate only for their audiences."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from cdctl.k8s.errors import KubeApiError
from cdctl.k8s.plugincluster import connect, disconnect
from cdctl.k8s.podproxy import PodProxy
from cdctl.k8s.rest import KubeApi
from cdctl.k8s.tokens import mint_token
from cdctl.sim.apiserver import identity
from cdctl.sim.apiserver.identity import issue_token, review_token, user_token
from cdctl.sim.apiserver.rbac import request_attributes
from cdctl.sim.apiserver.server import ApiServer, free_port

NS = "ops"
UNREACHABLE = "error trying to reach service: dial tcp"


@pytest.fixture
async def server() -> AsyncIterator[ApiServer]:
    async with ApiServer() as api_server:
        store = api_server.store
        store.create(store.type_of("", "namespaces"), "", {"metadata": {"name": NS}})
        yield api_server


def make_pod(server: ApiServer, name: str, ip: str, port: int = 8081) -> None:
    pods = server.store.type_of("", "pods")
    spec = {"containers": [{"name": "c", "ports": [{"name": "http", "containerPort": port}]}]}
    server.store.create(pods, NS, {"metadata": {"name": name}, "spec": spec})
    pod = server.store.get(pods, NS, name)
    pod["status"] = {"phase": "Running", "podIP": ip} if ip else {"phase": "Pending"}
    server.store.update(pods, NS, name, pod, subresource="status")


async def echo_server(seen: list[dict[str, str]]) -> tuple[web.AppRunner, int]:
    async def echo(request: web.Request) -> web.StreamResponse:
        seen.append(dict(request.headers))
        answer = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
        await answer.prepare(request)
        for index in range(3):
            await answer.write(f'{{"line": {index}, "path": "{request.path_qs}"}}\n'.encode())
        await answer.write_eof()
        return answer

    app = web.Application()
    app.router.add_get("/{tail:.*}", echo)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner, port


async def client(server: ApiServer, tmp_path: Path, token: str = "admin") -> KubeApi:
    return await connect(str(server.write_kubeconfig(tmp_path / f"kc-{abs(hash(token))}", token)), 0, 0)


async def test_the_proxy_reaches_the_pod_at_its_address_and_drops_the_callers_credentials(
    server: ApiServer, tmp_path: Path
) -> None:
    seen: list[dict[str, str]] = []
    runner, port = await echo_server(seen)
    try:
        make_pod(server, "p", "10.1.2.3")
        server.pod_network.route("10.1.2.3", 8081, "127.0.0.1", port)
        api = await client(server, tmp_path)
        try:
            proxy = PodProxy(api, NS, "p", 8081)
            async with proxy.lines("a/b", [("x", "1"), ("x", "2")], {"X-Extra": "kept"}) as lines:
                got = [line async for line in lines]
            default_port = await api.client.call_api(
                f"/api/v1/namespaces/{NS}/pods/p/proxy/c", "GET", auth_settings=["BearerToken"],
                _preload_content=False,
            )  # fmt: skip
            async with default_port:
                assert default_port.status == 200
        finally:
            await disconnect(api)
    finally:
        await runner.cleanup()
    assert [line.decode() for line in got] == [f'{{"line": {i}, "path": "/a/b?x=1&x=2"}}' for i in range(3)]
    assert "Authorization" not in seen[0] and seen[0]["X-Extra"] == "kept"


@pytest.mark.parametrize(
    ("ip", "status", "message"),
    [
        ("", 400, "address not allowed"),
        ("127.0.0.1", 400, "address not allowed"),  # never the API server's own loopback
        ("169.254.169.254", 400, "address not allowed"),  # nor link-local (cloud metadata)
        ("10.1.2.4", 503, "error trying to reach service: dial tcp 10.1.2.4:8081: connect: no route to host"),
        (
            "10.1.2.5",
            503,
            "error trying to reach service: dial tcp 10.1.2.5:8081: connect: connection refused",
        ),
    ],
)
async def test_a_pod_that_cannot_be_reached_is_an_error_status(
    server: ApiServer, tmp_path: Path, ip: str, status: int, message: str
) -> None:
    make_pod(server, "p", ip)
    server.pod_network.route("10.1.2.5", 8081, "127.0.0.1", free_port())  # nothing listens there
    api = await client(server, tmp_path)
    try:
        with pytest.raises(KubeApiError) as failed:
            await PodProxy(api, NS, "p", 8081).get("eventlog")
    finally:
        await disconnect(api)
    assert (failed.value.status, failed.value.message) == (status, message)


def test_proxy_and_token_requests_are_authorized_as_subresources() -> None:
    assert request_attributes("GET", f"/api/v1/namespaces/{NS}/pods/p:8081/proxy/eventlog/events", {}) == (
        request_attributes("GET", f"/api/v1/namespaces/{NS}/pods/p:8081/proxy", {})
    )
    proxied = request_attributes("GET", f"/api/v1/namespaces/{NS}/pods/p:8081/proxy/x", {})
    assert proxied is not None and (proxied.verb, proxied.resource, proxied.name) == (
        "get",
        "pods/proxy",
        "p:8081",
    )
    minted = request_attributes("POST", f"/api/v1/namespaces/{NS}/serviceaccounts/r/token", {})
    assert minted is not None and (minted.verb, minted.resource) == ("create", "serviceaccounts/token")


def collector_role(subject: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {
            "kind": "Role",
            "metadata": {"name": "collector", "namespace": NS},
            "rules": [
                {"apiGroups": [""], "resources": ["pods/proxy"], "verbs": ["get"]},
                {
                    "apiGroups": [""],
                    "resources": ["serviceaccounts/token"],
                    "verbs": ["create"],
                    "resourceNames": ["reader"],
                },
            ],
        },
        {
            "kind": "RoleBinding",
            "metadata": {"name": "collector", "namespace": NS},
            "subjects": [subject],
            "roleRef": {"kind": "Role", "name": "collector"},
        },
    ]


@pytest.mark.parametrize(
    ("subject", "token"),
    [
        ({"kind": "User", "name": "alice"}, user_token("alice")),
        ({"kind": "Group", "name": "sre"}, user_token("bob", ["sre"])),
    ],
)
async def test_users_and_groups_get_what_their_bindings_grant(
    server: ApiServer, tmp_path: Path, subject: dict[str, Any], token: str
) -> None:
    accounts = server.store.type_of("", "serviceaccounts")
    for name in ("reader", "controller"):
        server.store.create(accounts, NS, {"metadata": {"name": name}})
    server.rbac.load(collector_role(subject))
    make_pod(server, "p", "10.1.2.6")
    api = await client(server, tmp_path, token)
    try:
        assert await mint_token(api, NS, "reader", "aud")
        for refused in (
            mint_token(api, NS, "controller", "aud"),  # another account's token: not granted
            api.get(f"/api/v1/namespaces/{NS}/pods"),
            api.get("/api/v1/namespaces/default/pods/p:8081/proxy/x"),
        ):
            with pytest.raises(KubeApiError) as denied:
                await refused
            assert denied.value.status == 403
        with pytest.raises(KubeApiError) as unreachable:
            await PodProxy(api, NS, "p", 8081).get("x")  # allowed: no route, so 503, not 403
        assert unreachable.value.status == 503
    finally:
        await disconnect(api)


async def test_token_request_and_review(server: ApiServer, tmp_path: Path) -> None:
    server.store.create(server.store.type_of("", "serviceaccounts"), NS, {"metadata": {"name": "reader"}})
    api = await client(server, tmp_path)
    try:
        with pytest.raises(KubeApiError) as missing:
            await mint_token(api, NS, "nobody", "aud")
        assert missing.value.status == 404
        with pytest.raises(KubeApiError) as short:
            await api.create(
                f"/api/v1/namespaces/{NS}/serviceaccounts/reader/token", {"spec": {"expirationSeconds": 60}}
            )
        assert short.value.status == 400 and "600" in short.value.message
        token = await mint_token(api, NS, "reader", "aud-1")
        reviews = "/apis/authentication.k8s.io/v1/tokenreviews"
        good = await api.create(reviews, {"spec": {"token": token, "audiences": ["aud-1", "aud-2"]}})
        assert good["status"]["authenticated"] is True
        assert good["status"]["user"]["username"] == f"system:serviceaccount:{NS}:reader"
        assert good["status"]["audiences"] == ["aud-1"]
        other = await api.create(reviews, {"spec": {"token": token, "audiences": ["aud-2"]}})
        assert other["status"]["authenticated"] is False and "audiences" in other["status"]["error"]
        tampered = token[:-2] + ("AA" if not token.endswith("AA") else "BB")
        forged = await api.create(reviews, {"spec": {"token": tampered, "audiences": ["aud-1"]}})
        assert forged["status"]["authenticated"] is False
    finally:
        await disconnect(api)


def test_an_issued_token_expires(monkeypatch: pytest.MonkeyPatch) -> None:
    token, expires = issue_token(NS, "reader", ["aud"], 600)
    assert review_token(token, ["aud"])[0].username == f"system:serviceaccount:{NS}:reader"
    monkeypatch.setattr(identity.time, "time", lambda: expires + 1.0)
    with pytest.raises(identity.TokenError, match="expired"):
        review_token(token, ["aud"])
