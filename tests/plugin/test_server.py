"""The gRPC servers over real unix sockets, called by a grpclib client and by a grpcio client."""

from __future__ import annotations

import asyncio
import stat
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from grpclib.client import Channel
from grpclib.exceptions import GRPCError
from grpclib.health.v1.health_grpc import HealthStub
from grpclib.health.v1.health_pb2 import HealthCheckRequest, HealthCheckResponse
from structlog.testing import capture_logs

from cdctl._proto.k8s.io.kubelet.pkg.apis.dra import v1, v1beta1
from cdctl._proto.pluginregistration import InfoRequest, RegistrationStatus, RegistrationStub
from cdctl.domain.errors import PermanentError
from cdctl.plugin.connections import _TRACKED, CLOSED_STREAMS_KEPT, open_connections
from cdctl.plugin.driver import Driver, RetryPolicy
from cdctl.plugin.server import PluginServers, ServerPaths
from tests.plugin.conftest import Node
from tests.plugin.fakes import C1, DOM1, MISSING, NEVER, channel_claim


@dataclass
class Running:
    servers: PluginServers
    paths: ServerPaths
    registered: list[bool]


@pytest.fixture
async def running(node: Node, short_dir: Path) -> AsyncIterator[Running]:
    paths = ServerPaths(short_dir / "registry", short_dir / "plugins" / "compute-domain.nvidia.com")
    paths.plugin_dir.mkdir(parents=True)
    paths.dra.write_text("stale")  # left over from an earlier run
    registered: list[bool] = []
    # A budget a missing claim runs out of quickly, yet long enough for a claim that prepares at once to
    # do so on a loaded machine (0.2 s was not, with other suites on the same two cores).
    driver = Driver(node.state, node.cluster, RetryPolicy(base_s=0.01, cap_s=0.02, budget_s=1.0))
    servers = PluginServers(paths, driver, lambda: registered.append(True), health_port=0)
    await servers.start()
    yield Running(servers, paths, registered)
    await servers.close()


def claim_msg(mod: object, uid: str, name: str = "rc") -> object:
    return mod.Claim(namespace="default", uid=uid, name=name)  # type: ignore[attr-defined]


async def test_sockets_are_owner_only_and_the_stale_one_was_replaced(running: Running) -> None:
    for path in (running.paths.dra, running.paths.registration):
        mode = path.stat().st_mode
        assert stat.S_ISSOCK(mode)
        assert stat.S_IMODE(mode) == 0o600


async def test_registration_info_and_status(running: Running) -> None:
    channel = Channel(path=str(running.paths.registration))
    try:
        stub = RegistrationStub(channel)
        info = await stub.get_info(InfoRequest())
        assert info.type == "DRAPlugin"
        assert info.name == "compute-domain.nvidia.com"
        assert info.endpoint == str(running.paths.dra)
        assert info.supported_versions == [
            "v1.DRAPlugin", "v1beta1.DRAPlugin", "v1.DRAResourceHealth", "v1alpha1.DRAResourceHealth"
        ]  # fmt: skip
        await stub.notify_registration_status(RegistrationStatus(plugin_registered=True))
        assert running.registered == [True]
        # a refusal is acknowledged (the kubelet only logs the answer) and logged, never a registration
        with capture_logs() as logs:
            await stub.notify_registration_status(RegistrationStatus(plugin_registered=False, error="no"))
        assert running.registered == [True]
        assert [(e["event"], e["error"]) for e in logs] == [("kubelet refused the plugin registration", "no")]
    finally:
        channel.close()


@pytest.mark.parametrize("mod", [v1, v1beta1])
async def test_prepare_and_unprepare_with_grpclib_give_an_entry_per_claim(
    node: Node, running: Running, mod: object
) -> None:
    node.cluster.ready.add((DOM1, "node-a"))
    node.cluster.add_claim(channel_claim(C1, DOM1))
    channel = Channel(path=str(running.paths.dra))
    try:
        stub = mod.DraPluginStub(channel)  # type: ignore[attr-defined]
        empty = await stub.node_prepare_resources(mod.NodePrepareResourcesRequest())  # type: ignore[attr-defined]
        assert dict(empty.claims) == {}
        req = mod.NodePrepareResourcesRequest(  # type: ignore[attr-defined]
            claims=[claim_msg(mod, C1), claim_msg(mod, MISSING, "nope")]
        )
        resp = await stub.node_prepare_resources(req)
        assert set(resp.claims) == {C1, MISSING}
        ok = resp.claims[C1]
        assert ok.error == ""
        assert [(d.device_name, d.pool_name, d.request_names) for d in ok.devices] == [
            ("channel-0", "node-a", ["channel"])
        ]
        assert ok.devices[0].cdi_device_ids == [f"k8s.compute-domain.nvidia.com/claim={C1}-channel-0"]
        assert "ResourceClaim default/nope not found" in resp.claims[MISSING].error
        assert "still failing" in resp.claims[MISSING].error  # an entry at the deadline, not silence
        unreq = mod.NodeUnprepareResourcesRequest(  # type: ignore[attr-defined]
            claims=[claim_msg(mod, C1), claim_msg(mod, NEVER)]
        )
        unresp = await stub.node_unprepare_resources(unreq)
        assert {k: v.error for k, v in unresp.claims.items()} == {C1: "", NEVER: ""}
        assert node.cluster.labels == {}
    finally:
        channel.close()


