"""IMEX supervision against the fake nvidia-imex: start, crash and restart with backoff, reload, stop."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

from cdctl.daemon.files import write_config, write_node_list
from cdctl.daemon.supervisor import ImexSupervisor
from cdctl.domain.imex import ImexExited, ImexStarted
from cdctl.sim.node.fakeimex import Registry
from tests.daemon.conftest import FakeImex, Recorder, eventually

ADDRESS = "10.20.0.1"


def _configure(imexd: Path, nodes: list[str]) -> Path:
    values = {"IMEXCmdBindInterfaceIP": ADDRESS, "IMEXDaemonNodesConfigPath": str(imexd / "nodes.cfg")}
    write_config(imexd / "imexd.cfg.tmpl", imexd / "imexd.cfg", values)
    write_node_list(imexd / "nodes.cfg", nodes)
    return imexd / "imexd.cfg"


def _registry(fake: FakeImex) -> Registry:
    return Registry(fake.root / "registry")


async def test_start_crash_restart_reload_and_stop(use_fake_imex: FakeImex) -> None:
    config = _configure(use_fake_imex.imexd("a"), [ADDRESS])
    recorder = Recorder()
    supervisor = ImexSupervisor(["nvidia-imex", "-c", str(config)], "n1", recorder, backoff_s=0.01)
    registry = _registry(use_fake_imex)
    try:
        assert not supervisor.first_started.is_set()
        assert await supervisor.ensure_started("first start") is True
        assert supervisor.first_started.is_set()  # what the daemon's readiness monitor waits for
        assert await supervisor.ensure_started("again") is False, "a running IMEX is not started twice"
        await eventually(lambda: registry.entry(ADDRESS) is not None)
        first_pid = supervisor.process.pid if supervisor.process else 0

        os.kill(first_pid, signal.SIGKILL)
        await recorder.wait_for(lambda events: len([e for e in events if isinstance(e, ImexStarted)]) == 2)
        crash = recorder.of(ImexExited)[0]
        assert isinstance(crash, ImexExited)
        assert (crash.pid, crash.exit_code, crash.signal, crash.expected) == (
            first_pid,
            None,
            "SIGKILL",
            False,
        )
        restarted = recorder.of(ImexStarted)[-1]
        assert isinstance(restarted, ImexStarted) and restarted.pid != first_pid
        assert restarted.reason == "restart after unexpected exit #1"

        await eventually(lambda: (registry.entry(ADDRESS) or {}).get("pid") == restarted.pid)
        write_node_list(config.parent / "nodes.cfg", [ADDRESS, "10.20.0.2"])
        assert supervisor.reload() is True
        await eventually(lambda: (registry.entry(ADDRESS) or {}).get("nodes") == [ADDRESS, "10.20.0.2"])
    finally:
        await supervisor.stop()
    stopped = recorder.of(ImexExited)[-1]
    assert isinstance(stopped, ImexExited)
    assert (stopped.exit_code, stopped.signal, stopped.expected) == (0, None, True)
    assert registry.entry(ADDRESS) is None, "SIGTERM made the fake IMEX leave"
    assert supervisor.reload() is False


async def test_a_crash_looping_imex_backs_off_exponentially_up_to_the_cap(use_fake_imex: FakeImex) -> None:
    missing = use_fake_imex.root / "missing.cfg"
    recorder = Recorder()
    supervisor = ImexSupervisor(
        ["nvidia-imex", "-c", str(missing)], "n1", recorder, backoff_s=0.01, backoff_max_s=0.04
    )
    try:
        await supervisor.ensure_started("first start")
        await recorder.wait_for(lambda events: len([e for e in events if isinstance(e, ImexExited)]) >= 4)
    finally:
        await supervisor.stop()
    crashes = [e for e in recorder.of(ImexExited) if isinstance(e, ImexExited) and not e.expected]
    assert [e.exit_code for e in crashes[:4]] == [2, 2, 2, 2], "the fake exits 2 on a missing config"
    assert [e.restart_in_s for e in crashes[:4]] == [0.01, 0.02, 0.04, 0.04]


async def test_restart_replaces_the_process_and_records_an_expected_exit(use_fake_imex: FakeImex) -> None:
    config = _configure(use_fake_imex.imexd("a"), [ADDRESS])
    recorder = Recorder()
    supervisor = ImexSupervisor(["nvidia-imex", "-c", str(config)], "n1", recorder)
    try:
        await supervisor.ensure_started("first start")
        first = supervisor.process
        await supervisor.restart("peers changed (IP mode)")
        assert supervisor.process is not first and supervisor.running
    finally:
        await supervisor.stop()
    kinds = [(type(e).__name__, getattr(e, "reason", "")) for e in recorder.events]
    assert kinds == [
        ("ImexStarted", "first start"),
        ("ImexExited", "peers changed (IP mode)"),
        ("ImexStarted", "peers changed (IP mode)"),
        ("ImexExited", "daemon stopping"),
    ]


async def test_a_reload_right_after_start_waits_until_imex_can_take_it(use_fake_imex: FakeImex) -> None:
    config = _configure(use_fake_imex.imexd("a"), [ADDRESS])
    recorder = Recorder()
    supervisor = ImexSupervisor(["nvidia-imex", "-c", str(config)], "n1", recorder, signal_grace_s=0.5)
    registry = _registry(use_fake_imex)
    try:
        await supervisor.ensure_started("first start")
        write_node_list(config.parent / "nodes.cfg", [ADDRESS, "10.20.0.3"])
        assert supervisor.reload() is True
        await eventually(lambda: (registry.entry(ADDRESS) or {}).get("nodes") == [ADDRESS, "10.20.0.3"])
        assert recorder.of(ImexExited) == [], "the early SIGUSR1 did not kill the starting IMEX"
    finally:
        await supervisor.stop()


async def test_a_restart_that_cannot_start_imex_is_reported_as_failure(use_fake_imex: FakeImex) -> None:
    config = _configure(use_fake_imex.imexd("a"), [ADDRESS])
    wrapper = use_fake_imex.root / "bin" / "vanishing-imex"
    wrapper.write_text((use_fake_imex.root / "bin" / "nvidia-imex").read_text())
    wrapper.chmod(0o755)
    recorder = Recorder()
    supervisor = ImexSupervisor([str(wrapper), "-c", str(config)], "n1", recorder, backoff_s=0.01)
    try:
        await supervisor.ensure_started("first start")
        await eventually(lambda: _registry(use_fake_imex).entry(ADDRESS) is not None)
        wrapper.unlink()
        assert supervisor.process is not None
        supervisor.process.kill()
        async with asyncio.timeout(30):
            await supervisor.failed.wait()
    finally:
        await supervisor.stop()
    assert supervisor.error is not None and "cannot start" in supervisor.error.message
