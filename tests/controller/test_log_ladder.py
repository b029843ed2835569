"""The controller on the verbosity ladder (docs/logging.md): each object it writes and each reconcile that
writes nothing are decisions (level 2), the domain's writes are a state change (0), watch events are 4."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cdctl.cli.logs import configure_logging
from tests.controller.harness import DRIVER_NAMESPACE, Cluster, eventually

pytestmark = pytest.mark.usefixtures("restore_logging")


async def run_once(tmp_path: Path, level: int) -> None:
    configure_logging("json", level)
    async with Cluster(tmp_path) as cluster:
        task, _ = await cluster.start_controller()
        uid = cluster.create_domain("cd1", num_nodes=0)["metadata"]["uid"]
        await eventually(
            lambda: cluster.get("apps", "daemonsets", DRIVER_NAMESPACE, f"computedomain-daemon-{uid}")
        )
        await eventually(lambda: (d := cluster.domain("cd1")) and (d.get("status") or {}).get("status"))
        await cluster.stop_controller(task)


@pytest.mark.parametrize("level", [0, 2, 4])
async def test_controller_lines_appear_at_their_rung(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], level: int
) -> None:
    await run_once(tmp_path, level)
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines() if line.startswith("{")]
    events = [str(e["event"]) for e in lines]
    assert "ComputeDomain reconciled" in events  # its writes: a state change, at every level
    created = [e for e in lines if e["event"] == "create" and e.get("kind") == "DaemonSet"]
    assert bool(created) is (level >= 2)
    assert ("watch event" in events) is (level >= 4)
    assert "api request" not in events
