"""Chaos on a running rack: `kill -9` of random components at random moments, then the invariants checked.

`Monkey(rack, plan)` kills, at seeded random moments, a random controller replica, kubelet plugin, IMEX daemon
container or simulated kubelet (down for a random moment, then started again); a `faults.Restarter` does
what the kubelet does for the killed containers. `Witness(rack)` watches every worker pod turn Running and
checks, at that moment, that the devices its kubelet handed it resolve to the IMEX channel. After the
scenario, `invariants(rack, witness)` checks what must hold whatever was killed:
- every worker that ran, ran with its channel (the witness);
- no claim was prepared for two allocations, and no device of a node was held by two prepared claims at once
  (each plugin's event log, folded in order);
- no event was lost: every claim a kubelet saw NodePrepareResources succeed for is prepared in that node's
  log;
- every event log (controllers, plugins, daemons) passes `cdctl verify`: hash chain intact, projections
  rebuilt equal (`verify_log`, the same checks in process);
and the scenario's own checks say nothing leaked (pods, claims, CDI specs, labels, DaemonSets, templates,
cliques, finalizers: cdctl.sim.rack.checks.leftovers). `tolerated(problems, monkey)` drops what a kill itself
explains: the resource-health stream of a killed plugin breaking, and a killed component seen exited (by
SIGKILL) before its restart. Used by tests/integration/test_chaos.py and bench/chaos.py.
"""

from __future__ import annotations

import asyncio
import json
import random
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cdctl.projections.lifecycle import lifecycle_projections
from cdctl.projections.replay import VerifyReport, verify_chain, verify_projections
from cdctl.projections.sinks import SqliteSink
from cdctl.sim.apiserver.watch import StoredEvent
from cdctl.sim.controllers.jobs import JOB_NAME_LABEL
from cdctl.sim.rack.checks import has_channel0
from cdctl.sim.rack.faults import kill_controller, kill_daemon, kill_kubelet, kill_plugin
from cdctl.sim.rack.launch import Rack
from cdctl.sim.rack.observe import CommitListener
from cdctl.store.sqlite import SqliteEventStore

KINDS = ("controller", "plugin", "daemon", "kubelet")
PODS = ("", "pods")


@dataclass(frozen=True)
class ChaosPlan:
    seed: int
    kills: int
    gap_s: tuple[float, float] = (0.3, 1.5)  # the wait before each kill, drawn uniformly
    kubelet_down_s: tuple[float, float] = (0.2, 1.0)  # how long a killed kubelet stays down
    kinds: tuple[str, ...] = KINDS


@dataclass(frozen=True)
class Kill:
    at_s: float  # since the monkey started
    kind: str
    target: str  # component name, node, or daemon pod uid
    detail: str = ""  # the daemon pod's name

    def __str__(self) -> str:
        return f"{self.at_s:6.2f}s {self.kind} {self.detail or self.target}"


