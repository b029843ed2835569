"""Shared fixtures: every event store implementation, for the contract suite; the logging configuration a
verbosity test changes, put back. And the per-test timeout's report: a test that runs past its limit
(pytest-timeout, pyproject.toml) shows where each asyncio task of its event loop is waiting, since a hung
test is a coroutine awaiting something, not a thread stuck in a call."""

from __future__ import annotations

import asyncio
import io
import shutil
import signal
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_timeout
import structlog

from cdctl.api import verbosity
from cdctl.store import EventStore, InMemoryEventStore, SqliteEventStore


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A fresh directory directly under /tmp: a unix socket path is at most 107 bytes, and pytest's
    tmp_path (longer still under pytest-xdist) can leave too little room for a socket inside it."""
    directory = Path(tempfile.mkdtemp(prefix="cds", dir="/tmp"))
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def restore_logging() -> Iterator[None]:
    """For tests that call configure_logging: the process's default logging again afterwards."""
    yield
    structlog.reset_defaults()
    verbosity.set_verbosity(verbosity.DEFAULT_VERBOSITY)
    verbosity.install_default_filter()


@pytest.fixture(params=["sqlite", "memory"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[EventStore]:
    impl: EventStore
    if request.param == "sqlite":
        impl = await SqliteEventStore.open(tmp_path / "events.db")
    else:
        impl = InMemoryEventStore()
    async with impl:
        yield impl


@pytest.fixture
async def sqlite_store(tmp_path: Path) -> AsyncIterator[SqliteEventStore]:
    impl = await SqliteEventStore.open(tmp_path / "events.db")
    async with impl:
        yield impl


def _task_stacks() -> str:
    """Where each task of the running event loop waits (empty when no loop runs)."""
    loop = asyncio._get_running_loop()
    if loop is None:
        return ""
    out = io.StringIO()
    for task in sorted(asyncio.all_tasks(loop), key=lambda t: t.get_name()):
        task.print_stack(limit=12, file=out)
    return out.getvalue()


@pytest.hookimpl(tryfirst=True)
def pytest_timeout_set_timer(item: pytest.Item, settings: Any) -> bool | None:
    """pytest-timeout's signal method, with the asyncio tasks' stacks printed before the test fails."""
    if settings.method != "signal":
        return None

    def handler(signum: int, frame: Any) -> None:
        __tracebackhide__ = True
        stacks = _task_stacks()
        if stacks:
            terminal = item.config.get_terminal_writer()
            terminal.sep("+", title=f"Timeout: the asyncio tasks of {item.nodeid}")
            terminal.write(stacks)
        pytest_timeout.timeout_sigalrm(item, settings)

    def cancel() -> None:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, signal.SIG_DFL)

    item.cancel_timeout = cancel  # type: ignore[attr-defined]  # read by pytest-timeout's cancel hook
    signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, settings.timeout)
    return True
