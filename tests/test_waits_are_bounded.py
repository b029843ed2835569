"""Every wait in the tests has a bound of its own: an awaited `.wait()`, `.wait_closed()`, `.communicate()`,
`.join()`, `.get()` or `.acquire()` with no arguments sits inside `asyncio.wait_for` or an `asyncio.timeout`
block. The per-test timeout (pytest-timeout, see pyproject.toml) ends a test that hangs anyway; a bound of
its own makes the failure say what it waited for, and costs seconds instead of the whole timeout.

A wait that is meant to last until someone else ends it (a fake's pause that its test releases, a child
that runs until killed) is listed in INTENDED with the reason."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent
WAITS = {"wait", "wait_closed", "join", "communicate", "get", "acquire"}
INTENDED = {
    ("plugin/fakes.py", "self.paused[name].wait()"): "a request held until its test sets the event",
    ("plugin/fakes.py", "self.opened.wait()"): "a closed gate's wake, held until its test opens the gate",
    ("plugin/healthchild.py", "asyncio.Event().wait()"): "a child process that serves until it is killed",
    ("sim/fakeplugin.py", "log.release.wait()"): "a call held until its test releases it",
    ("store/otlpreceiver.py", "self.release.wait()"): "an export held until its test releases it",
}


def _unbounded(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text())
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    found = []
    for node in ast.walk(tree):
        call = node.value if isinstance(node, ast.Await) else None
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)):
            continue
        if call.func.attr not in WAITS or call.args or call.keywords:
            continue
        up: ast.AST = node
        bounded = False
        while up in parents and not isinstance(up, ast.FunctionDef | ast.AsyncFunctionDef):
            up = parents[up]
            items = up.items if isinstance(up, ast.AsyncWith) else []
            if any("timeout" in ast.unparse(i.context_expr) for i in items):
                bounded = True
                break
        if not bounded:
            found.append((node.lineno, ast.unparse(call)))
    return found


def test_every_wait_in_the_tests_has_a_bound() -> None:
    unbounded = []
    for path in sorted(TESTS.rglob("*.py")):
        where = path.relative_to(TESTS).as_posix()
        for line, call in _unbounded(path):
            if (where, call) not in INTENDED:
                unbounded.append(f"tests/{where}:{line}: await {call}")
    assert unbounded == []


def test_the_check_finds_an_unbounded_wait(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import asyncio\n"
        "async def f(e, p):\n"
        "    await e.wait()\n"
        "    await asyncio.wait_for(e.wait(), 5)\n"
        "    async with asyncio.timeout(5):\n"
        "        await p.communicate()\n"
    )
    assert _unbounded(sample) == [(3, "e.wait()")]


def test_a_test_past_its_timeout_fails_and_shows_where_its_tasks_wait(tmp_path: Path) -> None:
    """The suite's timeout (pyproject.toml) with tests/conftest.py's report, on a test that waits forever."""
    (tmp_path / "conftest.py").write_text(
        "from tests.conftest import pytest_timeout_set_timer  # noqa: F401\n"
    )
    (tmp_path / "test_hangs.py").write_text(
        "import asyncio\n"
        "async def forever(event):\n"
        "    await event.wait()\n"
        "async def test_hangs():\n"
        "    await asyncio.gather(forever(asyncio.Event()))\n"
    )
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--timeout=2", "--asyncio-mode=auto",
         "-W", "ignore::pytest.PytestConfigWarning", str(tmp_path / "test_hangs.py")],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(TESTS.parent)}, capture_output=True, text=True,
        timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 1, result.stdout[-2000:]
    assert "Timeout (>2.0s) from pytest-timeout" in result.stdout
    assert "Timeout: the asyncio tasks of test_hangs.py::test_hangs" in result.stdout
    assert "line 3, in forever\n    await event.wait()" in result.stdout
