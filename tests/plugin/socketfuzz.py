"""A fuzzer for the plugin's unix sockets: arbitrary and mutated protobuf bodies sent, as anything on the
node could, to every gRPC method the plugin serves, over the real sockets.

Used by tests/plugin/test_socket_fuzz.py (hypothesis draws the bodies) and by bench/socket_fuzz.py (a seeded
run of 100,000 calls). `FuzzTarget` is the plugin's servers on a temporary directory over an in-memory
cluster and event log; `call` sends bytes as they are and returns the gRPC status; `mutate` turns a valid
request into the damage a decoder meets: flipped bits, truncation, inserted and deleted bytes, a field's
wire type changed (a varint where a message is declared: the "wire-type confusion" that once decoded into
the wrong Python types), lengths past the end, varints that never end, and plain random bytes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grpclib.client import Channel
from grpclib.const import Cardinality, Status
from grpclib.encoding.base import CodecBase
from grpclib.exceptions import GRPCError, StreamTerminatedError

from cdctl._proto import v1 as health_v1
from cdctl._proto import v1alpha1 as health_v1alpha1
from cdctl._proto.k8s.io.kubelet.pkg.apis.dra import v1, v1beta1
from cdctl._proto.pluginregistration import InfoRequest, RegistrationStatus
from cdctl.api.refs import DomainInfo
from cdctl.domain.retention import RetentionPolicy
from cdctl.plugin.checkpoint import ClaimBook, ClaimBookProjection
from cdctl.plugin.driver import Driver, RetryPolicy
from cdctl.plugin.health import DeviceReport, Health
from cdctl.plugin.prepare import DeviceState
from cdctl.plugin.preparesettings import FabricStatus
from cdctl.plugin.server import PluginServers, ServerPaths
from cdctl.projections.retention import Retention
from cdctl.store import EventStore, InMemoryEventStore, SqliteEventStore
from tests.plugin.conftest import CLIQUE, node_settings
from tests.plugin.fakes import DOM1, FakeCluster, FakeGates, channel_claim, daemon_pod

UID = "c0000000-0000-4000-8000-000000000001"


@dataclass(frozen=True)
class Method:
    socket: str  # "dra" or "registration"
    path: str
    streaming: bool
    seeds: tuple[bytes, ...]  # valid bodies the mutations start from


def _claims(mod: Any, n: int) -> list[Any]:
    return [mod.Claim(namespace="default", uid=UID, name=f"rc-{i}") for i in range(n)]


def _dra_methods(mod: Any, version: str) -> list[Method]:
    seeds = (
        bytes(mod.NodePrepareResourcesRequest()),
        bytes(mod.NodePrepareResourcesRequest(claims=_claims(mod, 1))),
        bytes(mod.NodePrepareResourcesRequest(claims=_claims(mod, 3))),
    )
    prefix = f"/k8s.io.kubelet.pkg.apis.dra.{version}.DRAPlugin"
    return [
        Method("dra", f"{prefix}/NodePrepareResources", False, seeds),
        Method("dra", f"{prefix}/NodeUnprepareResources", False, seeds),
    ]


METHODS: tuple[Method, ...] = (
    Method("registration", "/pluginregistration.Registration/GetInfo", False, (bytes(InfoRequest()),)),
    Method(
        "registration", "/pluginregistration.Registration/NotifyRegistrationStatus", False,
        (bytes(RegistrationStatus(plugin_registered=True)),
         bytes(RegistrationStatus(plugin_registered=False, error="refused"))),
    ),
    *_dra_methods(v1, "v1"),
    *_dra_methods(v1beta1, "v1beta1"),
    Method("dra", "/v1alpha1.DRAResourceHealth/NodeWatchResources", True,
           (bytes(health_v1alpha1.NodeWatchResourcesRequest()),)),
    Method("dra", "/v1.DRAResourceHealth/NodeWatchResources", True,
           (bytes(health_v1.NodeWatchResourcesRequest()),)),
)  # fmt: skip


class _RawCodec(CodecBase):
    """Sends and receives bodies as bytes, undecoded."""

    __content_subtype__ = "proto"

    def encode(self, message: Any, message_type: Any) -> bytes:
        return bytes(message)

    def decode(self, data: bytes, message_type: Any) -> bytes:
        return data


@dataclass
class Answer:
    status: Status
    message: str


async def call(channel: Channel, method: Method, body: bytes, timeout_s: float = 5.0) -> Answer:
    """Send `body` to `method` and return the status; a stream is read for its first message and closed."""
    cardinality = Cardinality.UNARY_STREAM if method.streaming else Cardinality.UNARY_UNARY
    try:
        async with channel.request(method.path, cardinality, bytes, bytes, timeout=timeout_s) as stream:
            await stream.send_message(body, end=True)
            if method.streaming:
                await stream.recv_message()  # a stream that opened: the request decoded
                await stream.cancel()
                return Answer(Status.OK, "stream opened")
            await stream.recv_message()
            await stream.recv_trailing_metadata()
    except GRPCError as exc:
        return Answer(exc.status, exc.message or "")
    except StreamTerminatedError as exc:
        return Answer(Status.UNKNOWN, f"stream terminated: {exc}")
    return Answer(Status.OK, "")


def raw_channel(path: str) -> Channel:
    return Channel(path=path, codec=_RawCodec())


class FuzzTarget:
    """The plugin's registration and DRA servers (health streams included) on real unix sockets, over fakes:
    claim `default/rc-0` (UID) prepares, everything else the kubelet could name does not exist. The claim
    book is on an in-memory log, or with `on_disk` on a SQLite log as the plugin's is, compacted every
    second under a 1 MiB bound with the claims it removes dropped from the book, as the plugin does."""

    def __init__(self, on_disk: bool = False) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="cdz", dir="/tmp"))  # short: unix socket paths are limited
        self.on_disk = on_disk
        self.store: EventStore = InMemoryEventStore()
        self.cluster = FakeCluster()
        self.cluster.domains[DOM1] = DomainInfo(DOM1, "cd", "default")
        self.cluster.ready.add((DOM1, "node-a"))
        self.cluster.add_pod(daemon_pod(DOM1))
        self.cluster.add_claim(channel_claim(UID, DOM1, name="rc-0"))
        self.settings = node_settings(self.tmp)
        self.paths = ServerPaths(self.tmp / "registry", self.settings.plugin_dir)
        self.channels: dict[str, Channel] = {}
        self.servers: PluginServers | None = None
        self.book: ClaimBook | None = None
        self.retention: Retention | None = None
        self._retention_task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        if self.on_disk:
            self.store = await SqliteEventStore.open(self.tmp / "events.db")
        book = await ClaimBook.load(self.store, self.settings.node)
        state = DeviceState(self.settings, book, self.cluster, FabricStatus(clique_id=CLIQUE), FakeGates())
        driver = Driver(state, self.cluster, RetryPolicy(base_s=0.001, cap_s=0.002, budget_s=0.01))
        if isinstance(self.store, SqliteEventStore):
            retention = Retention(
                self.store, RetentionPolicy(age_s=0, size_bytes=1 << 20), [ClaimBookProjection("node-a")],
                interval_s=1.0, first_delay_s=1.0,
                after_round=lambda: self._forget(retention, book, driver),
            )  # fmt: skip
            self.retention = retention
            self._retention_task = asyncio.create_task(retention.run(), name="retention")
        self.book = book
        self.servers = PluginServers(self.paths, driver, lambda: None)
        await self.servers.start()
        await self.servers.board.publish([DeviceReport("node-a", "channel-0", Health.HEALTHY, "")])
        self.channels = {
            "dra": raw_channel(str(self.paths.dra)),
            "registration": raw_channel(str(self.paths.registration)),
        }

    @staticmethod
    async def _forget(retention: Retention, book: ClaimBook, driver: Driver) -> None:
        if retention.last_report is not None:
            book.forget_ended(retention.last_report.horizon, busy=driver.busy())

    async def send(self, method: Method, body: bytes) -> Answer:
        return await call(self.channels[method.socket], method, body)

    def reconnect(self) -> None:
        """New connections to both sockets, as a kubelet that restarted would open."""
        for channel in self.channels.values():
            channel.close()
        self.channels = {
            "dra": raw_channel(str(self.paths.dra)),
            "registration": raw_channel(str(self.paths.registration)),
        }

    def cdi_specs(self) -> list[Path]:
        root = self.settings.cdi_root
        return sorted(root.iterdir()) if root.exists() else []

    async def close(self) -> None:
        for channel in self.channels.values():
            channel.close()
        if self.servers is not None:
            await self.servers.close()
        if self._retention_task is not None:
            self._retention_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._retention_task
        await self.store.close()
        shutil.rmtree(self.tmp, ignore_errors=True)


def open_descriptors() -> int:
    return sum(1 for _ in Path("/proc/self/fd").iterdir())


# --- mutations ---------------------------------------------------------------------------------------------


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def mutate(rng: random.Random, seed: bytes) -> bytes:
    """One random kind of damage applied to `seed` (or random bytes)."""
    data = bytearray(seed)
    kind = rng.randrange(9)
    if kind == 0 or not data:
        return rng.randbytes(rng.randrange(0, 64))
    i = rng.randrange(len(data))
    if kind == 1:  # flip a bit
        data[i] ^= 1 << rng.randrange(8)
    elif kind == 2:  # truncate
        del data[i:]
    elif kind == 3:  # insert bytes
        data[i:i] = rng.randbytes(rng.randrange(1, 8))
    elif kind == 4:  # delete bytes
        del data[i : i + rng.randrange(1, 8)]
    elif kind == 5:  # change a byte's wire type bits (tags are where this bites)
        data[i] = (data[i] & ~0x07) | rng.randrange(8)
    elif kind == 6:  # a field of any number and wire type, appended or prepended
        field_no = rng.choice((1, 2, 3, 4, 5, rng.randrange(1, 1 << 29)))
        wire = rng.randrange(6)
        payload = {
            0: _varint(rng.getrandbits(rng.choice((1, 7, 32, 64, 70)))),
            1: rng.randbytes(8),
            2: _varint(rng.randrange(0, 40)) + rng.randbytes(rng.randrange(0, 40)),
            5: rng.randbytes(4),
        }.get(wire, b"")
        piece = _varint(field_no << 3 | wire) + payload
        data = bytearray(piece + data) if rng.random() < 0.5 else data + piece
    elif kind == 7:  # a length that runs past the end, or a varint that never ends
        data[i:i] = rng.choice((b"\x0a\xff\xff\xff\x0f", b"\xff" * rng.randrange(1, 12), b"\x0a\x80"))
    else:  # a nested claim's field with the wrong type
        data += (
            _varint(1 << 3 | 2)
            + _varint(4)
            + rng.choice((b"\x10\x05\x18\x07", b"\x08\x01\x10\x02", b"\x15abc", b"\x0a\x02\xc3\x28"))
        )
    return bytes(data)


# --- what the server logged -------------------------------------------------------------------------------


@dataclass
class LogWatch(logging.Handler):
    """Counts log records that carry a stack trace, and grpclib's "Application error"."""

    tracebacks: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        logging.Handler.__init__(self)

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info or "Application error" in record.getMessage():
            self.tracebacks.append(f"{record.name}: {record.getMessage()}")

    def __hash__(self) -> int:
        return id(self)


@contextlib.contextmanager
def watching_logs() -> Iterator[LogWatch]:
    watch = LogWatch()
    root = logging.getLogger()
    root.addHandler(watch)
    try:
        yield watch
    finally:
        root.removeHandler(watch)
