"""Issue 8 point 4: `cdctl sim rack --mode host-managed` (a small rack) forms a domain and injects channel 0
on every node, with no daemon anywhere.

The command runs as its own process (controller and plugins are its children). Its exit status says every
worker ran with /dev/nvidia-caps-imex-channels/channel0 in its CDI edits and teardown left nothing; the
event logs it keeps say how: each node's plugin prepared one channel claim on channel 0 (no daemon claim),
and the controller only ever touched the ComputeDomain and its workload template.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from cdctl.cli.main import cli

pytestmark = pytest.mark.integration
NODES = ("gb200-r00-n00", "gb200-r00-n01")


@pytest.fixture
def work_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="cdr-", dir="/tmp"))  # short: the plugins' socket paths live under it
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def sql(db: Path, statement: str) -> list[dict[str, object]]:
    result = CliRunner().invoke(cli, ["sql", "--db", str(db), "--json", statement])
    assert result.exit_code == 0, result.output + result.stderr
    rows: list[dict[str, object]] = json.loads(result.stdout)
    return rows


def test_host_managed_rack_forms_a_domain_and_injects_channel_zero_everywhere(work_dir: Path) -> None:
    command = [sys.executable, "-m", "cdctl", "sim", "rack", "--nodes", "2", "--mode", "host-managed"]
    done = subprocess.run(
        [*command, "--keep", str(work_dir)], capture_output=True, text=True, timeout=240, check=False
    )  # the timeout only stops a hung run
    assert done.returncode == 0, done.stdout + done.stderr
    assert "host-managed" in done.stdout and "every check held" in done.stdout
    for node in NODES:
        db = work_dir / node / "plugins" / "compute-domain.nvidia.com" / "events.db"
        claims = sql(db, "SELECT node, kind, prepared_at IS NOT NULL AS prepared, state FROM claim_lifecycle")
        assert claims == [{"node": node, "kind": "channel", "prepared": 1, "state": "Unprepared"}]
        channels = sql(db, "SELECT node, channel FROM channel_allocations")
        assert channels == [{"node": node, "channel": 0}]
        (written,) = sql(
            db, "SELECT json_extract(data, '$.device_ids') AS ids FROM events WHERE type = 'CdiSpecWritten'"
        )
        (device_id,) = json.loads(str(written["ids"]))
        assert device_id.endswith("-channel-0")
    actions = sql(
        work_dir / "controller" / "events.db",
        "SELECT DISTINCT json_extract(data, '$.kind') AS kind FROM events"
        " WHERE type = 'DomainActionIntended'",
    )
    # No DaemonSet, daemon template, node label or clique: only the domain and its workload template.
    assert sorted(str(row["kind"]) for row in actions) == ["ComputeDomain", "ResourceClaimTemplate"]
