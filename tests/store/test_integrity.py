"""Honest and private logs: the check at open, the keyed chain, published heads and file modes.

Each attack is done to a closed file as someone who can edit it would (tests/store/tampering.py), then the
log is opened as a component opens it, or verified as `cdctl verify` does.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from cdctl.domain.errors import InvalidInput, LogTampered, StoreError
from cdctl.domain.events import NewEvent
from cdctl.projections.lifecycle import lifecycle_projections
from cdctl.projections.replay import VerifyReport, verify_chain
from cdctl.projections.runner import ProjectionRunner
from cdctl.store import SqliteEventStore
from cdctl.store.integrity import read_key_file
from cdctl.store.metrics import EventLogCollector
from tests.store.tampering import (
    KEY,
    OTHER_KEY,
    delete_tail,
    edit_data,
    mark_unkeyed,
    recompute_chain,
)


def ev(**data: object) -> NewEvent:
    return NewEvent("Thing", dict(data))


async def write_log(path: Path, count: int, key: bytes | None = None) -> tuple[int, str]:
    async with await SqliteEventStore.open(path, key=key) as store:
        for n in range(count):
            await store.append("s/1", [ev(n=n)])
        return store.chain_head()


async def verify(
    path: Path, key: bytes | None = None, heads: list[tuple[int, str]] | None = None
) -> VerifyReport:
    report = VerifyReport()
    async with await SqliteEventStore.open(path, read_only=True) as store:
        await verify_chain(store, report, key, heads or [])
    return report


async def test_an_edited_row_is_refused_at_open_naming_its_position_and_the_way_out(tmp_path: Path) -> None:
    path = tmp_path / "e.db"
    await write_log(path, 5)
    edit_data(path, 3, '{"n":99}')
    with pytest.raises(LogTampered) as caught:
        await SqliteEventStore.open(path)
    assert caught.value.position == 3 and caught.value.exit_code == 3
    assert f"mv {path} {path}.tampered-" in caught.value.message


async def test_an_edit_with_the_unkeyed_chain_recomputed_fails_a_keyed_log(tmp_path: Path) -> None:
    path = tmp_path / "e.db"
    await write_log(path, 5, key=KEY)
    edit_data(path, 3, '{"n":99}')
    recompute_chain(path)  # without the key: plain SHA-256 links throughout
    with pytest.raises(LogTampered) as caught:
        await SqliteEventStore.open(path, key=KEY)
    assert caught.value.position == 1
    report = await verify(path, KEY)
    assert report.first_bad_position == 1 and "hash mismatch" in report.problems[0]
    recompute_chain(path, OTHER_KEY)  # with a key of their own
    assert (await verify(path, KEY)).first_bad_position == 1
    mark_unkeyed(path)  # and saying the log was never keyed
    recompute_chain(path)
    with pytest.raises(StoreError, match=r"not keyed.*rewritten without the key"):
        await verify(path, KEY)


async def test_the_same_edit_on_an_unkeyed_log_is_caught_only_by_a_published_head(tmp_path: Path) -> None:
    path = tmp_path / "e.db"
    head = await write_log(path, 5)
    edit_data(path, 3, '{"n":99}')
    recompute_chain(path)
    assert (await verify(path)).ok  # what an unkeyed chain cannot tell
    report = await verify(path, heads=[head])
    assert report.first_bad_position == 5 and "differs from the published head" in report.problems[0]


async def test_deleting_the_last_events_is_caught_by_the_published_head(tmp_path: Path) -> None:
    path = tmp_path / "e.db"
    head = await write_log(path, 6, key=KEY)
    delete_tail(path, 4)
    assert (await verify(path, KEY)).ok  # the chain that is left is intact
    report = await verify(path, KEY, [head])
    assert not report.ok and report.first_bad_position == 5
    assert "ends at position 4, before the published head 6" in report.problems[0]
    async with await SqliteEventStore.open(path, key=KEY) as store:
        assert store.chain_head()[0] == 4  # a process cannot tell either: the head outside the file does


async def test_a_snapshot_past_the_end_or_at_another_hash_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "e.db"
    async with await SqliteEventStore.open(path) as store:
        for n in range(10):
            await store.append(f"claim/u{n}", [NewEvent("ClaimPrepareStarted", {"claimUID": f"u{n}"})])
        runner = ProjectionRunner(store, lifecycle_projections(), snapshot_every=5)
        await runner.start()
        await runner.catch_up()
        [(position, recorded)] = await store.query("SELECT DISTINCT position, hash FROM snapshots")
        assert position == 10 and recorded == store.chain_head()[1]
    delete_tail(path, 7, drop_snapshots=False)
    with pytest.raises(LogTampered, match="snapshot was taken at position 10 but the log ends at 7"):
        await SqliteEventStore.open(path)


async def test_the_open_check_starts_at_the_latest_snapshot(tmp_path: Path) -> None:
    path = tmp_path / "e.db"
    async with await SqliteEventStore.open(path) as store:
        for n in range(12):
            await store.append(f"claim/u{n}", [NewEvent("ClaimPrepareStarted", {"claimUID": f"u{n}"})])
        runner = ProjectionRunner(store, lifecycle_projections(), snapshot_every=10)
        await runner.start()
        await runner.catch_up()  # one batch: a snapshot at 12
        for n in range(3):
            await store.append("s/1", [ev(n=n)])
    async with await SqliteEventStore.open(path) as store:
        assert store.checked_at_open == 3  # positions 13 to 15
    edit_data(path, 4, '{"claimUID":"x"}')  # before the snapshot: left to `cdctl verify`
    async with await SqliteEventStore.open(path):
        pass
    assert (await verify(path)).first_bad_position == 4


async def test_a_row_of_invalid_json_is_refused_at_open_and_on_read(tmp_path: Path) -> None:
    path = tmp_path / "e.db"
    await write_log(path, 3)
    edit_data(path, 2, "{not json")
    recompute_chain(path)
    with pytest.raises(LogTampered, match="position 2: its data is not valid JSON"):
        await SqliteEventStore.open(path)
    async with await SqliteEventStore.open(path, read_only=True) as store:
        with pytest.raises(LogTampered, match="position 2: its data or metadata is not valid JSON"):
            await store.read_all()
    assert (await verify(path)).first_bad_position == 2


async def test_a_keyed_log_needs_its_own_key(tmp_path: Path) -> None:
    path = tmp_path / "e.db"
    await write_log(path, 2, key=KEY)
    with pytest.raises(StoreError, match=r"this event log is keyed .* pass its key with --log-key-file"):
        await SqliteEventStore.open(path)
    with pytest.raises(StoreError, match="not the key this event log is keyed with"):
        await SqliteEventStore.open(path, key=OTHER_KEY)
    with pytest.raises(StoreError, match="pass its key with --key-file"):
        await verify(path)
    assert (await verify(path, KEY)).ok
    async with await SqliteEventStore.open(path, key=KEY) as store:
        await store.append("s/1", [ev(n=9)])


async def test_an_unkeyed_log_given_a_key_is_keyed_from_its_head_on(tmp_path: Path) -> None:
    path = tmp_path / "e.db"
    await write_log(path, 3)
    await write_log(path, 2, key=KEY)
    async with await SqliteEventStore.open(path, read_only=True) as store:
        [(scheme, keyed_from)] = await store.query("SELECT scheme, keyed_from FROM chain_scheme")
    assert (scheme, keyed_from) == ("hmac-sha256", 3)
    assert (await verify(path, KEY)).ok and (await verify(path, KEY)).events == 5
    edit_data(path, 2, '{"n":99}')  # an unkeyed event: its hash is covered by the first keyed link
    recompute_chain(path)  # all SHA-256 links: right for 1..3, and the keyed link at 4 no longer matches
    assert (await verify(path, KEY)).first_bad_position == 4


@pytest.fixture(params=[0o022, 0o000])
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    old = os.umask(request.param)
    yield request.param
    os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


async def test_the_log_and_its_side_files_are_owner_only_whatever_the_umask(
    tmp_path: Path, umask: int
) -> None:
    path = tmp_path / "e.db"
    async with await SqliteEventStore.open(path) as store:
        await store.append("s/1", [ev()])
        await store.read_all()
        sides = [path.with_name(path.name + s) for s in ("-wal", "-shm")]
        assert all(side.exists() for side in sides)
        assert {p.name: mode(p) for p in (path, *sides)} == {p.name: 0o600 for p in (path, *sides)}


async def test_an_existing_world_readable_log_is_tightened_at_open(tmp_path: Path, umask: int) -> None:
    path = tmp_path / "e.db"
    await write_log(path, 1)
    path.chmod(0o644)
    path.with_name("e.db-wal").write_bytes(b"")
    path.with_name("e.db-wal").chmod(0o644)
    async with await SqliteEventStore.open(path):
        assert mode(path) == 0o600 and mode(path.with_name("e.db-wal")) == 0o600
    async with await SqliteEventStore.open(path, read_only=True):
        pass  # a reader (the CLI) changes nothing


def test_a_key_file_must_exist_and_hold_enough_bytes(tmp_path: Path) -> None:
    (tmp_path / "short").write_bytes(b"abc")
    with pytest.raises(InvalidInput, match=r"--log-key-file: key file .*short holds 3 bytes"):
        read_key_file(tmp_path / "short")
    with pytest.raises(InvalidInput, match="cannot read key file"):
        read_key_file(tmp_path / "absent")
    (tmp_path / "key").write_bytes(KEY)
    assert read_key_file(tmp_path / "key") == KEY


async def test_the_published_head_follows_commits(tmp_path: Path) -> None:
    path = tmp_path / "e.db"
    async with await SqliteEventStore.open(path, key=KEY) as store:
        assert store.chain_head() == (0, "0" * 64)
        [event] = await store.append("s/1", [ev()])
        assert store.chain_head() == (1, event.hash)
    async with await SqliteEventStore.open(path, read_only=True) as store:
        assert store.chain_head() == (1, event.hash)


async def test_open_check_cost_over_a_long_tail(tmp_path: Path) -> None:
    """A log with 20,000 events after its last snapshot opens in well under a second (figures: bench)."""
    path = tmp_path / "e.db"
    async with await SqliteEventStore.open(path, key=KEY) as store:
        for start in range(0, 20_000, 1_000):
            await store.append("s/1", [ev(n=n, pad="x" * 200) for n in range(start, start + 1_000)])
    started = time.perf_counter()
    async with await SqliteEventStore.open(path, key=KEY) as store:
        assert store.checked_at_open == 20_000
    assert time.perf_counter() - started < 5.0


async def test_the_head_is_in_the_metrics_exposition(tmp_path: Path) -> None:
    registry = CollectorRegistry()
    async with await SqliteEventStore.open(tmp_path / "e.db", key=KEY) as store:
        registry.register(EventLogCollector(store))
        [*_, last] = await store.append("s/1", [ev(n=1), ev(n=2)])
        text = generate_latest(registry).decode()
    assert "cdctl_event_log_head_position 2.0" in text
    assert f'cdctl_event_log_head_info{{hash="{last.hash}",position="2"}} 1.0' in text
