"""The DRAResourceHealth stream and UNIMPLEMENTED for unknown methods, over real unix sockets: a raw HTTP/2
client (to see the headers a Go client sees), grpclib and grpcio."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import h2.config
import h2.connection
import h2.events
import pytest
from grpclib.client import Channel
from grpclib.const import Status

from cdctl._proto import v1 as health_v1
from cdctl._proto import v1alpha1 as health_v1alpha1
from cdctl.plugin.devices import DRIVER_NAME
from cdctl.plugin.driver import Driver
from cdctl.plugin.health import DeviceReport, Health, HealthBoard
from cdctl.plugin.server import PluginServers, ServerPaths, _requests_finished
from cdctl.sim.apiserver.store import ObjectStore
from cdctl.sim.node.kubelet import SimKubelet
from tests.plugin.conftest import Node

MADE_UP = "/made.up.v9.Nothing/DoesNotExist"
WATCH_PATHS = {
    "v1alpha1": "/v1alpha1.DRAResourceHealth/NodeWatchResources",
    "v1": "/v1.DRAResourceHealth/NodeWatchResources",
}
HEALTHY = [
    DeviceReport("node-a", "channel-0", Health.HEALTHY, "NVLink fabric COMPLETED"),
    DeviceReport("node-a", "daemon-0", Health.HEALTHY, "no IMEX daemon prepared on this node"),
]


@pytest.fixture
async def servers(node: Node, short_dir: Path) -> AsyncIterator[PluginServers]:
    paths = ServerPaths(short_dir / "registry", short_dir / "plugins" / "compute-domain.nvidia.com")
    board = HealthBoard(resend_s=30.0, timeout_s=90)
    await board.publish(HEALTHY, checked_at=1_700_000_000)
    servers = PluginServers(paths, Driver(node.state, node.cluster), lambda: None, board=board)
    await servers.start()
    yield servers
    await servers.close()


async def raw_call(socket_path: Path, method: str) -> dict[str, str]:
    """One gRPC call with an empty message over plain HTTP/2; every response header and trailer."""
    reader, writer = await asyncio.open_unix_connection(str(socket_path))
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
    conn.initiate_connection()
    conn.send_headers(1, [(":method", "POST"), (":scheme", "http"), (":path", method),
                          (":authority", "localhost"), ("content-type", "application/grpc"),
                          ("te", "trailers")])  # fmt: skip
    conn.send_data(1, b"\x00\x00\x00\x00\x00", end_stream=True)
    writer.write(conn.data_to_send())
    headers: dict[str, str] = {}
    try:
        while True:
            data = await asyncio.wait_for(reader.read(65535), timeout=5)
            assert data, "connection closed before the stream ended"
            for event in conn.receive_data(data):
                if isinstance(event, h2.events.ResponseReceived | h2.events.TrailersReceived):
                    headers.update((str(k), str(v)) for k, v in event.headers)
                if isinstance(event, h2.events.StreamEnded):
                    return headers
            writer.write(conn.data_to_send())
    finally:
        writer.close()


@pytest.mark.parametrize("which", ["dra", "registration"])
async def test_an_unknown_method_gets_unimplemented_with_a_grpc_content_type(
    servers: PluginServers, which: str
) -> None:
    headers = await raw_call(getattr(servers.paths, which), MADE_UP)
    assert headers[":status"] == "200"
    assert headers.get("content-type", "").startswith("application/grpc")  # a Go client needs it
    assert headers["grpc-status"] == str(Status.UNIMPLEMENTED.value)


def _grpcio_unary(sock: Path, method: str) -> grpc.StatusCode:
    with grpc.insecure_channel(f"unix:{sock}") as ch:
        call = ch.unary_unary(method, request_serializer=lambda b: b, response_deserializer=lambda b: b)
        try:
            call(b"", timeout=10)
        except grpc.RpcError as error:
            return error.code()  # type: ignore[attr-defined, no-any-return]
    return grpc.StatusCode.OK


async def test_grpcio_reads_unimplemented_for_an_unknown_method(servers: PluginServers) -> None:
    for sock in (servers.paths.dra, servers.paths.registration):
        assert await asyncio.to_thread(_grpcio_unary, sock, MADE_UP) == grpc.StatusCode.UNIMPLEMENTED


def _as_tuples(response: Any) -> list[tuple[str, str, int, str, int, int]]:
    return [
        (d.device.pool_name, d.device.device_name, int(d.health), d.message, d.last_updated_time,
         d.health_check_timeout_seconds)
        for d in response.devices
    ]  # fmt: skip


@pytest.mark.parametrize("mod", [health_v1alpha1, health_v1])
async def test_watch_sends_the_full_list_on_open_and_on_every_change(
    servers: PluginServers, mod: Any
) -> None:
    channel = Channel(path=str(servers.paths.dra))
    try:
        stub = mod.DraResourceHealthStub(channel)
        responses = stub.node_watch_resources(mod.NodeWatchResourcesRequest())
        first = await asyncio.wait_for(anext(responses), timeout=5)
        assert _as_tuples(first) == [
            ("node-a", "channel-0", 1, "NVLink fabric COMPLETED", 1_700_000_000, 90),
            ("node-a", "daemon-0", 1, "no IMEX daemon prepared on this node", 1_700_000_000, 90),
        ]
        degraded = DeviceReport("node-a", "channel-0", Health.UNHEALTHY, "fabric state is IN_PROGRESS")
        await servers.board.publish([degraded, HEALTHY[1]], checked_at=1_700_000_030)
        second = await asyncio.wait_for(anext(responses), timeout=5)
        assert _as_tuples(second)[0] == (
            "node-a", "channel-0", 2, "fabric state is IN_PROGRESS", 1_700_000_030, 90
        )  # fmt: skip
        assert len(second.devices) == 2  # the full list, not just what changed
        await responses.aclose()
    finally:
        channel.close()


async def started(node: Node, root: Path) -> PluginServers:
    """The plugin's servers under `root`, its board publishing HEALTHY."""
    board = HealthBoard(resend_s=30.0)
    await board.publish(HEALTHY)
    paths = ServerPaths(root / "registry", root / "plugins" / "compute-domain.nvidia.com")
    servers = PluginServers(paths, Driver(node.state, node.cluster), lambda: None, board=board)
    await servers.start()
    return servers


