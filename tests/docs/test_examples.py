"""Commands that work as printed: every cdctl line of the README's and docs/cli.md's shell examples, run as
written by bash against a demo log, and the commands `cdctl demo` prints, copied from its output.

A line whose comment says it needs a live cluster is skipped, with that reason; every other line must exit 0.
The examples say `cdctl`, as after `make install`: the runs put a `cdctl` link to this installation first on
PATH, as `make install` does. The demo's own commands are run with no `cdctl` on PATH at all.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from cdctl.cli.demo import write_scenario
from cdctl.cli.errors import run
from cdctl.invocation import installed_script

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = ("README.md", "docs/cli.md")
FENCE = re.compile(r"^```sh\n(.*?)^```", re.MULTILINE | re.DOTALL)
LIVE = "needs a live cluster"
COMMAND = re.compile(r"(^|[\s(<])cdctl\s")  # cdctl run, not cdctl named in a comment


def _code(line: str) -> str:
    return line.split(" #", 1)[0]


def examples() -> list[tuple[str, str]]:
    found = []
    for document in DOCUMENTS:
        for block in FENCE.findall((ROOT / document).read_text()):
            found += [(document, line.strip()) for line in block.splitlines() if COMMAND.search(_code(line))]
    return found


def test_the_documents_have_examples_to_run() -> None:
    commands = {line.split()[1] for _, line in examples() if line.startswith("cdctl ")}
    assert {"demo", "events", "sql", "replay", "verify", "history", "streams", "version"} <= commands


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What `cdctl demo --keep demo` leaves (the scenario, written in-process: fast)."""
    root = tmp_path_factory.mktemp("demo-log")
    (root / "demo").mkdir()
    run(write_scenario(root / "demo" / "events.db", nodes=18))
    return root / "demo"


def _path_with_cdctl(tmp_path: Path) -> str:
    script = installed_script()
    assert script is not None, "cdctl is not installed in this environment (make .venv/.installed)"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "cdctl").symlink_to(script)  # what `make install` makes
    return f"{bin_dir}{os.pathsep}{_path_without_cdctl()}"


def _path_without_cdctl() -> str:
    script = installed_script()
    keep = [
        d for d in os.environ.get("PATH", "").split(os.pathsep) if script is None or Path(d) != script.parent
    ]
    return os.pathsep.join(keep)


def _bash(line: str, cwd: Path, path: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        # The demo's rack takes 15 s on a quiet 2-core machine, and several times that on a busy one.
        ["bash", "-c", f"set -o pipefail; {line}"], cwd=cwd, capture_output=True, text=True, timeout=150,
        env={**os.environ, "PATH": path}, check=False,
    )  # fmt: skip


@pytest.mark.skipif(shutil.which("bash") is None, reason="the examples are bash lines")
@pytest.mark.parametrize(("document", "line"), examples())
def test_each_example_runs_as_written(document: str, line: str, demo_dir: Path, tmp_path: Path) -> None:
    if LIVE in line:
        pytest.skip(f"{document}: {LIVE}: {line}")
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    if not line.startswith("cdctl demo"):
        shutil.copytree(demo_dir, cwd / "demo")
    done = _bash(line, cwd, _path_with_cdctl(tmp_path))
    assert done.returncode == 0, f"{document}: {line}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    assert "Traceback" not in done.stderr


@pytest.mark.skipif(shutil.which("bash") is None, reason="the demo's commands are bash lines")
def test_the_commands_the_demo_prints_run_as_printed_without_cdctl_on_path(tmp_path: Path) -> None:
    path = _path_without_cdctl()
    script = installed_script()
    assert script is not None
    assert shutil.which("cdctl", path=path) is None or Path(shutil.which("cdctl", path=path) or "") != script
    done = _bash(f"{script} demo --nodes 3 --keep here", tmp_path, path)
    assert done.returncode == 0, done.stderr
    printed = done.stdout.split("explore it:\n")[1].splitlines()
    commands = [
        line.strip() for line in printed if line.startswith("  ") and not line.strip().startswith("(")
    ]
    assert len(commands) >= 4 and all(not c.startswith("cdctl ") for c in commands)
    assert "make install" in done.stdout  # and how to get plain `cdctl`
    for command in commands:
        ran = _bash(command, tmp_path, path)
        assert ran.returncode == 0 and ran.stdout, f"{command}\n{ran.stderr}"


def test_the_demo_prints_plain_cdctl_once_it_is_on_path(tmp_path: Path) -> None:
    done = _bash("cdctl demo --nodes 2 --keep here", tmp_path, _path_with_cdctl(tmp_path))
    assert done.returncode == 0, done.stderr
    printed = done.stdout.split("explore it:\n")[1].splitlines()
    assert printed[0].strip().startswith("cdctl events --db here/events.db")
    assert "make install" not in done.stdout
    ran = _bash(printed[0], tmp_path, _path_with_cdctl(tmp_path / "again"))
    assert ran.returncode == 0 and "ComputeDomainObserved" in ran.stdout
