"""The handover gate: open only while a live holder keeps it, holds that expire, and the drain's promise."""

from __future__ import annotations

import time
from pathlib import Path

from cdctl.api.imexgate import (
    CLOSED_NO_FILE,
    CLOSED_NO_HOLDER,
    GATE_FILE,
    HOLDS_DIR,
    GateKeeper,
    gate_state,
    hold,
    live_holds,
    release,
)
from tests.plugin.fakes import killed_gate_holder


def test_the_gate_is_open_only_between_open_and_close(tmp_path: Path) -> None:
    keeper = GateKeeper(tmp_path)
    assert gate_state(tmp_path) == CLOSED_NO_FILE
    keeper.open()
    keeper.open()  # a no-op when open
    assert keeper.is_open and gate_state(tmp_path) is None
    keeper.close()
    assert not keeper.is_open and gate_state(tmp_path) == CLOSED_NO_FILE
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_a_gate_whose_holder_died_reads_closed_and_is_cleared_by_the_next_daemon(tmp_path: Path) -> None:
    def holder_alive() -> None:
        assert gate_state(tmp_path) is None

    killed_gate_holder(tmp_path, holder_alive)
    assert (tmp_path / GATE_FILE).exists()
    assert gate_state(tmp_path) == CLOSED_NO_HOLDER
    GateKeeper(tmp_path).close()  # what a new daemon does first
    assert gate_state(tmp_path) == CLOSED_NO_FILE


def test_a_reader_never_takes_the_gate_from_its_holder(tmp_path: Path) -> None:
    keeper = GateKeeper(tmp_path)
    keeper.open()
    for _ in range(100):
        assert gate_state(tmp_path) is None
    keeper.close()


def test_holds_expire_are_released_and_prune_the_expired(tmp_path: Path) -> None:
    now = 1_000.0
    assert live_holds(tmp_path, now) == {}
    assert hold(tmp_path, "claim-a", 10.0, now=now) == 1_010.0
    hold(tmp_path, "claim-b", 1.0, now=now)
    assert live_holds(tmp_path, now + 0.5) == {"claim-a": 1_010.0, "claim-b": 1_001.0}
    assert live_holds(tmp_path, now + 5) == {"claim-a": 1_010.0}
    hold(tmp_path, "claim-c", 10.0, now=now + 5)  # prunes claim-b, expired by then
    assert sorted(p.name for p in (tmp_path / HOLDS_DIR).iterdir()) == ["claim-a", "claim-c"]
    release(tmp_path, "claim-a")
    release(tmp_path, "claim-a")  # twice is fine
    assert live_holds(tmp_path, now + 5) == {"claim-c": 1_015.0}


def test_an_unreadable_hold_counts_from_when_it_was_written(tmp_path: Path) -> None:
    (tmp_path / HOLDS_DIR).mkdir()
    (tmp_path / HOLDS_DIR / "torn").write_text("")
    assert "torn" in live_holds(tmp_path, time.time())
    assert live_holds(tmp_path, time.time() + 3_600) == {}
