"""The fork server: `cdctl` commands as separate processes with their own environment, output, exit code."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from cdctl.sim.node.forkserver import ForkServer
from tests.integration.support import until


@pytest.fixture
async def server() -> AsyncIterator[ForkServer]:
    started = await ForkServer.start(["cdctl.cli.main"], env=dict(os.environ))
    yield started
    await started.stop()


async def test_a_command_runs_in_its_own_process_with_its_exit_code_and_output(
    server: ForkServer, tmp_path: Path
) -> None:
    log = tmp_path / "version.log"
    child = await server.spawn(["--version"], dict(os.environ), log)
    async with asyncio.timeout(30):
        assert await child.wait() == 0
    assert child.pid not in (os.getpid(), server.process.pid)
    assert "cdctl, version" in log.read_text()
    failing = await server.spawn(["no-such-command"], dict(os.environ), tmp_path / "usage.log")
    async with asyncio.timeout(30):
        assert await failing.wait() == 2
    assert "No such command" in (tmp_path / "usage.log").read_text()


async def test_the_child_takes_the_requested_environment_and_stops_on_sigterm(
    server: ForkServer, tmp_path: Path
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    env = {**os.environ, "CDCTL_SIM_KUBECONFIG_OUT": str(kubeconfig), "CDCTL_SIM_PORT": "0"}
    child = await server.spawn(["sim", "apiserver"], env, tmp_path / "apiserver.log")
    try:
        async with asyncio.timeout(30):
            while not kubeconfig.exists():
                assert child.returncode is None, (tmp_path / "apiserver.log").read_text()
                await asyncio.sleep(0.05)
        assert "server: http://127.0.0.1:" in kubeconfig.read_text()
    finally:
        child.send_signal(signal.SIGTERM)
        async with asyncio.timeout(30):
            assert await child.wait() == 0


async def test_children_end_with_the_server_reporting_them(tmp_path: Path) -> None:
    server = await ForkServer.start(["cdctl.cli.main"], env=dict(os.environ))
    child = await server.spawn(["sim", "apiserver", "--port", "0"], dict(os.environ), tmp_path / "a.log")
    child.kill()
    async with asyncio.timeout(30):
        assert await child.wait() == -signal.SIGKILL
    await server.stop()
    assert server.process.returncode == 0


async def test_a_cancelled_spawn_leaves_the_server_answering_the_next(
    server: ForkServer, tmp_path: Path
) -> None:
    """A probe cancelled while its fork is on the way (its pod is being stopped) must not stop the reader."""
    cancelled = asyncio.create_task(server.spawn(["--version"], dict(os.environ), tmp_path / "gone.log"))
    await asyncio.sleep(0)  # the request is written; the answer has not come yet
    cancelled.cancel()
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    for attempt in range(3):
        async with asyncio.timeout(30):
            child = await server.spawn(["--version"], dict(os.environ), tmp_path / f"next-{attempt}.log")
            assert await child.wait() == 0


async def test_children_left_running_when_the_parent_goes_away_are_stopped(tmp_path: Path) -> None:
    """The rack's process killed without stopping its components (a test's time limit kills it): the fork
    server's stdin ends, and the children it started must not run on as orphans."""
    server = await ForkServer.start(["cdctl.cli.main"], env=dict(os.environ))
    child = await server.spawn(["sim", "apiserver", "--port", "0"], dict(os.environ), tmp_path / "a.log")
    assert server.process.stdin is not None
    server.process.stdin.close()  # what the parent's death does to the pipe
    async with asyncio.timeout(30):
        assert await server.process.wait() == 0
    await until("the orphaned child stopped", lambda: None if _ended(child.pid) else "still running")


def _ended(pid: int) -> bool:
    """Gone, or a zombie waiting for init to reap it (the server that would have is gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rfind(")") + 2 :].split()[0] == "Z"
