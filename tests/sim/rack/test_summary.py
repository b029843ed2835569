"""The `cdctl sim rack` summary: formation beside its target, and each step once, with its own time and the
time since its phase began (start-up apart from formation, which counts from the domain's creation)."""

from __future__ import annotations

import io

from rich.console import Console, RenderableType

from cdctl.sim.rack.launch import StartTimings
from cdctl.sim.rack.liveview import formation_line, steps_table
from cdctl.sim.rack.scenario import ScenarioReport, formation_target

STEPS = [
    ("create ComputeDomains", 0.01),
    ("controller creates channel templates", 0.15),
    ("workers Running and Ready with channel0", 1.23),
    ("delete jobs: claims unprepared", 0.10),
    ("delete ComputeDomains: nothing left", 0.16),
]


def _text(renderable: RenderableType) -> str:
    console = Console(file=io.StringIO(), width=160, force_terminal=False, color_system=None)
    console.print(renderable)
    output = console.file
    assert isinstance(output, io.StringIO)
    return output.getvalue()


def _row(text: str, step: str) -> list[str]:
    line = next(line for line in text.splitlines() if f" {step} " in line)
    return [cell.strip() for cell in line.strip("│ ").split("│")]


def test_each_step_appears_once_with_its_own_and_its_cumulative_time() -> None:
    timings = StartTimings(cluster_s=0.11, per_step={"launch processes": 1.22, "plugins registered": 1.32})
    text = _text(steps_table(timings, ScenarioReport(steps=list(STEPS), formation_s=1.39, teardown_s=0.27)))
    for step, _ in STEPS:
        assert text.count(step) == 1, step
    assert _row(text, "launch controller and plugin processes") == [
        "launch controller and plugin processes",
        "1.22",
        "1.33",
    ]
    # "plugins registered" was recorded since the launch: its own step is what came after
    assert _row(text, "plugins registered with ResourceSlices") == [
        "plugins registered with ResourceSlices",
        "0.10",
        "1.43",
    ]
    assert _row(text, "workers Running and Ready with channel0") == [
        "workers Running and Ready with channel0",
        "1.23",
        "1.39",
    ]
    assert _row(text, "delete ComputeDomains: nothing left") == [
        "delete ComputeDomains: nothing left",
        "0.16",
        "0.26",
    ]
    phases = [line for line in text.splitlines() if "since the" in line or "start-up" in line]
    assert "rack start-up (not part of formation)" in phases[1]
    assert "formation (since the ComputeDomain was created)" in text
    assert "teardown (since the jobs were deleted)" in text


def test_the_formation_figure_stands_beside_its_target() -> None:
    met = _text(formation_line(ScenarioReport(formation_s=1.39), 18) or "")
    assert met.startswith("formation: 1.39 s (target for 18 nodes: < 3 s, met)")
    missed = _text(formation_line(ScenarioReport(formation_s=16.2), 144) or "")
    assert "formation: 16.20 s (target for 144 nodes: < 15 s, MISSED)" in missed
    assert "target" not in _text(formation_line(ScenarioReport(formation_s=20.0), 288) or "")
    assert formation_line(ScenarioReport(), 18) is None


def test_a_rack_is_held_to_the_target_of_the_next_size_up() -> None:
    assert formation_target(4) == (18, 3.0)
    assert formation_target(18) == (18, 3.0)
    assert formation_target(36) == (144, 15.0)
    assert formation_target(145) is None


def test_the_figure_says_the_load_it_was_taken_at() -> None:
    text = _text(formation_line(ScenarioReport(formation_s=5.9, load_average=11.64), 18) or "")
    assert "formation: 5.90 s (target for 18 nodes: < 3 s, MISSED) at load average 11.64 on" in text