@dataclass
class Monkey:
    rack: Rack
    plan: ChaosPlan
    kills: list[Kill] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.plan.seed)
        self._began = time.monotonic()
        self._stop = asyncio.Event()
        self._round: list[str] = []

    @property
    def killed_plugins(self) -> set[str]:
        return {k.target for k in self.kills if k.kind == "plugin"}

    @property
    def killed_components(self) -> set[str]:
        names = {f"plugin {k.target}" for k in self.kills if k.kind == "plugin"}
        return names | {k.target for k in self.kills if k.kind == "controller"}

    async def run(self) -> None:
        """Make the plan's kills, one after each random gap, until done or told to `stop`."""
        while len(self.kills) < self.plan.kills and not self._stop.is_set():
            try:
                async with asyncio.timeout(self.rng.uniform(*self.plan.gap_s)):
                    await self._stop.wait()
                return
            except TimeoutError:
                pass
            if await self.strike() is None:
                continue

    def stop(self) -> None:
        """No kill after the one under way (a kubelet being killed still comes back)."""
        self._stop.set()

    def _next_kinds(self) -> list[str]:
        """Kinds in a seeded order that gives each one its turn: a shuffled round of every kind, then the next
        round; the kinds after the chosen one are the fall-backs when it has nothing to kill."""
        if not self._round:
            self._round = list(self.plan.kinds)
            self.rng.shuffle(self._round)
        first = self._round.pop(0)
        return [first, *[k for k in self.plan.kinds if k != first]]

    async def strike(self) -> Kill | None:
        """One kill of the next kind (or another, when that one has nothing to kill now); None when nothing
        can be killed."""
        for kind in self._next_kinds():
            targets = self._targets(kind)
            if targets:
                target = self.rng.choice(targets)
                kill = Kill(
                    round(time.monotonic() - self._began, 3), kind, target, self._describe(kind, target)
                )
                self.kills.append(kill)
                await self._kill(kind, target)
                return kill
        return None

    def _describe(self, kind: str, target: str) -> str:
        running = self.rack.runtime.running.get(target) if kind == "daemon" else None
        return running.env.get("POD_NAME", "") if running is not None else ""

    def _targets(self, kind: str) -> list[str]:
        rack = self.rack
        if kind == "controller":
            return sorted(c.name for c in rack.controllers.values() if c.returncode is None)
        if kind == "plugin":
            return sorted(
                n
                for n, c in rack.plugins.items()
                if c.returncode is None and rack.cluster.kubelets[n].powered
            )
        if kind == "daemon":
            return sorted(uid for uid, r in rack.runtime.running.items() if r.process.returncode is None)
        return sorted(n for n, k in rack.cluster.kubelets.items() if k.powered and n in rack.plugins)

    async def _kill(self, kind: str, target: str) -> None:
        if kind == "controller":
            replica = next(r for r, c in self.rack.controllers.items() if c.name == target)
            await kill_controller(self.rack, replica)
        elif kind == "plugin":
            await kill_plugin(self.rack, target)
        elif kind == "daemon":
            kill_daemon(self.rack, target)
        else:
            await kill_kubelet(self.rack, target, self.rng.uniform(*self.plan.kubelet_down_s))


@dataclass
class Witness(CommitListener):
    """Every worker pod turning Running, with whether its devices resolved to the channel at that moment."""

    ran: dict[str, tuple[str, str, bool]] = field(default_factory=dict)  # pod uid -> (name, node, channel0)

    def _note(self, event: StoredEvent) -> None:
        if event.storage_key != PODS or event.type == "DELETED":
            return
        obj = event.obj
        if JOB_NAME_LABEL not in (obj["metadata"].get("labels") or {}):
            return
        running = (obj.get("status") or {}).get("phase") == "Running"
        was = ((event.previous or {}).get("status") or {}).get("phase") == "Running"
        uid = obj["metadata"]["uid"]
        if running and not was and uid not in self.ran:
            node = str(obj["spec"].get("nodeName") or "")
            kubelet = self.rack.cluster.kubelets.get(node)
            devices = kubelet.cdi_devices(uid) if kubelet is not None else []
            self.ran[uid] = (obj["metadata"]["name"], node, has_channel0(self.rack, node, devices))

    def problems(self) -> list[str]:
        return [
            f"worker {name} ran on {node} without its channel"
            for name, node, ok in self.ran.values()
            if not ok
        ]


def _events(db: Path) -> list[tuple[int, str, str, dict[str, Any]]]:
    connection = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10.0)
    try:
        rows = connection.execute(
            "SELECT position, stream, type, data FROM events ORDER BY position"
        ).fetchall()
    finally:
        connection.close()
    return [(int(p), str(s), str(t), json.loads(d)) for p, s, t, d in rows]


