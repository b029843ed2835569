"""Shared fixtures: every event store implementation, for the contract suite."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from cdctl.store import EventStore, InMemoryEventStore, SqliteEventStore


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
