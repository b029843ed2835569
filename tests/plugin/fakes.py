"""In-memory stand-ins for the plugin tests: a cluster port and ResourceClaim builders."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

from cdctl.api.imexgate import GateKeeper
from cdctl.api.refs import DomainInfo
from cdctl.domain.errors import RetriableError

DRIVER = "compute-domain.nvidia.com"
# ComputeDomain uids (configs must name a UUID).
DOM1 = "d0000000-0000-4000-8000-000000000001"
DOM2 = "d0000000-0000-4000-8000-000000000002"
DOM9 = "d0000000-0000-4000-8000-000000000009"
DOM_GONE = "d0000000-0000-4000-8000-00000000dead"
DOM_OTHER = "d0000000-0000-4000-8000-0000000000ff"
# ResourceClaim uids, for what goes through the driver (a claim reference's uid must be a UUID).
C1 = "c0000000-0000-4000-8000-000000000001"
C2 = "c0000000-0000-4000-8000-000000000002"
MISSING = "c0000000-0000-4000-8000-00000000000e"
NEVER = "c0000000-0000-4000-8000-00000000000f"
API = "resource.nvidia.com/v1beta1"


class FakeCluster:
    """Claims, domains, node labels, daemon readiness and node events, all in dicts.

    `claims` is what the API server holds (read by `get_claim`, counted in `claim_reads`); `watched` is what
    a watch delivered (served by `cached_claim`), which may lag it. `readiness_is_watched` says whether
    "not ready" comes from running watches (then only `mark_ready` changes it).

    Every request (each async method but `until_ready`) takes `latency_s` and counts as in flight meanwhile
    (`max_in_flight` is the most at once); a request whose name is in `paused` waits until that event is
    set, after `entered[name]` says it got there. `label_log` lists each label write as it lands.
    """

    def __init__(self) -> None:
        self.claims: dict[tuple[str, str], dict[str, Any]] = {}
        self.watched: dict[tuple[str, str], dict[str, Any]] = {}
        self.claim_reads = 0
        self.domains: dict[str, DomainInfo] = {}
        self.labels: dict[str, str] = {}
        self.ready: set[tuple[str, str]] = set()
        self.readiness_is_watched = False
        self.events: list[tuple[str, str, str]] = []
        self.claim_lookup_error: Exception | None = None
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}
        self.pod_reads = 0
        self._ready_changed = asyncio.Condition()
        self.latency_s = 0.0
        self.in_flight = 0
        self.max_in_flight = 0
        self.requests: list[str] = []
        self.paused: dict[str, asyncio.Event] = {}
        self.entered: dict[str, asyncio.Event] = {}
        self.label_log: list[tuple[str, str]] = []
        # Channel isolation: (domain uid, clique) -> channel on its clique object; the shared daemon's nodes.
        self.channels: dict[tuple[str, str], int] = {}
        self.shared_ready: set[str] = set()
        self._channels_changed = asyncio.Condition()

    @contextlib.asynccontextmanager
    async def _request(self, name: str) -> AsyncIterator[None]:
        self.requests.append(name)
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            self.entered.setdefault(name, asyncio.Event()).set()
            if name in self.paused:
                await self.paused[name].wait()
            if self.latency_s:
                await asyncio.sleep(self.latency_s)
            yield
        finally:
            self.in_flight -= 1

    def pause(self, name: str) -> asyncio.Event:
        """Hold requests `name` until the returned event is set (`entered[name]` is set when one arrives)."""
        self.entered[name] = asyncio.Event()
        self.paused[name] = asyncio.Event()
        return self.paused[name]

    def cached_claim(self, namespace: str, name: str, uid: str) -> dict[str, Any] | None:
        obj = self.watched.get((namespace, name))
        return obj if obj is not None and obj["metadata"]["uid"] == uid else None

    async def get_claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        async with self._request("get_claim"):
            self.claim_reads += 1
            if self.claim_lookup_error is not None:
                raise self.claim_lookup_error
            return self.claims.get((namespace, name))

    async def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        async with self._request("get_pod"):
            self.pod_reads += 1
            return self.pods.get((namespace, name))

    async def get_compute_domain(self, uid: str) -> DomainInfo | None:
        async with self._request("get_compute_domain"):
            return self.domains.get(uid)

    async def add_node_label(self, node: str, domain_uid: str) -> None:
        async with self._request("add_node_label"):
            if self.labels.get(node, domain_uid) != domain_uid:
                raise RetriableError("label already exists for a different ComputeDomain")
            self.labels[node] = domain_uid
            self.label_log.append(("add", domain_uid))

    async def remove_node_label(self, node: str, domain_uid: str) -> None:
        async with self._request("remove_node_label"):
            if self.labels.get(node) == domain_uid:
                del self.labels[node]
                self.label_log.append(("remove", domain_uid))

    async def daemon_ready(self, domain: DomainInfo, node: str, clique_id: str) -> bool:
        async with self._request("daemon_ready"):
            return (domain.uid, node) in self.ready

    def readiness_watched(self, clique_id: str) -> bool:
        return self.readiness_is_watched

    async def until_ready(self, domain: DomainInfo, node: str, clique_id: str) -> None:
        async with self._ready_changed:
            await self._ready_changed.wait_for(lambda: (domain.uid, node) in self.ready)

    async def mark_ready(self, domain_uid: str, node: str) -> None:
        """Like a watch event saying the daemon is Ready: wakes `until_ready` (adding to `ready` does not)."""
        async with self._ready_changed:
            self.ready.add((domain_uid, node))
            self._ready_changed.notify_all()

    async def clique_channel(self, domain: DomainInfo, clique_id: str) -> int | None:
        async with self._request("clique_channel"):
            return self.channels.get((domain.uid, clique_id))

    async def until_channel(self, domain: DomainInfo, clique_id: str) -> None:
        async with self._channels_changed:
            await self._channels_changed.wait_for(lambda: (domain.uid, clique_id) in self.channels)

    async def assign_channel(self, domain_uid: str, clique_id: str, channel: int) -> None:
        """Like the controller publishing the channel on the clique object (wakes `until_channel`)."""
        async with self._channels_changed:
            self.channels[(domain_uid, clique_id)] = channel
            self._channels_changed.notify_all()

    async def shared_daemon_ready(self, node: str) -> bool:
        async with self._request("shared_daemon_ready"):
            return node in self.shared_ready

    def shared_daemon_watched(self) -> bool:
        return self.readiness_is_watched

    async def until_shared_daemon_ready(self, node: str) -> None:
        async with self._ready_changed:
            await self._ready_changed.wait_for(lambda: node in self.shared_ready)

    async def node_event(self, node: str, reason: str, message: str, warning: bool = True) -> None:
        async with self._request("node_event"):
            self.events.append((node, reason, message))

    def add_pod(self, obj: dict[str, Any]) -> dict[str, Any]:
        meta = obj["metadata"]
        self.pods[(meta["namespace"], meta["name"])] = obj
        return obj

    def add_claim(self, obj: dict[str, Any]) -> dict[str, Any]:
        meta = obj["metadata"]
        self.claims[(meta["namespace"], meta["name"])] = obj
        return obj


def opaque(
    kind: str,
    domain: str,
    requests: list[str] | None = None,
    source: str = "FromClaim",
    driver: str = DRIVER,
    **extra: Any,
) -> dict[str, Any]:
    params: dict[str, Any] = {"apiVersion": API, "kind": kind, "domainID": domain, **extra}
    return {"source": source, "requests": requests or [], "opaque": {"driver": driver, "parameters": params}}


def result(
    request: str, device: str, pool: str = "node-a", driver: str = DRIVER, admin: bool = False
) -> dict[str, Any]:
    out: dict[str, Any] = {"request": request, "driver": driver, "pool": pool, "device": device}
    if admin:
        out["adminAccess"] = True
    return out


def claim_obj(
    uid: str,
    name: str = "rc",
    namespace: str = "default",
    results: list[dict[str, Any]] | None = None,
    configs: list[dict[str, Any]] | None = None,
    allocated: bool = True,
) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"uid": uid, "name": name, "namespace": namespace},
        "spec": {},
        "status": {},
    }
    if allocated:
        obj["status"]["allocation"] = {"devices": {"results": results or [], "config": configs or []}}
    return obj


def channel_claim(
    uid: str,
    domain: str,
    name: str = "rc",
    namespace: str = "default",
    mode: str | None = None,
    device: str = "channel-0",
) -> dict[str, Any]:
    extra = {"allocationMode": mode} if mode is not None else {}
    return claim_obj(
        uid,
        name,
        namespace,
        results=[result("channel", device)],
        configs=[opaque("ComputeDomainChannelConfig", domain, ["channel"], **extra)],
    )


DAEMON_POD = "computedomain-daemon-pod"
DAEMON_POD_UID = "e0000000-0000-4000-8000-000000000001"


def daemon_claim(
    uid: str,
    domain: str,
    name: str = "daemon-rc",
    namespace: str = "nvidia",
    pod: str = DAEMON_POD,
    pod_uid: str = DAEMON_POD_UID,
) -> dict[str, Any]:
    """A daemon claim as Kubernetes makes it from the daemon template for pod `pod`: owned by and reserved
    for that pod."""
    obj = claim_obj(
        uid,
        name,
        namespace,
        results=[result("daemon", "daemon-0")],
        configs=[opaque("ComputeDomainDaemonConfig", domain, ["daemon"])],
    )
    obj["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "Pod", "name": pod, "uid": pod_uid, "controller": True}
    ]
    obj["status"]["reservedFor"] = [{"resource": "pods", "name": pod, "uid": pod_uid}]
    return obj


def daemon_pod(
    domain: str,
    node: str = "node-a",
    name: str = DAEMON_POD,
    uid: str = DAEMON_POD_UID,
    namespace: str = "nvidia",
) -> dict[str, Any]:
    """A pod of the domain's daemon DaemonSet on `node`, as the DaemonSet controller makes it."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid,
            "labels": {"resource.nvidia.com/computeDomain": domain},
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "DaemonSet",
                    "name": f"computedomain-daemon-{domain}",
                    "uid": "f0000000-0000-4000-8000-000000000001",
                    "controller": True,
                }
            ],
        },
        "spec": {"nodeName": node},
    }


