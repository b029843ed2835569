"""The reading commands' manners (cdctl.cli.output): -o table|wide|json|yaml with one shape per command,
plain aligned columns, a readable summary, the header once, "No ... found." on stderr, --type globs, replay
tables in log order, a locked file exiting 75 without waiting out SQLite's default timeout."""

from __future__ import annotations

import asyncio
import io
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from cdctl.cli.demo import write_scenario
from cdctl.cli.errors import run
from cdctl.cli.main import cli
from cdctl.cli.output import Column, Printer, summarize
from cdctl.store import schema

BOX = set("│┃┏┡━─┌└╇┳")
READING = {  # every reading command, with the arguments it needs
    "events": [],
    "sql": ["SELECT name, node, state FROM claim_lifecycle"],
    "replay": [],
    "verify": [],
    "history": ["computedomain/team-a/nvl72-job"],
    "streams": [],
}


@pytest.fixture(scope="module")
def log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("log") / "events.db"
    run(write_scenario(path, nodes=6))  # 6 nodes: more than 9 transitions, so text order differs
    return path


def invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    assert "Traceback" not in result.output, result.output
    return result.exit_code, result.stdout, result.stderr


# ---- the printer -------------------------------------------------------------------------------------


def _printer(output: str, follow: bool = False) -> tuple[Printer, io.StringIO]:
    out = io.StringIO()
    columns = [Column("NAME", lambda i: i["name"]), Column("NOTE", lambda i: i["note"]),
               Column("DATA", lambda i: i["data"], wide=True)]  # fmt: skip
    return Printer(output, columns, "things", follow=follow, out=out), out


def test_a_table_is_plain_aligned_columns_with_one_header_over_batches() -> None:
    printer, out = _printer("table", follow=True)
    long_note = "x" * 300
    printer.add([{"name": "a", "note": "short", "data": {}}, {"name": "bbbbbb", "note": "n", "data": {}}])
    printer.add([{"name": "c", "note": long_note, "data": {}}])
    printer.close()
    lines = out.getvalue().splitlines()
    assert lines[:3] == ["NAME     NOTE", "a        short", "bbbbbb   n"]
    assert [line.split()[0] for line in lines] == ["NAME", "a", "bbbbbb", "c"]
    assert lines[0].index("NOTE") == lines[1].index("short") == lines[3].index("x")
    assert not BOX & set(out.getvalue()) and long_note in lines[3]  # no boxes, no wrapping, no cut
    assert "DATA" not in lines[0]


def test_wide_adds_its_columns_and_json_streams_one_array() -> None:
    printer, out = _printer("wide")
    printer.add([{"name": "a", "note": "n", "data": {"k": 1}}])
    printer.close()
    assert out.getvalue().splitlines()[0].split() == ["NAME", "NOTE", "DATA"]
    assert '{"k":1}' in out.getvalue()
    printer, out = _printer("json")
    printer.add([{"name": "a"}])
    printer.add([{"name": "b"}, {"name": "c"}])
    printer.close()
    assert json.loads(out.getvalue()) == [{"name": "a"}, {"name": "b"}, {"name": "c"}]
    printer, out = _printer("json", follow=True)
    printer.add([{"name": "a"}])
    printer.add([{"name": "b"}])
    assert [json.loads(line) for line in out.getvalue().splitlines()] == [{"name": "a"}, {"name": "b"}]
    printer, out = _printer("yaml")
    printer.add([{"name": "a"}])
    printer.add([{"name": "b"}])
    printer.close()
    assert yaml.safe_load(out.getvalue()) == [{"name": "a"}, {"name": "b"}]


@pytest.mark.parametrize(("output", "stdout"), [("table", ""), ("wide", ""), ("json", "[]"), ("yaml", "[]")])
def test_nothing_found_is_said_on_stderr_for_people_and_is_an_empty_list_for_programs(
    output: str, stdout: str, capsys: pytest.CaptureFixture[str]
) -> None:
    printer = Printer(output, [Column("NAME", lambda i: i["name"])], "things")
    printer.close()
    captured = capsys.readouterr()
    assert captured.out.strip() == stdout
    assert captured.err == ("No things found.\n" if output in ("table", "wide") else "")


