"""Fixtures for the IMEX daemon tests: the fake nvidia-imex on a PATH, per-daemon directories, a recorder."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from cdctl.domain.events import DomainEvent
from cdctl.sim.node.fakeimex import HOSTS_ENV, REGISTRY_ENV, install_executables

TEMPLATE = (
    resources.files("cdctl.plugin") / "templates" / "compute-domain-daemon-config.tmpl.cfg"
).read_text()


@dataclass
class FakeImex:
    """The fake IMEX commands installed under `root`; `env()` finds them and one shared peer registry."""

    root: Path

    def env(self, hosts_file: Path | None = None) -> dict[str, str]:
        env = dict(os.environ)
        env["PATH"] = f"{self.root / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        env[REGISTRY_ENV] = str(self.root / "registry")
        if hosts_file is not None:
            env[HOSTS_ENV] = str(hosts_file)
        return env

    def imexd(self, name: str) -> Path:
        """A fresh `/imexd` stand-in holding the plugin's config template."""
        directory = self.root / name
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "imexd.cfg.tmpl").write_text(TEMPLATE)
        return directory


@pytest.fixture
def fake_imex() -> Iterator[FakeImex]:
    root = Path(tempfile.mkdtemp(prefix="cdimex-", dir="/tmp"))
    install_executables(root / "bin")
    yield FakeImex(root)
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def use_fake_imex(fake_imex: FakeImex, monkeypatch: pytest.MonkeyPatch) -> FakeImex:
    """Put the fake commands on this process's PATH (for supervisors and checks run in the test process)."""
    for key, value in fake_imex.env().items():
        if os.environ.get(key) != value:
            monkeypatch.setenv(key, value)
    return fake_imex


@dataclass
class Recorder:
    """Collects recorded events; `wait_for` waits until a predicate over them holds."""

    events: list[DomainEvent] = field(default_factory=list)
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    async def __call__(self, event: DomainEvent) -> None:
        self.events.append(event)
        self.changed.set()

    def of(self, kind: type[DomainEvent]) -> list[DomainEvent]:
        return [e for e in self.events if isinstance(e, kind)]

    async def wait_for(self, predicate: Callable[[list[DomainEvent]], bool], timeout_s: float = 30) -> None:
        async with asyncio.timeout(timeout_s):
            while not predicate(self.events):
                self.changed.clear()
                await self.changed.wait()


async def eventually(condition: Callable[[], bool], timeout_s: float = 30, step_s: float = 0.05) -> None:
    """Wait (bounded) until `condition()` holds; the bound is a hang guard, not a timing assertion."""
    async with asyncio.timeout(timeout_s):
        while not condition():  # noqa: ASYNC110 - the condition lives in files and other processes
            await asyncio.sleep(step_s)


@pytest.fixture
async def rig(fake_imex: FakeImex) -> AsyncIterator[Any]:
    """The daemon rig (tests.daemon.rig) on a fresh simulated API server; its daemons stopped at the end."""
    from cdctl.sim.apiserver.server import ApiServer
    from tests.daemon.rig import open_rig

    async with ApiServer() as server:
        rig = await open_rig(server, fake_imex)
        try:
            yield rig
        finally:
            await rig.close()
