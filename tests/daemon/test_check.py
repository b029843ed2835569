"""The probe: a no-op without a clique, else READY from nvidia-imex-ctl, the daemon's answer on failure."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from cdctl.api.imexgate import GateKeeper
from cdctl.daemon.check import EMPTY_CLIQUE_MESSAGE, CheckSettings, NotReady, check, check_async
from cdctl.daemon.files import write_config, write_node_list
from cdctl.daemon.supervisor import ImexSupervisor
from tests.daemon.conftest import FakeImex, Recorder, eventually

ME, PEER = "10.30.0.1", "10.30.0.2"


def _configure(imexd: Path, address: str, nodes: list[str]) -> None:
    values = {"IMEXCmdBindInterfaceIP": address, "IMEXDaemonNodesConfigPath": str(imexd / "nodes.cfg")}
    write_config(imexd / "imexd.cfg.tmpl", imexd / "imexd.cfg", values)
    write_node_list(imexd / "nodes.cfg", nodes)


def _cli_check(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cdctl", "daemon", "check", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_an_empty_clique_id_needs_no_imex(tmp_path: Path) -> None:
    assert check(CheckSettings("", tmp_path / "absent")) == EMPTY_CLIQUE_MESSAGE


async def test_ready_only_when_the_local_daemon_answers_ready(use_fake_imex: FakeImex) -> None:
    imexd = use_fake_imex.imexd("me")
    _configure(imexd, ME, [ME, PEER])
    settings = CheckSettings("clique", imexd, gated=False)
    with pytest.raises(NotReady, match=f"exited with 1: UNAVAILABLE: no IMEX daemon at {ME}"):
        await check_async(settings)
    supervisor = ImexSupervisor(["nvidia-imex", "-c", str(imexd / "imexd.cfg")], "n1", Recorder())
    try:
        await supervisor.ensure_started("test")
        await eventually(lambda: "UNAVAILABLE" not in _answer(settings))
        with pytest.raises(NotReady, match="IMEX daemon not ready: NOT_READY"):
            check(settings)
        write_node_list(imexd / "nodes.cfg", [ME])
        supervisor.reload()
        await eventually(lambda: _answer(settings) == "READY")
        assert await check_async(settings) == "READY"
        # The pod's probe also needs the daemon's handover gate open for this IMEX (cdctl.api.imexgate).
        probe = CheckSettings("clique", imexd)
        with pytest.raises(NotReady, match="answered READY, but the handover gate is closed: the IMEX daemon "
                           "has not reported IMEX ready"):  # fmt: skip
            await check_async(probe)
        keeper = GateKeeper(imexd)
        keeper.open()
        assert check(probe) == "READY"
        keeper.close()
        with pytest.raises(NotReady, match="handover gate is closed"):
            check(probe)
    finally:
        await supervisor.stop()


def _answer(settings: CheckSettings) -> str:
    try:
        return check(settings)
    except NotReady as exc:
        return exc.output


def test_a_missing_ctl_binary_is_not_ready_with_a_reason(tmp_path: Path) -> None:
    with pytest.raises(NotReady, match="no-such-imex-ctl not found on PATH"):
        check(CheckSettings("clique", tmp_path, ctl_binary="no-such-imex-ctl"))


async def test_cli_exit_codes_and_one_line_messages(fake_imex: FakeImex) -> None:
    imexd = fake_imex.imexd("me")
    _configure(imexd, ME, [ME])
    env = fake_imex.env()
    env.update({"CLIQUE_ID": "", "IMEXD_DIR": str(imexd)})
    done = await asyncio.to_thread(_cli_check, env)
    assert (done.returncode, done.stdout.strip()) == (0, EMPTY_CLIQUE_MESSAGE)
    env["CLIQUE_ID"] = "uuid.1"
    done = await asyncio.to_thread(_cli_check, env)
    assert done.returncode == 1
    unavailable = f"nvidia-imex-ctl exited with 1: UNAVAILABLE: no IMEX daemon at {ME}"
    assert done.stderr.strip().splitlines() == [f"cdctl: error: IMEX daemon not ready: {unavailable}"]
    process = await asyncio.create_subprocess_exec("nvidia-imex", "-c", str(imexd / "imexd.cfg"), env=env)
    keeper = GateKeeper(imexd)
    try:
        await eventually(lambda: "handover gate is closed" in _cli_check(env).stderr)
        keeper.open()  # what the daemon does once its own check sees READY
        await eventually(lambda: _cli_check(env).returncode == 0)
        done = await asyncio.to_thread(_cli_check, env, "--cliqueid", "uuid.1", "--imexd-dir", str(imexd))
        assert (done.returncode, done.stdout) == (0, "READY\n")
    finally:
        keeper.close()
        process.terminate()
        await asyncio.wait_for(process.wait(), 60)
