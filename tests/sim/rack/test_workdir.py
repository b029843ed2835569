"""`cdctl sim rack --keep DIR`: a previous rack's files are replaced (its logs would make every name in the
next run's name two domains), a directory of anything else is refused and left as it is."""

from __future__ import annotations

from pathlib import Path

from cdctl.sim.rack.workdir import MARKER, reuse, work_dir_problem


def test_a_previous_racks_directory_is_cleared_and_marked(short_dir: Path) -> None:
    rack = short_dir / "rack"
    (rack / "controller").mkdir(parents=True)
    (rack / "controller" / "events.db").write_text("old")
    (rack / "kubeconfig").write_text("old")  # an older cdctl's rack: no marker yet
    assert work_dir_problem(rack) is None
    assert reuse(rack) is True
    assert sorted(p.name for p in rack.iterdir()) == [MARKER]
    assert work_dir_problem(rack) is None and reuse(rack) is True  # known by its marker now


def test_a_new_or_empty_directory_is_used_as_it_is(short_dir: Path) -> None:
    assert work_dir_problem(short_dir / "new") is None and reuse(short_dir / "new") is False
    assert (short_dir / "new" / MARKER).exists()


def test_a_directory_of_anything_else_is_refused_and_nothing_is_removed(short_dir: Path) -> None:
    (short_dir / "notes.txt").write_text("mine")
    problem = work_dir_problem(short_dir)
    assert problem is not None and f"--keep {short_dir}: not empty, and no earlier rack's" in problem
    assert (short_dir / "notes.txt").read_text() == "mine"
