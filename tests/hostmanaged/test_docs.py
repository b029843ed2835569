"""docs/host-managed-imex.md stays true: its `cdctl sql` queries run on a host-managed plugin log and find
the refused claims, and install.md links it (its Helm commands: tests/chart/test_hostmanaged_docs.py)."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

from click.testing import CliRunner

from cdctl.cli.main import cli
from tests.plugin.test_hostmanaged_sql import write_refusals

DOCS = Path(__file__).resolve().parents[2] / "docs"
GUIDE = DOCS / "host-managed-imex.md"


def test_the_guides_sql_lists_the_refused_claims(tmp_path: Path) -> None:
    db = asyncio.run(write_refusals(tmp_path))  # the CLI runs its own event loop: this test has none
    statements = re.findall(r'cdctl sql --db \S+ \\\n\s+"(SELECT.*?)"', GUIDE.read_text(), flags=re.DOTALL)
    assert len(statements) == 2
    outputs = []
    for statement in statements:
        result = CliRunner().invoke(cli, ["sql", "--db", str(db), "--json", statement])
        assert result.exit_code == 0, result.output + result.stderr
        outputs.append(json.loads(result.stdout))
    lifecycle, events = outputs
    assert sorted(row["name"] for row in lifecycle) == ["all", "daemon", "foo", "noclique", "second"]
    assert all(row["last_error"] for row in lifecycle)
    assert {row["claim"] for row in events if row["retriable"] == 0} == {
        "u-all",
        "u-daemon",
        "u-foo",
        "u-noclique",
    }


def test_install_links_the_guide() -> None:
    assert "(host-managed-imex.md)" in (DOCS / "install.md").read_text()
