"""`cdctl explain` on what a real rack run recorded: `cdctl sim rack` ends its summary with the explanation of
its domain (the slowest node's critical path and the cause of its longest wait, each line citing its event),
and a collected file that lacks a node's plugin says which source would have told."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from tests.integration.support import run_cdctl

pytestmark = pytest.mark.integration
DOMAIN = "computedomain/team-a/nvl72"


async def test_the_rack_summary_ends_with_the_explanation_and_a_missing_source_is_named(
    work_dir: Path,
) -> None:
    code, output = await run_cdctl("sim", "rack", "--nodes", "3", "--keep", str(work_dir))
    assert code == 0, output
    collected = work_dir / "collected.db"
    summary = output[output.index("every check held") :]
    assert f"why {DOMAIN} took its time (cdctl explain):" in summary
    assert f"explain --db {collected} {DOMAIN}\n" in summary, "the command on a line of its own, as it runs"
    assert "critical path (gb200-r00-n0" in summary and "<- longest wait" in summary
    code, said = await run_cdctl("explain", "--db", str(collected), DOMAIN)
    assert code == 0, said
    slowest = said.split("critical path (", 1)[1].split(")", 1)[0]
    assert f"[kubelet-plugin/{slowest} #" in said, "the path cites the slowest node's own plugin"
    # A collection that could not reach that node's plugin: the file says so, and which source would tell.
    partial = work_dir / "partial.db"
    shutil.copy(collected, partial)
    db = sqlite3.connect(partial)
    try:
        db.execute("DROP TRIGGER source_events_are_never_deleted")
        db.execute(
            "DELETE FROM source_events WHERE source_id = (SELECT id FROM sources WHERE name = ?)",
            (f"kubelet-plugin/{slowest}",),
        )
        db.execute("DELETE FROM ranges WHERE source_id = (SELECT id FROM sources WHERE name = ?)",
                   (f"kubelet-plugin/{slowest}",))  # fmt: skip
        db.execute("DELETE FROM sources WHERE name = ?", (f"kubelet-plugin/{slowest}",))
        db.commit()
    finally:
        db.close()
    code, said = await run_cdctl("explain", "--db", str(partial), DOMAIN)
    assert code == 0, said
    assert f"note: no kubelet-plugin/{slowest} source: it would have told that node's prepares" in said


async def test_faults_injected_while_the_domain_forms_are_what_explain_finds(
    work_dir: Path,
) -> None:
    """slow-node: its kubelet stops, its first Prepare comes late and it is the slowest; imex-crash: the
    node's IMEX killed, and restarted; power-loss: the node's plugin starts again. The rack still forms."""
    code, output = await run_cdctl(
        "sim", "rack", "--nodes", "4", "--keep", str(work_dir),
        "--fault", "slow-node:gb200-r00-n03:5", "--fault", "imex-crash:gb200-r00-n01",
        "--fault", "power-loss:gb200-r00-n02",
    )  # fmt: skip
    assert code == 0, output
    text = " ".join(output.split())
    assert "injecting while the domain forms: slow-node:gb200-r00-n03:5, imex-crash:gb200-r00-n01," in text
    collected = str(work_dir / "collected.db")
    code, said = await run_cdctl("explain", "--db", collected, DOMAIN)
    assert code == 0, said
    assert "critical path (gb200-r00-n03):" in said
    assert "the kubelet asked for the channel claim's Prepare only at" in said
    code, said = await run_cdctl("explain", "--db", collected, "node/gb200-r00-n01")
    assert "IMEX exited (killed by SIGKILL)" in said, said
    code, said = await run_cdctl("explain", "--db", collected, "node/gb200-r00-n02")
    assert "the kubelet plugin started again (a reboot or a crash)" in said, said


async def test_a_domain_that_waits_for_a_held_channel_is_explained_by_exhausted_channels(
    work_dir: Path,
) -> None:
    """channels-exhausted: another team's domain holds the clique's one free channel from before the rack's
    domain is created; the domain waits until it is released, and explain follows the plugin's refusal to the
    controller's ImexChannelsExhausted. The holder leaves nothing behind (the rack's checks)."""
    code, output = await run_cdctl(
        "sim", "rack", "--nodes", "2", "--keep", str(work_dir), "--isolation", "channel",
        "--fault", "channels-exhausted:gb200-r00-n01",
    )  # fmt: skip
    assert code == 0, output
    text = " ".join(output.split())
    assert "every check held" in text
    assert "waiting for an IMEX channel for ComputeDomain team-a/cd-a" in text, "the summary ends with it"
    code, said = await run_cdctl(
        "explain", "--db", str(work_dir / "collected.db"), "computedomain/team-a/cd-a", "-o", "json"
    )
    assert code == 0, said
    [explained] = json.loads(said)
    exhausted = [c for c in explained["causes"] if c["code"] == "channels-exhausted"]
    assert [c["evidence"]["type"] for c in exhausted] == ["ClaimPrepareFailed", "ImexChannelsExhausted"]
    assert "(1 to 1; 0 is never handed out) was held by other domains" in exhausted[1]["text"]
    assert explained["critical_path"]["steps"][-1]["wait_s"] >= 3.0, "it waited for the holder's release"
    assert not any("would tell it" in note for note in explained["notes"]), (
        "a collected file with the controller and the plugins lacks no log: channel isolation has no daemons"
    )


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        ([], "--fault channels-exhausted needs --isolation channel"),
        (
            ["--isolation", "channel", "--imex-channel-count", "3"],
            "needs --imex-channel-count at most --domains + 1 (2): with 3, no domain would wait",
        ),
    ],
)
async def test_exhausted_channels_need_channel_isolation_and_one_channel_per_domain(
    work_dir: Path, flags: list[str], said: str
) -> None:
    code, output = await run_cdctl(
        "sim", "rack", "--nodes", "2", "--keep", str(work_dir), "--fault", "channels-exhausted:gb200-r00-n00",
        *flags,
    )  # fmt: skip
    assert code == 2
    assert said in " ".join(output.split())


@pytest.mark.parametrize(
    ("fault", "said"),
    [
        (
            "melt:gb200-r00-n00",
            "is not KIND:NODE[:SECONDS] (KIND: slow-node, imex-crash, power-loss, channels-",
        ),
        ("slow-node:gb200-r09-n00", "no GPU node 'gb200-r09-n00' in this rack"),
        ("slow-node:gb200-r00-n00:soon", "SECONDS 'soon' is not a number"),
        ("power-loss:gb200-r00-n00:0", "SECONDS must be above 0 and at most 300"),
    ],
)
async def test_a_bad_fault_is_refused_naming_the_flag(work_dir: Path, fault: str, said: str) -> None:
    code, output = await run_cdctl("sim", "rack", "--nodes", "2", "--keep", str(work_dir), "--fault", fault)
    assert code == 2
    assert "--fault" in output and said in " ".join(output.split())