async def opened_stream(channel: Channel) -> AsyncIterator[health_v1alpha1.NodeWatchResourcesResponse]:
    """A v1alpha1 health stream on `channel`, once its first list has arrived."""
    responses = health_v1alpha1.DraResourceHealthStub(channel).node_watch_resources(
        health_v1alpha1.NodeWatchResourcesRequest()
    )
    await asyncio.wait_for(anext(responses), timeout=5)
    return responses


def _grpcio_first_message(sock: Path, method: str) -> bytes:
    with grpc.insecure_channel(f"unix:{sock}") as ch:
        call = ch.unary_stream(method, request_serializer=lambda b: b, response_deserializer=lambda b: b)
        stream = call(b"", timeout=10)
        first: bytes = next(iter(stream))
        stream.cancel()
        return first


@pytest.mark.parametrize("version", ["v1alpha1", "v1"])
async def test_grpcio_reads_the_health_stream(servers: PluginServers, version: str) -> None:
    raw = await asyncio.to_thread(_grpcio_first_message, servers.paths.dra, WATCH_PATHS[version])
    mod = health_v1alpha1 if version == "v1alpha1" else health_v1
    parsed = mod.NodeWatchResourcesResponse.parse(raw)
    assert [(d.device.device_name, d.health) for d in parsed.devices] == [
        ("channel-0", mod.HealthStatus.HEALTHY),
        ("daemon-0", mod.HealthStatus.HEALTHY),
    ]


async def test_closing_the_servers_ends_an_open_health_stream(node: Node, short_dir: Path) -> None:
    servers = await started(node, short_dir / "r2")
    board = servers.board
    channel = Channel(path=str(servers.paths.dra))
    try:
        await opened_stream(channel)
        assert board.watchers == 1
        await asyncio.wait_for(servers.close(), timeout=5)  # does not hang on the open stream
        assert board.watchers == 0  # its handler ended
    finally:
        channel.close()


def _grpcio_until_the_end(sock: Path, method: str, first_read: asyncio.Event, loop: Any) -> Any:
    """Read a health stream as the kubelet does (grpc-go's Recv until it fails): its final status code."""
    with grpc.insecure_channel(f"unix:{sock}") as ch:
        call = ch.unary_stream(method, request_serializer=lambda b: b, response_deserializer=lambda b: b)
        stream = call(b"", timeout=20)
        try:
            for _ in stream:
                loop.call_soon_threadsafe(first_read.set)
        except grpc.RpcError as error:
            return error.code()
        return stream.code()


