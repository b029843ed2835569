"""The handover gate between a daemon's IMEX and the kubelet plugin, raced at the worst moments.

Daemon side: the real supervisor, gate and readiness monitor over the fake nvidia-imex. Plugin side: the
plugin's own gate files (cdctl.plugin.handover.GateFiles), as its Prepare uses them. The workload's start is
what a CUDA job does first: ask the node's IMEX whether it is ready (`nvidia-imex-ctl -q`).
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from cdctl.api.imexgate import CLOSED_NO_FILE, gate_state, live_holds
from cdctl.daemon.check import CheckSettings, NotReady, check_async
from cdctl.daemon.files import write_config, write_node_list
from cdctl.daemon.gate import DaemonGate
from cdctl.daemon.readiness import ReadinessMonitor
from cdctl.daemon.supervisor import ImexSupervisor
from cdctl.domain.imex import ImexExited, ImexStarted
from cdctl.plugin.handover import GateFiles
from tests.daemon.conftest import FakeImex, Recorder, eventually

ME = "10.50.0.1"


class _Journal:
    """What the monitor records into (the daemon's event log, here a list)."""

    def __init__(self, recorder: Recorder) -> None:
        self.record = recorder


@dataclass
class Daemon:
    imexd: Path
    gate: DaemonGate
    supervisor: ImexSupervisor
    recorder: Recorder

    @property
    def pid(self) -> int | None:
        return self.supervisor.process.pid if self.supervisor.running and self.supervisor.process else None


async def workload_finds_imex(imexd: Path) -> str:
    """The workload's first step: its node's IMEX answers (READY, or what it said instead)."""
    try:
        return await check_async(CheckSettings("clique", imexd, gated=False))
    except NotReady as exc:
        return exc.output


@pytest.fixture
async def daemon(use_fake_imex: FakeImex) -> AsyncIterator[Daemon]:
    imexd = use_fake_imex.imexd("node")
    values = {"IMEXCmdBindInterfaceIP": ME, "IMEXDaemonNodesConfigPath": str(imexd / "nodes.cfg")}
    write_config(imexd / "imexd.cfg.tmpl", imexd / "imexd.cfg", values)
    write_node_list(imexd / "nodes.cfg", [ME])
    recorder = Recorder()
    gate = DaemonGate(imexd)
    supervisor = ImexSupervisor(
        ["nvidia-imex", "-c", str(imexd / "imexd.cfg")], "n1", recorder, backoff_s=0.05, gate=gate
    )
    monitor = ReadinessMonitor(CheckSettings("clique", imexd), "n1", _Journal(recorder), 5.0, gate)  # type: ignore[arg-type]
    await supervisor.ensure_started("first start")
    monitoring = asyncio.create_task(monitor.run())
    try:
        await eventually(lambda: gate_state(imexd) is None)
        yield Daemon(imexd, gate, supervisor, recorder)
    finally:
        monitoring.cancel()
        await asyncio.wait([monitoring])
        await supervisor.stop()
    assert gate_state(imexd) == CLOSED_NO_FILE, "a stopped daemon leaves its gate closed"


async def test_a_planned_restart_waits_for_the_workload_handed_a_channel_before_it(daemon: Daemon) -> None:
    plugin = GateFiles(hold_s=1.0)
    # The plugin's readiness check passes and the claim is handed its channel ...
    assert plugin.hold(daemon.imexd, "claim-1") is None
    before = daemon.pid
    # ... and at that moment the peers change and the daemon must restart IMEX.
    restarting = asyncio.create_task(daemon.supervisor.restart("peers changed (IP mode)"))
    await eventually(lambda: gate_state(daemon.imexd) is not None)
    # A claim arriving now waits: the gate is closed and it keeps no hold.
    assert plugin.hold(daemon.imexd, "claim-2") == CLOSED_NO_FILE
    assert sorted(live_holds(daemon.imexd)) == ["claim-1"]
    # The first claim's workload starts, later than its Prepare: its IMEX is the one it was handed.
    assert await workload_finds_imex(daemon.imexd) == "READY"
    assert daemon.pid == before and not restarting.done()
    # Once the hold has run out IMEX restarts, and the gate opens again only for the new IMEX when READY.
    await asyncio.wait_for(restarting, 30)
    assert daemon.pid not in (None, before)
    await eventually(lambda: gate_state(daemon.imexd) is None)
    assert await workload_finds_imex(daemon.imexd) == "READY"
    assert plugin.hold(daemon.imexd, "claim-2") is None
    started = daemon.recorder.of(ImexStarted)[-1]
    assert isinstance(started, ImexStarted) and started.reason == "peers changed (IP mode)"


async def test_an_unprepared_claim_lets_a_waiting_restart_go_at_once(daemon: Daemon) -> None:
    plugin = GateFiles(hold_s=3_600.0)
    assert plugin.hold(daemon.imexd, "claim-1") is None
    restarting = asyncio.create_task(daemon.supervisor.restart("own slot moved"))
    await eventually(lambda: gate_state(daemon.imexd) is not None)
    assert not restarting.done()
    plugin.release(daemon.imexd, "claim-1")  # its pod ended: Unprepare drops the hold
    await asyncio.wait_for(restarting, 30)
    await eventually(lambda: gate_state(daemon.imexd) is None)


async def test_a_crash_closes_the_gate_before_anyone_can_be_handed_the_dead_imex(daemon: Daemon) -> None:
    plugin = GateFiles()
    crashed = daemon.pid
    assert crashed is not None
    os.kill(crashed, signal.SIGKILL)
    await daemon.recorder.wait_for(lambda events: any(isinstance(e, ImexExited) for e in events))
    # The exit was seen (and the gate closed before it was recorded): no claim gets through until the
    # restarted IMEX answers READY.
    assert gate_state(daemon.imexd) == CLOSED_NO_FILE
    assert plugin.hold(daemon.imexd, "claim-1") == CLOSED_NO_FILE
    await daemon.recorder.wait_for(lambda events: len([e for e in events if isinstance(e, ImexStarted)]) == 2)
    await eventually(lambda: gate_state(daemon.imexd) is None)
    assert daemon.pid not in (None, crashed)
    assert plugin.hold(daemon.imexd, "claim-1") is None
    assert await workload_finds_imex(daemon.imexd) == "READY"


async def test_a_ready_answer_during_a_drain_does_not_open_the_gate_again(tmp_path: Path) -> None:
    """The IMEX about to be stopped or reloaded still answers READY while the daemon waits out the holds:
    that answer must not open the gate, or a claim handed a channel then would go unwaited."""
    gate = DaemonGate(tmp_path)
    assert gate.ready(gate.generation) and gate_state(tmp_path) is None
    GateFiles().hold(tmp_path, "claim-before")
    draining = asyncio.create_task(gate.drain("peers changed (DNS names)"))
    await asyncio.sleep(0.05)
    assert not gate.ready(gate.generation), "a READY during the drain leaves the gate closed"
    assert gate_state(tmp_path) is not None
    GateFiles().release(tmp_path, "claim-before")
    await asyncio.wait_for(draining, 5)
    assert not gate.ready(gate.generation), "still closed until IMEX has changed"
    gate.imex_changed()  # reloaded (or restarted): READY from now on opens it
    assert gate.ready(gate.generation) and gate_state(tmp_path) is None


async def test_an_imex_answering_ready_while_it_stops_does_not_open_the_gate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A planned restart: the IMEX being stopped answers READY until it has exited (a real one takes its time
    over SIGTERM; the fake one until it is scheduled). The monitor is woken as the stop begins and asks at
    once: that answer must not open the gate, or a waiting Prepare is handed the IMEX that is going and its
    workload starts while the next one is not ready (seen on the real tier)."""
    from cdctl.daemon import readiness

    lingering = ["sh", "-c", "trap 'sleep 1; exit 0' TERM; while :; do sleep 0.05; done"]
    gate = DaemonGate(tmp_path)
    recorder = Recorder()
    supervisor = ImexSupervisor(lingering, "n1", recorder, backoff_s=0.05, gate=gate)
    stop_began_at: list[int] = []  # the gate's generation when the stop began
    asked_while_stopping: list[int] = []

    async def imex_answers(settings: CheckSettings) -> str:
        process = supervisor.process
        if process is None or process.returncode is not None:
            raise NotReady("UNAVAILABLE")
        if supervisor.starts == 1 and stop_began_at and gate.generation > stop_began_at[0]:
            asked_while_stopping.append(gate.generation)
        return "READY"  # whichever IMEX runs answers READY, the stopping one too until it exits

    monkeypatch.setattr(readiness, "check_async", imex_answers)
    monitor = ReadinessMonitor(CheckSettings("clique", tmp_path), "n1", _Journal(recorder), 5.0, gate)  # type: ignore[arg-type]
    await supervisor.ensure_started("first start")
    monitoring = asyncio.create_task(monitor.run())
    try:
        await eventually(lambda: gate_state(tmp_path) is None)
        stop_began_at.append(gate.generation)
        restarting = asyncio.create_task(supervisor.restart("peers changed (IP mode)"))
        open_while_the_old_one_stopped = 0
        while supervisor.starts == 1:  # from the drain's start until the new IMEX is spawned
            stopping = gate.blocked or gate.generation > stop_began_at[0]
            open_while_the_old_one_stopped += stopping and gate_state(tmp_path) is None
            await asyncio.sleep(0.01)
        await asyncio.wait_for(restarting, 10)
        assert asked_while_stopping, "the monitor asked the stopping IMEX, and it said READY (the race)"
        assert open_while_the_old_one_stopped == 0, "the gate stays closed from the stop until the new IMEX"
        await eventually(lambda: gate_state(tmp_path) is None)  # the new IMEX's READY opens it
    finally:
        monitoring.cancel()
        await asyncio.wait([monitoring])
        await supervisor.stop()
