"""HostManagedIMEX with the host's IMEX config given: a channel is handed out only while the host's IMEX
answers READY (cdctl.plugin.hostimex), and what `nvidia-imex-ctl -q` answers is read as the tool means it."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import stat
from pathlib import Path

import pytest

from cdctl.plugin import cdi
from cdctl.plugin.checkpoint import ClaimBook
from cdctl.plugin.devices import parse_claim
from cdctl.plugin.hostimex import CTL, HostImexCheck, find_ctl
from cdctl.plugin.prepare import DeviceState
from cdctl.plugin.preparesettings import DaemonNotReady
from tests.plugin.conftest import Node
from tests.plugin.fakes import DOM1, channel_claim


def _ctl(directory: Path, body: str) -> Path:
    """An `nvidia-imex-ctl` that runs `body` (sh), and records its arguments beside it."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / CTL
    path.write_text(f'#!/bin/sh\necho "$@" > "{directory}/args"\n{body}\n')
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.mark.parametrize(
    ("body", "answer"),
    [
        ("echo READY", None),
        ("echo NOT_READY", "nvidia-imex-ctl -q answered NOT_READY (exit code 0)"),
        ('echo "UNAVAILABLE: no IMEX daemon at 10.0.0.1"; exit 1',
         "nvidia-imex-ctl -q answered UNAVAILABLE: no IMEX daemon at 10.0.0.1 (exit code 1)"),
        ("echo READY; exit 3", "nvidia-imex-ctl -q answered READY (exit code 3)"),
        ("exit 2", "nvidia-imex-ctl -q answered nothing (exit code 2)"),
    ],
)  # fmt: skip
async def test_only_a_ready_answer_with_exit_zero_is_ready(
    tmp_path: Path, body: str, answer: str | None
) -> None:
    ctl = _ctl(tmp_path / "bin", body)
    check = HostImexCheck(ctl, tmp_path / "config.cfg")
    assert await check.not_ready() == answer
    assert (tmp_path / "bin" / "args").read_text().split() == ["-c", str(tmp_path / "config.cfg"), "-q"]


async def test_a_tool_that_cannot_run_is_not_ready(tmp_path: Path) -> None:
    missing = HostImexCheck(tmp_path / "nowhere" / CTL, tmp_path / "config.cfg")
    reason = await missing.not_ready()
    assert reason is not None and "could not run" in reason


async def test_until_ready_returns_once_the_host_imex_answers_ready(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.write_text("NOT_READY")
    ctl = _ctl(tmp_path / "bin", f'cat "{state}"')
    check = HostImexCheck(ctl, tmp_path / "config.cfg", poll_s=0.01)
    waiting = asyncio.create_task(check.until_ready())
    await asyncio.sleep(0.1)
    assert not waiting.done()
    state.write_text("READY")
    await asyncio.wait_for(waiting, 10)


def test_the_tool_is_found_in_the_driver_root_before_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    on_path = _ctl(tmp_path / "path-bin", "echo READY")
    monkeypatch.setenv("PATH", f"{on_path.parent}{os.pathsep}{os.environ.get('PATH', '')}")
    root = tmp_path / "driver-root"
    assert find_ctl(root) == on_path
    in_root = _ctl(root / "usr" / "bin", "echo READY")
    assert find_ctl(root) == in_root
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert find_ctl(tmp_path / "no-root") is None


class _HostImex:
    """The host's IMEX as the plugin asks it: READY or not, as the test says."""

    def __init__(self) -> None:
        self.answer: str | None = "nvidia-imex-ctl -q answered NOT_READY (exit code 0)"
        self.asked = 0

    async def not_ready(self) -> str | None:
        self.asked += 1
        return self.answer

    async def until_ready(self) -> None:
        async with asyncio.timeout(10):
            while self.answer is not None:  # noqa: ASYNC110 - the test flips it
                await asyncio.sleep(0.01)


async def test_a_channel_waits_while_the_host_imex_is_not_ready_and_is_handed_out_once_it_is(
    node: Node,
) -> None:
    host_imex = _HostImex()
    node.settings = dataclasses.replace(node.settings, host_managed=True)
    book = await ClaimBook.load(node.store, node.settings.node)
    state = DeviceState(node.settings, book, node.cluster, node.fabric, host_imex=host_imex)
    claim = parse_claim(channel_claim("c1", DOM1))

    with pytest.raises(DaemonNotReady) as waited:
        await state.prepare(claim, state.book.version("c1"))
    assert str(waited.value) == (
        "the host's IMEX on this node is not ready: nvidia-imex-ctl -q answered NOT_READY (exit code 0)"
    )
    assert cdi.read_spec(cdi.claim_spec_path(node.settings.cdi_root, "c1")) is None, "no channel handed out"
    types = [e.type for e in await node.store.read_stream("claim/c1")]
    assert "ClaimPrepareCompleted" not in types and types[-1] == "ClaimPrepareFailed"

    wake = asyncio.create_task(waited.value.wake())
    host_imex.answer = None  # the host's IMEX is back
    await asyncio.wait_for(wake, 10)
    devices = await state.prepare(claim, state.book.version("c1"))
    assert devices[0]["cdi_device_ids"] == ["k8s.compute-domain.nvidia.com/claim=c1-channel-0"]
    assert host_imex.asked == 2


async def test_without_the_host_imex_config_nothing_is_asked(node: Node) -> None:
    """The default (seed 003): the operator owns the host's IMEX; the plugin does not ask it."""
    node.settings = dataclasses.replace(node.settings, host_managed=True)
    book = await ClaimBook.load(node.store, node.settings.node)
    state = DeviceState(node.settings, book, node.cluster, node.fabric)
    devices = await state.prepare(parse_claim(channel_claim("c1", DOM1)), 0)
    assert devices[0]["cdi_device_ids"] == ["k8s.compute-domain.nvidia.com/claim=c1-channel-0"]
