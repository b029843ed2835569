"""`cdctl events | sql | replay | verify | history` over a real log, and their one-line errors."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from cdctl.cli.demo import demo, write_scenario
from cdctl.cli.errors import run
from cdctl.cli.main import cli


@pytest.fixture(scope="module")
def log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("log") / "events.db"
    summary = run(write_scenario(path, nodes=4))
    assert summary.events > 0 and summary.left_prepared == 0
    return path


def invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    assert "Traceback" not in result.output + result.stderr
    assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit), (
        result.exception
    )
    return result.exit_code, result.stdout, result.stderr


def test_events_filters_by_stream_and_type(log: Path) -> None:
    code, out, _ = invoke("events", "--db", str(log), "--stream", "domain/*", "--json")
    events = json.loads(out)
    assert code == 0 and events and all(e["stream"].startswith("domain/") for e in events)
    assert [e["position"] for e in events] == sorted(e["position"] for e in events)
    code, out, _ = invoke("events", "--db", str(log), "--type", "ClaimPrepareFailed", "--json")
    [failed] = json.loads(out)
    assert (
        failed["data"]["retriable"] is True and failed["metadata"]["actor"]["component"] == "kubelet-plugin"
    )


def test_events_since_the_future_is_empty_and_a_bad_time_is_one_line(log: Path) -> None:
    code, out, _ = invoke("events", "--db", str(log), "--since", "2999-01-01T00:00:00Z", "--json")
    assert code == 0 and json.loads(out) == []
    code, _, err = invoke("events", "--db", str(log), "--since", "last tuesday")
    assert code == 2 and err.count("\n") == 1 and "--since" in err and "not a time" in err


def test_sql_reads_the_lifecycle_views(log: Path) -> None:
    code, out, _ = invoke(
        "sql",
        "--db",
        str(log),
        "--json",
        "SELECT kind, count(*) AS n, max(state) AS s FROM claim_lifecycle GROUP BY kind",
    )
    assert code == 0
    assert json.loads(out) == [
        {"kind": "channel", "n": 4, "s": "Unprepared"},
        {"kind": "daemon", "n": 4, "s": "Unprepared"},
    ]
    code, out, _ = invoke(
        "sql",
        "--db",
        str(log),
        "SELECT count(*) AS released FROM channel_allocations WHERE released_at IS NOT NULL",
    )
    assert code == 0 and out.split() == ["released", "4"]


@pytest.mark.parametrize(
    "statement",
    [
        "DELETE FROM events",
        "INSERT INTO snapshots (name, position, state, created_at) VALUES ('x', 1, '', '')",
        "CREATE TABLE t (x)",
    ],
)
def test_sql_refuses_writes(log: Path, statement: str) -> None:
    before = sqlite3.connect(log).execute("SELECT count(*) FROM events").fetchone()[0]
    code, _, err = invoke("sql", "--db", str(log), statement)
    assert code == 3 and "read-only" in err and err.count("\n") == 1
    assert sqlite3.connect(log).execute("SELECT count(*) FROM events").fetchone()[0] == before


def test_sql_syntax_errors_name_the_statement(log: Path) -> None:
    code, _, err = invoke("sql", "--db", str(log), "SELEC nothing")
    assert code == 2 and "STATEMENT" in err


def test_replay_at_a_position_shows_the_state_then(log: Path) -> None:
    code, out, _ = invoke("replay", "--db", str(log), "--position", "12", "--json")
    state = json.loads(out)
    assert code == 0 and state["position"] == 12
    assert {row["state"] for row in state["tables"]["claim_lifecycle"]} <= {
        "PrepareStarted",
        "PrepareCompleted",
    }
    code, out, _ = invoke("replay", "--db", str(log), "--json")
    assert {row["state"] for row in json.loads(out)["tables"]["claim_lifecycle"]} == {"Unprepared"}
    code, _, err = invoke("replay", "--db", str(log), "--at", "1h", "--position", "3")
    assert code == 2 and "exclusive" in err


def test_verify_passes_then_names_the_first_bad_position(log: Path, tmp_path: Path) -> None:
    code, out, _ = invoke("verify", "--db", str(log))
    assert code == 0 and out.startswith("ok:")
    broken = tmp_path / "broken.db"
    broken.write_bytes(log.read_bytes())
    conn = sqlite3.connect(broken)
    conn.execute("DROP TRIGGER events_are_never_updated")
    conn.execute("UPDATE events SET type = 'Forged' WHERE position = 7")
    conn.commit()
    conn.close()
    code, _, err = invoke("verify", "--db", str(broken))
    assert code == 1 and "first bad position 7" in err


def test_history_shows_one_objects_timeline(log: Path) -> None:
    code, out, _ = invoke("events", "--db", str(log), "--type", "ClaimPrepareFailed", "--json")
    uid = json.loads(out)[0]["data"]["claim_uid"]
    code, out, _ = invoke("history", "--db", str(log), uid, "--json")
    types = [event["type"] for event in json.loads(out)]
    assert code == 0 and types[:3] == ["ClaimPrepareStarted", "ClaimPrepareFailed", "ClaimPrepareStarted"]
    assert types[-1] == "ClaimUnprepared"


def test_missing_and_foreign_files_are_one_line_errors(tmp_path: Path) -> None:
    foreign = tmp_path / "other.db"
    sqlite3.connect(foreign).execute("CREATE TABLE x (y)").connection.close()
    text = tmp_path / "notes.txt"
    text.write_text("hello")
    for path, message in [(tmp_path / "absent.db", "no such event log"), (foreign, "another application"),
                          (text, "not an SQLite database"), (tmp_path, "is a directory")]:  # fmt: skip
        for command in (["events"], ["sql", "SELECT 1"], ["replay"], ["verify"]):
            code, _, err = invoke(command[0], "--db", str(path), *command[1:])
            assert code != 0 and message in err and err.count("\n") == 1, (command, path, err)
    assert not (tmp_path / "absent.db").exists()


def test_a_locked_log_is_a_one_line_error(log: Path, tmp_path: Path) -> None:
    locked = tmp_path / "locked.db"
    locked.write_bytes(log.read_bytes())
    holder = sqlite3.connect(locked)
    holder.execute("PRAGMA locking_mode = EXCLUSIVE")
    holder.execute("BEGIN EXCLUSIVE")
    try:
        code, _, err = invoke("events", "--db", str(locked))
    finally:
        holder.rollback()
        holder.close()
    assert code == 75 and "locked" in err and err.count("\n") == 1


def test_the_console_script_never_prints_a_traceback(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "cdctl", "replay", "--db", str(tmp_path / "nope.db")],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 3
    assert result.stderr.strip() == f"cdctl: error: {tmp_path / 'nope.db'}: no such event log"


async def test_follow_prints_events_appended_by_another_process(tmp_path: Path) -> None:

    from cdctl.domain.events import NewEvent
    from cdctl.store import SqliteEventStore

    path = tmp_path / "live.db"
    async with await SqliteEventStore.open(path) as store:
        await store.append("node/n1", [NewEvent("NodeObserved", {"n": 1})])
        follower = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "cdctl", "events", "--db", str(path), "--follow", "--json",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        try:
            assert follower.stdout is not None
            async with asyncio.timeout(30):
                first = json.loads(await follower.stdout.readline())
                await store.append("node/n1", [NewEvent("NodeObserved", {"n": 2})])
                second = json.loads(await follower.stdout.readline())
        finally:
            follower.terminate()
            await asyncio.wait_for(follower.wait(), 60)
    assert (first["position"], first["data"]) == (1, {"n": 1})
    assert (second["position"], second["data"]) == (2, {"n": 2})


def test_an_older_log_is_readable_but_verify_says_why_it_cannot_compare(tmp_path: Path) -> None:
    from cdctl.store.schema import load_migrations, migration_script

    path = tmp_path / "old.db"
    conn = sqlite3.connect(path)
    for migration in load_migrations()[:4]:
        conn.executescript(migration_script(migration))
    conn.execute(
        "INSERT INTO events VALUES (1, 'claim/u1', 1, 'ClaimUnprepared', 1, ?, '{}', ?, ?)",
        ('{"claim_uid":"u1"}', "2026-01-01T00:00:00.000000+00:00", "f" * 64),
    )
    conn.commit()
    conn.close()
    code, out, _ = invoke("events", "--db", str(path), "--json")
    assert code == 0 and json.loads(out)[0]["type"] == "ClaimUnprepared"
    code, _, err = invoke("verify", "--db", str(path))
    assert code == 3 and "schema version 4, older than this cdctl's" in err and err.count("\n") == 1


def test_demo_counts_every_claim_and_keeps_an_existing_log(tmp_path: Path) -> None:
    runner = CliRunner()
    first = runner.invoke(demo, ["--nodes", "3", "--keep", str(tmp_path)])
    assert first.exit_code == 0, first.output
    assert "claims (daemon+channel):  6, prepared at peak 6" in first.output
    assert "not wired" not in first.output and "a 3-node" not in first.output
    log = tmp_path / "events.db"
    size = log.stat().st_size

    again = runner.invoke(demo, ["--nodes", "3", "--keep", str(tmp_path)])
    assert again.exit_code == 2
    assert "--keep" in again.output and "--overwrite" in again.output
    assert log.stat().st_size == size

    replaced = runner.invoke(demo, ["--nodes", "2", "--keep", str(tmp_path), "--overwrite"])
    assert replaced.exit_code == 0, replaced.output
    assert "claims (daemon+channel):  4" in replaced.output