def prepare_problems(db: Path, node: str) -> list[str]:
    """A claim prepared for two allocations, or a device (or channel) held by two prepared claims at once."""
    problems: list[str] = []
    started: dict[str, tuple[str, list[str]]] = {}  # claim -> (allocation, devices) of its latest start
    allocations: dict[str, set[str]] = {}  # claim -> allocations it was prepared for
    holders: dict[str, str] = {}  # device or "channel N" -> claim holding it
    for position, stream, kind, data in _events(db):
        if not stream.startswith("claim/"):
            continue
        claim = stream.removeprefix("claim/")
        if kind == "ClaimPrepareStarted":
            started[claim] = (str(data.get("allocation") or ""), [str(d) for d in data.get("devices") or []])
        elif kind == "ClaimPrepareCompleted":
            allocation, devices = started.get(claim, ("", []))
            allocations.setdefault(claim, set()).add(allocation)
            for device in devices:
                holder = holders.setdefault(device, claim)
                if holder != claim:
                    problems.append(
                        f"{node}: {device} prepared for {claim} while {holder} held it (#{position})"
                    )
        elif kind == "ChannelAllocated":
            first, count = int(str(data.get("channel") or 0)), int(str(data.get("count") or 1))
            for channel in range(first, first + count):
                holder = holders.setdefault(f"channel {channel}", claim)
                if holder != claim:
                    problems.append(
                        f"{node}: channel {channel} given to {claim} while {holder} held it (#{position})"
                    )
        elif kind in ("ClaimUnprepared", "ClaimInvalidated"):
            for key in [k for k, c in holders.items() if c == claim]:
                del holders[key]
        elif kind == "ChannelReleased":
            for key in [k for k, c in holders.items() if c == claim and k.startswith("channel ")]:
                del holders[key]
    problems += [
        f"{node}: claim {claim} prepared for {len(seen)} allocations"
        for claim, seen in allocations.items()
        if len(seen) > 1
    ]
    return problems


def prepared_in_log(db: Path) -> set[str]:
    """The claims the log shows prepared (ClaimPrepareCompleted) at some point."""
    return {s.removeprefix("claim/") for _, s, kind, _ in _events(db) if kind == "ClaimPrepareCompleted"}


async def verify_log(db: Path) -> list[str]:
    """What `cdctl verify --db DB` checks (an unkeyed log): the hash chain, and projections rebuilt equal."""
    report = VerifyReport()
    store = await SqliteEventStore.open(db, read_only=True)
    try:
        await verify_chain(store, report)
        if report.ok:
            await verify_projections(store, lifecycle_projections(), SqliteSink(store), report)
    finally:
        await store.close()
    return list(report.problems)


def event_logs(rack: Rack) -> list[Path]:
    """Every event log the rack's components wrote: controllers (each pod), plugins, daemons."""
    plugins = [rack.plugin_db(n) for n in rack.plugins if rack.plugin_db(n).exists()]
    return [*rack.controller_dbs(), *plugins, *rack.daemon_dbs()]


async def invariants(rack: Rack, witness: Witness) -> list[str]:
    problems = witness.problems()
    for node, kubelet in sorted(rack.cluster.kubelets.items()):
        if node not in rack.plugins:
            continue
        db = rack.plugin_db(node)
        problems += prepare_problems(db, node)
        seen = {uid for _, _, uids in kubelet.prepare_calls for uid in uids}
        lost = sorted(seen - prepared_in_log(db))
        problems += [f"{node}: the kubelet saw claim {uid} prepared; the node's log does not" for uid in lost]
    for db in event_logs(rack):
        problems += [f"{db}: verify: {problem}" for problem in await verify_log(db)]
    return problems


def tolerated(problems: list[str], *monkeys: Monkey) -> list[str]:
    """The problems the monkeys' kills do not explain (see the module docstring)."""
    streams = tuple(f"{node}: NodeWatchResources of " for m in monkeys for node in m.killed_plugins)
    exits = tuple(f"{name} exited with -9:" for m in monkeys for name in m.killed_components)
    return [p for p in problems if not p.startswith(streams) and not p.startswith(exits)]


async def settle(rack: Rack, timeout_s: float = 30.0) -> list[str]:
    """Wait until every component runs again (the Restarter's work); the ones that do not."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not rack.exited():
            return []
        await asyncio.sleep(0.1)
    return [f"{c.name} did not come back: {c.failure()}" for c in rack.exited()]