@pytest.mark.parametrize(
    ("data", "summary"),
    [
        ({"domain_uid": "u", "action": "create", "kind": "DaemonSet", "namespace": "ns", "name": "d"},
         "create DaemonSet ns/d"),
        ({"claim_uid": "u", "namespace": "ns", "name": "w-0", "node": "n1", "kind": "channel",
          "domain_uid": "d", "allocation": "1", "devices": ["channel-0"]},
         "channel ns/w-0 on n1 allocation=1 devices=channel-0"),
        ({"claim_uid": "u", "reason": "IMEX daemon on n1 not ready yet", "retriable": True},
         "retriable=true: IMEX daemon on n1 not ready yet"),
        ({"domain_uid": "u", "status": "Ready", "nodes": 18, "ready_nodes": 18},
         "status=Ready nodes=18 ready_nodes=18"),
        ({"claim_uid": "u", "device_ids": ["k8s.compute-domain.nvidia.com/claim=0123456789-daemon-0"]},
         "device_ids=[1]"),
        ({"uid": "u", "change": "ADDED", "name": "nvl", "namespace": "team-a", "status": {"nodes": []}},
         "ADDED team-a/nvl"),
    ],
)  # fmt: skip
def test_the_summary_says_what_happened_in_a_few_words(data: dict[str, Any], summary: str) -> None:
    assert summarize(data) == summary


def test_a_long_summary_is_cut_on_one_line() -> None:
    text = summarize({"reason": "a\nb " + "y" * 500})
    assert len(text) == 120 and text.endswith("…") and "\n" not in text and text.startswith("a\\nb")


# ---- the commands ------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", sorted(READING))
def test_every_reading_command_prints_json_and_yaml_of_the_same_shape(log: Path, command: str) -> None:
    base = [command, "--db", str(log), *READING[command]]
    code, as_json, _ = invoke(*base, "-o", "json")
    assert code == 0
    document = json.loads(as_json)
    code, as_yaml, _ = invoke(*base, "-o", "yaml")
    assert code == 0 and yaml.safe_load(as_yaml) == document
    code, alias, _ = invoke(*base, "--json")
    assert code == 0 and json.loads(alias) == document
    if command in ("events", "history", "streams", "sql"):
        assert isinstance(document, list) and document and all(isinstance(i, dict) for i in document)
    else:
        assert isinstance(document, dict)
    code, table, _ = invoke(*base)
    assert code == 0 and table and not BOX & set(table)


def test_events_table_has_a_summary_and_wide_adds_the_data(log: Path) -> None:
    code, out, _ = invoke("events", "--db", str(log), "--stream", "domain/*")
    header = out.splitlines()[0]
    assert code == 0 and header.split() == ["POSITION", "TIME", "STREAM", "VERSION", "TYPE", "SUMMARY"]
    assert "create ResourceClaimTemplate team-a/nvl72-job-channel" in out and '{"' not in out
    code, out, _ = invoke("events", "--db", str(log), "--stream", "domain/*", "-o", "wide")
    assert code == 0 and out.splitlines()[0].split()[-2:] == ["ACTOR", "DATA"]
    assert '"kind":"ResourceClaimTemplate"' in out and "controller/cdctl-controller-0" in out


def test_type_takes_a_glob_like_stream(log: Path) -> None:
    code, out, _ = invoke("events", "--db", str(log), "--type", "Claim*", "-o", "json")
    types = {e["type"] for e in json.loads(out)}
    assert code == 0 and types == {
        "ClaimPrepareStarted", "ClaimPrepareCompleted", "ClaimPrepareFailed", "ClaimUnprepared",
    }  # fmt: skip
    code, out, _ = invoke("events", "--db", str(log), "--type", "*Failed", "-o", "json")
    assert [e["type"] for e in json.loads(out)] == ["ClaimPrepareFailed"]


def test_an_empty_result_says_so_on_stderr_and_exits_0(log: Path) -> None:
    for args, noun in (
        (["events", "--type", "Nothing*"], "events"),
        (["streams", "--stream", "nothing/*"], "streams"),
        (["sql", "SELECT * FROM claim_lifecycle WHERE 0"], "rows"),
    ):
        code, out, err = invoke(args[0], "--db", str(log), *args[1:])
        assert (code, out, err) == (0, "", f"No {noun} found.\n")


def test_replay_tables_come_in_log_order(log: Path) -> None:
    code, out, _ = invoke("replay", "--db", str(log), "-o", "json")
    tables = json.loads(out)["tables"]
    for name in ("checkpoint_transitions", "domain_history", "claim_lifecycle"):
        positions = [row["position"] for row in tables[name]]
        assert len(positions) > 10 and positions == sorted(positions), name
    code, out, _ = invoke("replay", "--db", str(log))
    assert code == 0
    block = out.split("checkpoint_transitions:\n")[1].split("\n\n")[0].splitlines()
    shown = [int(line.split()[0]) for line in block[1:]]
    assert block[0].startswith("POSITION") and shown == sorted(shown) and len(shown) > 10
    assert "create DaemonSet team-a/" in out.split("domain_history:")[1]  # DETAIL summarized


