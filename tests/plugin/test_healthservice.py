"""The DRAResourceHealth stream and UNIMPLEMENTED for unknown methods, over real unix sockets: a raw HTTP/2
client (to see the headers a Go client sees), grpclib and grpcio."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
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
from cdctl.plugin.driver import Driver
from cdctl.plugin.health import DeviceReport, Health, HealthBoard
from cdctl.plugin.server import PluginServers, ServerPaths
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
def short_dir() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="cdh", dir="/tmp"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


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
    paths = ServerPaths(short_dir / "r2", short_dir / "p2" / "compute-domain.nvidia.com")
    board = HealthBoard(resend_s=30.0)
    await board.publish(HEALTHY)
    servers = PluginServers(paths, Driver(node.state, node.cluster), lambda: None, board=board)
    await servers.start()
    channel = Channel(path=str(paths.dra))
    try:
        responses = health_v1alpha1.DraResourceHealthStub(channel).node_watch_resources(
            health_v1alpha1.NodeWatchResourcesRequest()
        )
        await asyncio.wait_for(anext(responses), timeout=5)
        assert board.watchers == 1
        await asyncio.wait_for(servers.close(), timeout=5)  # does not hang on the open stream
        assert board.watchers == 0  # its handler ended
    finally:
        channel.close()
