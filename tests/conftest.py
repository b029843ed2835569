"""Shared fixtures: every event store implementation, for the contract suite; the logging configuration a
verbosity test changes, put back."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import structlog

from cdctl.api import verbosity
from cdctl.store import EventStore, InMemoryEventStore, SqliteEventStore


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
