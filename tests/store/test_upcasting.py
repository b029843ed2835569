"""Every stored schema version of every event type upcasts to the current one (fixture file per version)."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

import cdctl.domain.channels  # registers the channel allocator's events
import cdctl.domain.claims  # registers the claim events
import cdctl.domain.leadership  # noqa: F401  (registers the leadership events)
from cdctl.domain.errors import InvalidInput
from cdctl.domain.events import NewEvent, RecordedEvent, decode, registered_types, upcast
from cdctl.store import SqliteEventStore

FIXTURES = Path(__file__).parent.parent / "fixtures" / "events"


def fixture_files() -> list[Path]:
    return sorted(FIXTURES.glob("*.v*.json"))


def recorded(type_: str, version: int, data: dict[str, object]) -> RecordedEvent:
    return RecordedEvent(1, "s", 1, type_, version, data, {}, datetime.now(UTC), "0" * 64)


@pytest.mark.parametrize("path", fixture_files(), ids=lambda p: p.name)
def test_fixture_upcasts_to_current_schema(path: Path) -> None:
    fixture = json.loads(path.read_text())
    event = upcast(recorded(fixture["type"], fixture["schema_version"], fixture["data"]))
    assert event.schema_version == registered_types()[fixture["type"]].SCHEMA_VERSION
    assert event.data == fixture["expected"]
    typed = decode(event)
    assert dataclasses.asdict(typed) == fixture["expected"]  # type: ignore[call-overload]


def test_every_historical_version_has_a_fixture() -> None:
    have = {(p.name.split(".")[0], int(p.name.split(".v")[1].split(".")[0])) for p in fixture_files()}
    for name, cls in registered_types().items():
        if cls.SCHEMA_VERSION > 1:
            for version in range(1, cls.SCHEMA_VERSION + 1):
                assert (name, version) in have, f"missing fixture {name}.v{version}.json"


def test_unknown_version_without_upcaster_is_a_clear_error() -> None:
    with pytest.raises(InvalidInput, match="no upcaster"):
        upcast(recorded("ClaimPrepareStarted", 0, {}))


async def test_old_versions_are_upcast_when_read_from_the_log(tmp_path: Path) -> None:
    fixture = json.loads((FIXTURES / "ClaimPrepareStarted.v1.json").read_text())
    async with await SqliteEventStore.open(tmp_path / "e.db") as store:
        await store.append("claim/x", [NewEvent(fixture["type"], fixture["data"], schema_version=1)])
        [event] = await store.read_stream("claim/x")
    assert event.schema_version == 2
    assert event.data == fixture["expected"]