class FakeGates:
    """The node's IMEX handover gates (cdctl.plugin.ports.HandoverPort), open unless a test closes one.

    `closed` maps a daemon directory's name (a domain uid, or `shared-imex`) to why its gate is closed;
    `held` is claim uid -> directory names of the holds the claims keep; `opened` wakes a waiting Prepare."""

    def __init__(self) -> None:
        self.closed: dict[str, str] = {}
        self.held: dict[str, set[str]] = {}
        self.opened = asyncio.Event()

    def hold(self, directory: Path, claim_uid: str) -> str | None:
        closed = self.closed.get(directory.name)
        if closed is None:
            self.held.setdefault(claim_uid, set()).add(directory.name)
        return closed

    async def until_open(self, directory: Path) -> None:
        while directory.name in self.closed:
            self.opened.clear()
            await self.opened.wait()

    def release(self, directory: Path, claim_uid: str) -> None:
        names = self.held.get(claim_uid, set())
        names.discard(directory.name)
        if not names:
            self.held.pop(claim_uid, None)

    def open(self, name: str) -> None:
        self.closed.pop(name, None)
        self.opened.set()


@contextlib.contextmanager
def imex_ready(directory: Path) -> Iterator[GateKeeper]:
    """What an IMEX daemon whose IMEX answers READY keeps in its directory: the handover gate, open."""
    directory.mkdir(parents=True, exist_ok=True)
    keeper = GateKeeper(directory)
    keeper.open()
    try:
        yield keeper
    finally:
        keeper.close()


def killed_gate_holder(directory: Path, while_alive: Callable[[], None] = lambda: None) -> None:
    """A daemon process that opens the handover gate in `directory` and is then SIGKILLed (no chance to
    close it): what a crashed or force-deleted daemon leaves behind. `while_alive` runs while it holds it."""
    script = (
        "import sys, time; from pathlib import Path; from cdctl.api.imexgate import GateKeeper; "
        "GateKeeper(Path(sys.argv[1])).open(); print('open', flush=True); time.sleep(60)"
    )
    argv = [sys.executable, "-c", script, str(directory)]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, text=True) as holder:
        try:
            assert holder.stdout is not None and holder.stdout.readline().strip() == "open"
            while_alive()
        finally:
            holder.kill()
