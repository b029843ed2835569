"""The daemon's readiness monitor: transitions only, with what nvidia-imex-ctl answered; signal handling."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from cdctl.daemon.check import CheckSettings
from cdctl.daemon.files import write_config, write_node_list
from cdctl.daemon.journal import Journal
from cdctl.daemon.readiness import ReadinessMonitor
from cdctl.daemon.supervisor import ImexSupervisor, handles_signal
from cdctl.domain.events import decode
from cdctl.domain.imex import ImexReadinessChanged
from tests.daemon.conftest import FakeImex, Recorder

ADDRESS = "10.70.0.1"


async def test_only_changes_between_ready_and_not_ready_are_recorded(use_fake_imex: FakeImex) -> None:
    imexd = use_fake_imex.imexd("r")
    values = {"IMEXCmdBindInterfaceIP": ADDRESS, "IMEXDaemonNodesConfigPath": str(imexd / "nodes.cfg")}
    write_config(imexd / "imexd.cfg.tmpl", imexd / "imexd.cfg", values)
    write_node_list(imexd / "nodes.cfg", [ADDRESS])
    journal = await Journal.open(imexd / "events.db", "n1", "daemon-n1")
    monitor = ReadinessMonitor(CheckSettings("clique", imexd), "n1", journal, period_s=0.1)
    supervisor = ImexSupervisor(["nvidia-imex", "-c", str(imexd / "imexd.cfg")], "n1", Recorder())
    try:
        assert await monitor.poll_once() is False
        assert monitor.changes == 0, "not ready is where every daemon starts"
        await supervisor.ensure_started("test")
        async with asyncio.timeout(30):
            while not await monitor.poll_once():  # noqa: ASYNC110 - the answer comes from another process
                await asyncio.sleep(0.05)
        assert await monitor.poll_once() is True
        await supervisor.stop()
        assert await monitor.poll_once() is False
        events = [decode(e) for e in await journal.store.read_stream(journal.stream)]
    finally:
        await supervisor.stop()
        await journal.close()
    changes = [e for e in events if isinstance(e, ImexReadinessChanged)]
    assert [(e.ready, e.output) for e in changes] == [
        (True, "READY"),
        (False, f"nvidia-imex-ctl exited with 1: UNAVAILABLE: no IMEX daemon at {ADDRESS}"),
    ]


@pytest.fixture
def usr1_restored() -> Iterator[None]:
    previous = signal.getsignal(signal.SIGUSR1)
    yield
    signal.signal(signal.SIGUSR1, previous)


def test_signal_handling_is_read_from_proc(usr1_restored: None) -> None:
    if not Path(f"/proc/{os.getpid()}/status").exists():
        pytest.skip("no /proc on this system")
    signal.signal(signal.SIGUSR1, signal.SIG_DFL)
    assert handles_signal(os.getpid(), signal.SIGUSR1) is False
    signal.signal(signal.SIGUSR1, lambda *_: None)
    assert handles_signal(os.getpid(), signal.SIGUSR1) is True
    assert handles_signal(2**22 + 12345, signal.SIGUSR1) is True, "an unknown process cannot be told apart"
