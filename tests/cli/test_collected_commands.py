"""The history commands on a collected file: events merged by time with their source, SQL over the views
with a `source` column, replay and verify per source, history by kubectl-style names (a recreated name lists
its uids), and `cdctl streams` on a collected file and on a log."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner

from cdctl.cli.main import cli
from cdctl.domain.imex import ImexDaemonStarted
from cdctl.projections.collected import ensure_read_models, rebuild
from cdctl.store.collected import CollectedFile
from cdctl.store.export import LogRef
from tests.collect.harness import store_locally, write_log
from tests.collect.test_collect import claim_events, domain_events

OLD, NEW = str(uuid.UUID(int=1)), str(uuid.UUID(int=2))  # the domain "nvl", deleted and created again


async def build(root: Path) -> Path:
    await write_log(root / "controller.db", domain_events(OLD, "nvl") + domain_events(NEW, "nvl"))
    await write_log(root / "n0.db", claim_events("n0", OLD, "job-0") + claim_events("n0", NEW, "job-0"))
    await write_log(root / "n1.db", claim_events("n1", NEW, "job-1"))
    await write_log(root / "d1.db", [("node/n1", ImexDaemonStarted("n1", NEW, "c", "p", "10.0.0.1", "m", 2))])
    path = root / "collected.db"
    with CollectedFile.open(path, create=True) as file:
        ensure_read_models(file)
        await store_locally(file, LogRef("controller", "controller", root / "controller.db"), pod="ctl-0")
        for node in ("n0", "n1"):
            await store_locally(file, LogRef("plugin", "kubelet-plugin", root / f"{node}.db"), node=node)
        await store_locally(file, LogRef(f"daemon/{NEW}", "daemon", root / "d1.db", NEW), node="n1")
        rebuild(file, file.sources())
    return path


@pytest.fixture(scope="module")
def collected(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return asyncio.run(build(tmp_path_factory.mktemp("collected")))


def invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    assert "Traceback" not in result.output + result.stderr, result.output + result.stderr
    return result.exit_code, result.stdout, result.stderr


def lines(out: str) -> list[dict[str, object]]:
    items: list[dict[str, object]] = json.loads(out)
    return items


def test_events_are_merged_by_time_with_their_source(
    collected: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("cdctl.cli.collected.PAGE", 4)  # several pages, each following the last
    code, out, _ = invoke("events", "--db", str(collected), "--json")
    events = lines(out)
    assert len({(e["source"], e["position"]) for e in events}) == len(events)
    assert code == 0 and len(events) == 2 + 8 + 4 + 1
    assert [e["recorded_at"] for e in events] == sorted(str(e["recorded_at"]) for e in events)
    assert {e["source"] for e in events} == {
        "controller/ctl-0", "kubelet-plugin/n0", "kubelet-plugin/n1", f"daemon/n1/{NEW}",
    }  # fmt: skip
    code, out, _ = invoke(
        "events", "--db", str(collected), "--source", "kubelet-plugin/*", "--node", "n1", "--json"
    )
    assert code == 0 and {e["source"] for e in lines(out)} == {"kubelet-plugin/n1"}
    code, _, err = invoke("events", "--db", str(collected), "--follow")
    assert code == 2 and "collected file" in err
    code, _, err = invoke("events", "--db", str(collected), "--source", "nothing/*")
    assert code == 2 and "matches no source" in err and "kubelet-plugin/n0" in err


def test_sql_spans_every_node_and_stays_read_only(collected: Path) -> None:
    query = "SELECT source, node, name, domain_uid FROM claim_lifecycle ORDER BY node, domain_uid"
    code, out, _ = invoke("sql", "--db", str(collected), "--json", query)
    assert code == 0 and json.loads(out) == [
        {"source": "kubelet-plugin/n0", "node": "n0", "name": "job-0", "domain_uid": OLD},
        {"source": "kubelet-plugin/n0", "node": "n0", "name": "job-0", "domain_uid": NEW},
        {"source": "kubelet-plugin/n1", "node": "n1", "name": "job-1", "domain_uid": NEW},
    ]
    code, out, _ = invoke(
        "sql", "--db", str(collected), "--json", "SELECT source, node, channel FROM channel_allocations"
    )
    assert code == 0 and {(r["source"], r["node"]) for r in json.loads(out)} == {
        ("kubelet-plugin/n0", "n0"), ("kubelet-plugin/n1", "n1"),
    }  # fmt: skip
    code, _, err = invoke("sql", "--db", str(collected), "DELETE FROM sources")
    assert code == 3 and "read-only" in err


def test_replay_per_source(collected: Path) -> None:
    code, out, _ = invoke("replay", "--db", str(collected), "--json")
    tables = json.loads(out)["tables"]
    assert code == 0 and {r["source"] for r in tables["claim_lifecycle"]} == {
        "kubelet-plugin/n0",
        "kubelet-plugin/n1",
    }
    assert {r["source"] for r in tables["domain_history"]} == {"controller/ctl-0"}
    code, _, err = invoke("replay", "--db", str(collected), "--position", "3")
    assert code == 2 and "--source" in err
    code, out, _ = invoke(
        "replay", "--db", str(collected), "--position", "1", "--source", "kubelet-plugin/n0", "--json"
    )
    [row] = json.loads(out)["tables"]["claim_lifecycle"]
    assert code == 0 and row["state"] == "PrepareStarted" and row["source"] == "kubelet-plugin/n0"


def test_history_by_kubectl_names(collected: Path) -> None:
    code, _, err = invoke("history", "--db", str(collected), "computedomain/team-a/nvl")
    assert code == 2 and OLD in err and NEW in err and "recreated" in err
    code, out, err = invoke("history", "--db", str(collected), NEW, "--json")
    story = lines(out)
    assert code == 0 and {e["source"] for e in story} == {
        "controller/ctl-0", "kubelet-plugin/n0", "kubelet-plugin/n1", f"daemon/n1/{NEW}",
    }  # fmt: skip
    assert all(OLD not in json.dumps(e["data"]) for e in story)
    assert [e["recorded_at"] for e in story] == sorted(str(e["recorded_at"]) for e in story)
    code, out, err = invoke("history", "--db", str(collected), "resourceclaim/team-a/job-1", "--json")
    assert code == 0 and "is uid" in err and {e["source"] for e in lines(out)} == {"kubelet-plugin/n1"}
    code, _, err = invoke("history", "--db", str(collected), "resourceclaim/team-a/job-0")
    assert code == 2 and "2 objects" in err
    code, out, _ = invoke("history", "--db", str(collected), "node/n1", "--json")
    assert code == 0 and {e["source"] for e in lines(out)} == {"kubelet-plugin/n1", f"daemon/n1/{NEW}"}
    code, _, err = invoke("history", "--db", str(collected), "computedomain/nvl")
    assert code == 2 and "computedomain/NAMESPACE/NAME" in err
    code, _, err = invoke("history", "--db", str(collected), "node/n1", "--since", "2999-01-01")
    assert code == 2 and "no events" in err


def test_streams_of_a_collected_file_and_of_a_log(collected: Path) -> None:
    code, out, _ = invoke("streams", "--db", str(collected), "--json")
    rows = json.loads(out)
    assert code == 0 and {(r["source"], r["stream"], r["events"]) for r in rows} >= {
        ("controller/ctl-0", f"domain/{OLD}", 1), ("controller/ctl-0", f"domain/{NEW}", 1),
        (f"daemon/n1/{NEW}", "node/n1", 1),
    }  # fmt: skip
    code, out, _ = invoke("streams", "--db", str(collected.parent / "n0.db"), "--stream", "claim/*", "--json")
    assert code == 0 and [r["events"] for r in json.loads(out)] == [4, 4]


def test_history_resolves_names_in_a_single_log(collected: Path) -> None:
    code, _, err = invoke("history", "--db", str(collected.parent / "n1.db"), "resourceclaim/team-a/job-1")
    assert code == 0 and "is uid" in err
    code, _, err = invoke("history", "--db", str(collected.parent / "n1.db"), "computedomain/team-a/nvl")
    assert code == 2 and "controller's log" in err


def test_verify_checks_every_source_and_names_an_edited_one(collected: Path, tmp_path: Path) -> None:
    code, out, _ = invoke("verify", "--db", str(collected))
    assert code == 0 and out.count("ok: ") == 5 and "4 sources" in out
    code, _, err = invoke("verify", "--db", str(collected), "--expect-head", f"1:{'0' * 64}")
    assert code == 2
    edited = tmp_path / "edited.db"
    edited.write_bytes(collected.read_bytes())
    db = sqlite3.connect(edited)
    db.execute("DROP TRIGGER source_events_are_never_updated")
    db.execute(
        "UPDATE source_events SET data = replace(data, 'job-1', 'job-9')"
        " WHERE source_id = (SELECT id FROM sources WHERE name = 'kubelet-plugin/n1') AND position = 1"
    )
    db.commit()
    db.close()
    code, out, err = invoke("verify", "--db", str(edited))
    assert code == 1 and "FAILED: kubelet-plugin/n1" in out
    assert "kubelet-plugin/n1 at position 1" in err
