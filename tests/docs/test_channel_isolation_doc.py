"""docs/channel-isolation.md's `cdctl sim rack` commands are accepted as printed: every flag exists and the
combination passes the command's own checks (the rack itself runs in tests/integration/test_channel_rack.py,
whose runs also query a controller log with the guide's SQL)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from cdctl.cli.main import cli
from cdctl.sim.node.topology import NODES_PER_RACK
from cdctl.sim.rack import rackcommand

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "channel-isolation.md"


def guide_commands(prefix: str) -> list[str]:
    """The guide's command lines starting with `prefix`, continuation lines joined."""
    text = GUIDE.read_text().replace("\\\n", " ")
    return [line.strip() for line in text.splitlines() if line.strip().startswith(prefix)]


def test_the_guides_sim_rack_commands_parse_and_pass_the_commands_checks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[dict[str, Any]] = []

    def recorded(
        directory: Path, nodes: int, racks: int, mode: str, rack_domains: bool, options: Any, hold_s: float
    ) -> int:
        calls.append({"nodes": nodes, "mode": mode, "problem": options.problem(nodes, rack_domains)})
        return 0

    monkeypatch.setattr(rackcommand, "run_rack_command", recorded)
    commands = guide_commands("cdctl sim rack")
    assert len(commands) >= 3
    for command in commands:
        result = CliRunner().invoke(cli, [*shlex.split(command)[1:], "--keep", "/tmp/cdctl-doc-check"])
        assert result.exit_code == 0, (command, result.output)
    assert [c["problem"] for c in calls] == [None] * len(commands)
    assert {c["mode"] for c in calls} == {"driver-managed", "host-managed"}
    assert any(c["nodes"] == NODES_PER_RACK for c in calls)


def test_the_guides_log_commands_name_the_controller_log_and_streams_that_exist() -> None:
    sql = guide_commands("cdctl sql")
    events = guide_commands("cdctl events")
    assert sql and events
    assert all("--db /var/lib/cdctl/controller.db" in c for c in sql + events)
    assert re.search(r"FROM channel_assignments", " ".join(sql))
    assert any("--stream 'channels/*'" in c for c in events)