def test_verify_as_json_says_what_it_checked(log: Path) -> None:
    code, out, _ = invoke("verify", "--db", str(log), "-o", "json")
    report = json.loads(out)
    assert code == 0 and report["ok"] is True and report["problems"] == []
    [source] = report["sources"]
    assert source["events"] == report["events"] > 0 and source["keyed"] is False


def test_follow_prints_the_header_once(log: Path, tmp_path: Path) -> None:
    printer, out = _printer("table", follow=True)
    for name in ("a", "b", "c"):
        printer.add([{"name": name, "note": "", "data": {}}])
    assert out.getvalue().count("NAME") == 1 and len(out.getvalue().splitlines()) == 4


def test_a_locked_log_exits_75_without_waiting_out_sqlites_default_timeout(
    log: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    locked = tmp_path / "locked.db"
    locked.write_bytes(log.read_bytes())
    waits: list[float] = []
    connect = sqlite3.connect

    def recording(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        waits.append(kwargs.get("timeout", 5.0))  # 5 s: sqlite3's default, what the probe used to wait
        return connect(*args, **kwargs)

    holder = sqlite3.connect(locked)
    holder.execute("PRAGMA locking_mode = EXCLUSIVE")
    holder.execute("BEGIN EXCLUSIVE")
    monkeypatch.setattr(sqlite3, "connect", recording)
    try:
        for command in READING:
            code, _, err = invoke(command, "--db", str(locked), *READING[command])
            assert code == 75 and "locked" in err and err.count("\n") == 1, (command, err)
    finally:
        holder.rollback()
        holder.close()
    assert waits and max(waits) <= schema.READ_LOCK_WAIT_S <= 1.0


def test_version_and_completion(tmp_path: Path) -> None:
    code, out, _ = invoke("version")
    assert code == 0 and out.startswith("cdctl 0.") and "event log schema" in out
    code, out, _ = invoke("version", "-o", "json")
    info = json.loads(out)
    assert set(info) == {"cdctl", "event_log_schema", "collected_file_schema", "python", "sqlite"}
    assert info["event_log_schema"] == schema.load_migrations()[-1].number
    for shell in ("bash", "zsh", "fish"):
        code, out, _ = invoke("completion", shell)
        assert code == 0 and "_CDCTL_COMPLETE" in out, shell
    code, _, err = invoke("completion", "tcsh")
    assert code == 2 and "tcsh" in err


@pytest.mark.parametrize(
    ("words", "cword", "expected"),
    [("cdctl ev", "1", {"events"}), ("cdctl events -o ", "3", {"table", "wide", "json", "yaml"}),
     ("cdctl ver", "1", {"version", "verify"})],
)  # fmt: skip
def test_the_completion_the_scripts_ask_for_answers(words: str, cword: str, expected: set[str]) -> None:
    result = CliRunner().invoke(
        cli, [], prog_name="cdctl",
        env={"_CDCTL_COMPLETE": "bash_complete", "COMP_WORDS": words, "COMP_CWORD": cword},
    )  # fmt: skip
    offered = {line.split(",", 1)[1] for line in result.stdout.splitlines()}
    assert result.exit_code == 0 and offered == expected


async def test_follow_as_a_table_prints_its_header_once_as_events_arrive(tmp_path: Path) -> None:
    import sys

    from cdctl.domain.events import NewEvent
    from cdctl.store import SqliteEventStore

    path = tmp_path / "live.db"
    async with await SqliteEventStore.open(path) as store:
        await store.append("node/n1", [NewEvent("NodeObserved", {"node": "n1", "ready": True})])
        follower = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "cdctl", "events", "--db", str(path), "--follow",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        try:
            assert follower.stdout is not None
            async with asyncio.timeout(30):
                header = await follower.stdout.readline()
                first = await follower.stdout.readline()
                for n in (2, 3):
                    await store.append("node/n1", [NewEvent("NodeObserved", {"node": f"n{n}"})])
                    await asyncio.sleep(0.6)  # past one poll: each arrives in its own batch
                later = [await follower.stdout.readline() for _ in range(2)]
        finally:
            follower.terminate()
            await asyncio.wait_for(follower.wait(), 60)
    assert header.decode().split() == ["POSITION", "TIME", "STREAM", "VERSION", "TYPE", "SUMMARY"]
    assert first.decode().split()[0] == "1" and first.decode().rstrip().endswith("on n1 ready=true")
    assert [line.decode().split()[0] for line in later] == ["2", "3"]
    assert all(b"POSITION" not in line for line in later)
