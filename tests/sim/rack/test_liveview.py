"""The rack's live view: a row per node with plugin, daemon and claim progress; redraws on a terminal only."""

from __future__ import annotations

import io

from rich.console import Console

from cdctl.sim.rack.checks import NodeState, WorkerState
from cdctl.sim.rack.liveview import LiveView, progress_table
from cdctl.sim.rack.scenario import Progress


def _progress(phase: str, steps: list[tuple[str, float]]) -> Progress:
    nodes = [
        NodeState("gb200-r00-n00", "uuid.32766", plugin=True, daemons=1, daemons_ready=1),
        NodeState("gb200-r00-n01", "uuid.32766", plugin=False, daemons=0, daemons_ready=0),
    ]
    workers = {
        "nvl-job": [
            WorkerState("nvl-job-0", "u0", "gb200-r00-n00", "Running", "prepared", channel0=True, ready=True),
            WorkerState("nvl-job-1", "u1", "gb200-r00-n01", "Pending", "reserved", channel0=False),
        ]
    }
    return Progress(phase, 1.5, nodes, workers, steps)


def _render(progress: Progress) -> str:
    console = Console(file=io.StringIO(), width=160, force_terminal=False, color_system=None)
    console.print(progress_table(progress))
    output = console.file
    assert isinstance(output, io.StringIO)
    return output.getvalue()


def test_the_table_shows_each_node_its_daemon_and_its_workers_claim() -> None:
    text = _render(_progress("workers Running and Ready with channel0", [("create ComputeDomains", 0.01)]))
    first = next(line for line in text.splitlines() if "gb200-r00-n00" in line)
    second = next(line for line in text.splitlines() if "gb200-r00-n01" in line)
    assert "32766" in first and "registered" in first and "1/1 ready" in first
    assert "nvl-job-0 (Running)" in first and "prepared" in first and "yes" in first
    assert "starting" in second and "reserved" in second and "no" in second
    assert "plugins 1/2" in text and "daemons ready 1" in text and "claims prepared 1/2" in text
    assert "create ComputeDomains: 0.01 s" in text


def test_without_a_terminal_it_names_each_step_as_it_begins_and_leaves_the_times_to_the_summary() -> None:
    output = io.StringIO()
    console = Console(file=output, force_terminal=False, color_system=None)
    with LiveView(console) as view:
        view(_progress("a", [("first", 1.0)]))
        view(_progress("a", [("first", 1.0)]))
        view(_progress("b", [("first", 1.0), ("second", 2.5)]))
        view(_progress("done", [("first", 1.0), ("second", 2.5)]))
    assert output.getvalue().splitlines() == ["  a ...", "  b ..."]


def test_on_a_terminal_the_last_frame_is_the_formed_rack_not_the_torn_down_one() -> None:
    output = io.StringIO()
    console = Console(file=output, force_terminal=True, width=160, color_system=None)
    formed = _progress("workers Running and Ready with channel0", [("create ComputeDomains", 0.01)])
    formed.workers["nvl-job"][1] = WorkerState(
        "nvl-job-1", "u1", "gb200-r00-n01", "Running", "prepared", True, ready=True
    )
    torn_down = Progress("delete ComputeDomains: nothing left", 3.0, formed.nodes, {"nvl-job": []}, [])
    with LiveView(console) as view:
        view(formed)
        view(torn_down)
    last = output.getvalue().rsplit("formed: every worker Running and Ready with channel0", 1)
    assert len(last) == 2, output.getvalue()[-2000:]
    assert "nvl-job-1 (Running)" in last[1] and "nothing left" not in last[1]
    assert "create ComputeDomains: 0.01 s" not in last[1]  # the summary holds the step times