def _grpcio_call(sock: Path, method: str, request: bytes) -> bytes:
    with grpc.insecure_channel(f"unix:{sock}") as ch:
        call = ch.unary_unary(method, request_serializer=lambda b: b, response_deserializer=lambda b: b)
        result: bytes = call(request, timeout=10)
        return result


async def test_grpcio_client_against_the_unix_sockets(node: Node, running: Running) -> None:
    node.cluster.ready.add((DOM1, "node-a"))
    node.cluster.add_claim(channel_claim(C1, DOM1))
    raw_info = await asyncio.to_thread(
        _grpcio_call, running.paths.registration, "/pluginregistration.Registration/GetInfo", b""
    )
    from cdctl._proto.pluginregistration import PluginInfo

    assert PluginInfo.parse(raw_info).supported_versions[:2] == ["v1.DRAPlugin", "v1beta1.DRAPlugin"]
    for version, mod in (("v1", v1), ("v1beta1", v1beta1)):
        req = mod.NodePrepareResourcesRequest(claims=[mod.Claim(namespace="default", uid=C1, name="rc")])
        path = f"/k8s.io.kubelet.pkg.apis.dra.{version}.DRAPlugin/NodePrepareResources"
        raw = await asyncio.to_thread(_grpcio_call, running.paths.dra, path, bytes(req))
        resp = mod.NodePrepareResourcesResponse.parse(raw)
        assert list(resp.claims) == [C1] and resp.claims[C1].devices[0].device_name == "channel-0"
    unreq = v1.NodeUnprepareResourcesRequest(claims=[v1.Claim(namespace="default", uid=C1, name="rc")])
    path = "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodeUnprepareResources"
    raw = await asyncio.to_thread(_grpcio_call, running.paths.dra, path, bytes(unreq))
    assert v1.NodeUnprepareResourcesResponse.parse(raw).claims[C1].error == ""
    assert node.state.book.get(C1).state.value == "Unprepared"  # type: ignore[union-attr]


async def test_health_is_serving_only_while_both_sockets_answer(running: Running) -> None:
    port = running.servers.bound_health_port
    assert port
    channel = Channel(host="127.0.0.1", port=port)
    try:
        stub = HealthStub(channel)
        for service in ("", "liveness"):
            reply = await stub.Check(HealthCheckRequest(service=service))
            assert reply.status == HealthCheckResponse.SERVING
        with pytest.raises(GRPCError):
            await stub.Check(HealthCheckRequest(service="other"))
        # the DRA socket goes away: liveness must fail
        running.paths.dra.unlink()
        reply = await stub.Check(HealthCheckRequest(service="liveness"))
        assert reply.status == HealthCheckResponse.NOT_SERVING
    finally:
        channel.close()


async def test_a_socket_path_too_long_for_unix_is_named_and_a_failed_start_closes_cleanly(
    node: Node, short_dir: Path
) -> None:
    deep = short_dir / ("d" * 100)
    paths = ServerPaths(short_dir / "registry", deep / "compute-domain.nvidia.com")
    servers = PluginServers(paths, Driver(node.state, node.cluster), lambda: None)
    with pytest.raises(PermanentError) as refused:
        await servers.start()
    length = len(str(paths.dra).encode())
    assert str(refused.value) == (
        f"kubelet plugin settings: socket path {paths.dra} is {length} bytes; a unix socket path is at most "
        "107: choose shorter --kubelet-plugins-directory-path and --kubelet-registrar-directory-path"
    )
    await servers.close()  # nothing was started: nothing to close, and no error hiding the first one
    assert not paths.dra.exists() and not paths.registration.exists()


async def test_closing_the_servers_ends_the_connections_a_client_kept(node: Node, short_dir: Path) -> None:
    paths = ServerPaths(short_dir / "registry", short_dir / "plugins" / "compute-domain.nvidia.com")
    servers = PluginServers(paths, Driver(node.state, node.cluster), lambda: None)
    await servers.start()
    kept = [Channel(path=str(paths.registration)), Channel(path=str(paths.dra))]
    try:
        await RegistrationStub(kept[0]).get_info(InfoRequest())
        await v1.DraPluginStub(kept[1]).node_prepare_resources(v1.NodePrepareResourcesRequest())
        dra, registration = servers._dra, servers._reg
        assert (open_connections(registration), open_connections(dra)) == (1, 1)
        await servers.close()
        # grpclib alone leaves both open until the client hangs up: a socket of a closed server
        assert (open_connections(registration), open_connections(dra)) == (0, 0)
    finally:
        for channel in kept:
            channel.close()


async def test_a_long_lived_connection_remembers_a_bounded_number_of_closed_streams(running: Running) -> None:
    channel = Channel(path=str(running.paths.registration))
    try:
        stub = RegistrationStub(channel)
        for _ in range(CLOSED_STREAMS_KEPT + 100):
            await stub.get_info(InfoRequest())
        (protocol,) = _TRACKED[running.servers._reg]
        # h2 alone keeps 65,536 per connection: ~6 MiB that a kubelet's connection would hold for good
        assert len(protocol.connection._connection._closed_streams) == CLOSED_STREAMS_KEPT
    finally:
        channel.close()