@pytest.mark.parametrize("version", ["v1alpha1", "v1"])
async def test_a_stopping_plugin_ends_the_kubelets_health_stream_with_ok(
    node: Node, short_dir: Path, version: str
) -> None:
    """The kubelet logs `Error receiving from WatchResources stream` for any end but a clean one (status OK,
    read as io.EOF): a plugin that closed its server under an open stream logged one per node and restart."""
    servers = await started(node, short_dir / "r3")
    paths = servers.paths
    first_read = asyncio.Event()
    reader = asyncio.create_task(
        asyncio.to_thread(
            _grpcio_until_the_end, paths.dra, WATCH_PATHS[version], first_read, asyncio.get_running_loop()
        )
    )
    try:
        await asyncio.wait_for(first_read.wait(), timeout=10)
        # A stream cut under an open client held the close until the client left.
        await asyncio.wait_for(servers.close(), timeout=5)
        assert await asyncio.wait_for(reader, timeout=10) == grpc.StatusCode.OK
    finally:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(servers.close(), timeout=5)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(reader, timeout=25)  # the call's own deadline is 20 s


async def test_a_stream_opened_on_a_closed_board_ends_at_once(node: Node, short_dir: Path) -> None:
    board = HealthBoard(resend_s=30.0)
    await board.publish(HEALTHY)
    await board.close()
    sent = [snapshot async for snapshot in board.watch()]
    assert sent == [] and board.watchers == 0


async def _follow_until_deregistered(kubelet: SimKubelet, stop: Any) -> list[str]:
    """The simulated kubelet registers the plugin and follows its health; `stop()` stops the plugin; the
    kubelet passes until it deregisters it. The errors its health stream logged."""
    async with asyncio.timeout(10):
        while DRIVER_NAME not in kubelet.plugins.plugins:  # a loaded machine may miss the first GetInfo
            await kubelet.plugins.scan()
            await asyncio.sleep(0.02)
    kubelet.health.follow(DRIVER_NAME, kubelet.plugins.plugins[DRIVER_NAME].endpoint)
    async with asyncio.timeout(10):
        while not kubelet.health.devices:  # noqa: ASYNC110 (the simulated kubelet's cache has no event)
            await asyncio.sleep(0.02)
    await stop()
    async with asyncio.timeout(10):
        while DRIVER_NAME in kubelet.plugins.plugins:
            await kubelet.plugins.scan()
            await asyncio.sleep(0.05)
    await kubelet.health.stop()
    return kubelet.health.errors


async def test_the_simulated_kubelet_sees_a_plugin_stop_end_its_health_stream_cleanly(
    node: Node, short_dir: Path
) -> None:
    servers = await started(node, short_dir / "r4")
    paths = servers.paths
    kubelet = SimKubelet(ObjectStore(), "node-a", paths.registrar_dir)
    assert await _follow_until_deregistered(kubelet, servers.close) == []


async def test_the_simulated_kubelet_logs_a_health_stream_cut_by_its_server(short_dir: Path) -> None:
    """What a real kubelet logs as `Error receiving from WatchResources stream ... Unavailable`: the plugin
    process ended under an open stream (killed, or closed without ending its streams, then exited)."""
    paths = ServerPaths(short_dir / "r5", short_dir / "p5" / "compute-domain.nvidia.com")
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.plugin.healthchild", str(paths.registrar_dir), str(paths.plugin_dir),
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert child.stdout is not None
    try:
        assert await asyncio.wait_for(child.stdout.readline(), timeout=30) == b"serving\n"

        async def die() -> None:
            child.kill()
            await asyncio.wait_for(child.wait(), timeout=10)
            paths.registration.unlink()  # the restarted plugin replaces its stale socket

        kubelet = SimKubelet(ObjectStore(), "node-a", paths.registrar_dir)
        errors = await _follow_until_deregistered(kubelet, die)
    finally:
        if child.returncode is None:
            child.kill()
            await asyncio.wait_for(child.wait(), 60)
    assert [e for e in errors if "NodeWatchResources of compute-domain.nvidia.com" in e], errors


async def test_the_close_sees_an_open_stream_in_flight_until_the_board_ends_it(
    node: Node, short_dir: Path
) -> None:
    """`_requests_finished` reads grpclib's request tasks (private to grpclib 0.4.x): if they moved, it would
    see nothing in flight, and a stopping plugin could cut a stream before its end is sent."""
    servers = await started(node, short_dir / "r6")
    board = servers.board
    channel = Channel(path=str(servers.paths.dra))
    try:
        responses = await opened_stream(channel)
        assert not await _requests_finished(servers._dra, 0.2), "the open stream is a request in flight"
        await board.close()
        assert await _requests_finished(servers._dra, 5.0)
        assert [r async for r in responses] == []  # ended, with status OK (no error raised)
    finally:
        channel.close()
        await asyncio.wait_for(servers.close(), timeout=10)
