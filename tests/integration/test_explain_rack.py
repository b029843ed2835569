"""`cdctl explain` on what a real rack run recorded: `cdctl sim rack` ends its summary with the explanation of
its domain (the slowest node's critical path and the cause of its longest wait, each line citing its event),
and a collected file that lacks a node's plugin says which source would have told."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from tests.integration.test_rack import _run, work_dir  # noqa: F401 - the rack's work directory fixture

pytestmark = pytest.mark.integration
DOMAIN = "computedomain/team-a/nvl72"


async def test_the_rack_summary_ends_with_the_explanation_and_a_missing_source_is_named(
    work_dir: Path,  # noqa: F811
) -> None:
    code, output = await _run("sim", "rack", "--nodes", "3", "--keep", str(work_dir))
    assert code == 0, output
    collected = work_dir / "collected.db"
    summary = output[output.index("every check held") :]
    assert f"explain --db {collected} {DOMAIN}:" in summary
    assert "critical path (gb200-r00-n0" in summary and "<- longest wait" in summary
    code, said = await _run("explain", "--db", str(collected), DOMAIN)
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
    code, said = await _run("explain", "--db", str(partial), DOMAIN)
    assert code == 0, said
    assert f"note: no kubelet-plugin/{slowest} source: it would have told that node's prepares" in said
