"""The Dockerfile builds the image the chart deploys: multi-stage, pinned base, non-root by default, `cdctl`
as the entry point, and a build context (.dockerignore) that carries what the build copies. Read statically:
no container engine is needed.
"""

from __future__ import annotations

import fnmatch
import json
import re
import tomllib

import yaml

from tests.chart.conftest import CHART_DIR

ROOT = CHART_DIR.parents[1]


def _instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    text = (ROOT / "Dockerfile").read_text()
    joined = re.sub(
        r"\\\n", " ", "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    )
    result = []
    for line in joined.splitlines():
        if line.strip():
            keyword, _, rest = line.strip().partition(" ")
            result.append((keyword.upper(), rest.strip()))
    return result


def _stages() -> list[list[tuple[str, str]]]:
    stages: list[list[tuple[str, str]]] = []
    for keyword, rest in _instructions():
        if keyword == "FROM":
            stages.append([])
        if stages:
            stages[-1].append((keyword, rest))
    return stages


def _global_args() -> dict[str, str]:
    args = {}
    for keyword, rest in _instructions():
        if keyword == "FROM":
            break
        if keyword == "ARG" and "=" in rest:
            name, _, value = rest.partition("=")
            args[name] = value
    return args


def test_multi_stage_on_a_pinned_python_base() -> None:
    stages = _stages()
    assert len(stages) >= 2
    args = _global_args()
    for stage in stages:
        image = stage[0][1].split()[0]
        image = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], image)
        assert re.fullmatch(r"python:3\.11\.\d+-slim-\w+", image), image


def test_runtime_stage_is_non_root_and_runs_cdctl() -> None:
    runtime = _stages()[-1]
    users = [rest for keyword, rest in runtime if keyword == "USER"]
    assert users, "the runtime stage sets no USER"
    user = users[-1].split(":")[0]
    assert user not in {"0", "root"}
    entrypoints = [rest for keyword, rest in runtime if keyword == "ENTRYPOINT"]
    assert json.loads(entrypoints[-1]) == ["cdctl"]
    copies = [rest for keyword, rest in runtime if keyword == "COPY"]
    assert any(c.startswith("--from=build") for c in copies)
    assert not [c for c in copies if not c.startswith("--from=")], "the runtime stage copies from the context"


def test_cdctl_is_the_packages_console_script() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["scripts"]["cdctl"] == "cdctl.cli.main:main"


def _ignored(path: str, patterns: list[str]) -> bool:
    """Docker's rule: the last matching pattern wins; `!` re-includes."""
    ignored = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        pattern = pattern.lstrip("!").rstrip("/")
        parts = path.split("/")
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        match = any(fnmatch.fnmatch(p, pattern) for p in prefixes)
        if pattern.startswith("**/"):
            match = match or any(fnmatch.fnmatch(part, pattern[3:]) for part in parts)
        if match:
            ignored = not negate
    return ignored


def test_build_context_carries_what_the_build_copies() -> None:
    patterns = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    sources = []
    for stage in _stages():
        for keyword, rest in stage:
            if keyword == "COPY" and not rest.startswith("--from="):
                sources.extend(rest.split()[:-1])
    assert {"pyproject.toml", "cdctl", "migrations"} <= set(sources)
    for source in sources:
        assert not _ignored(source, patterns), source
    for unwanted in (
        ".venv/bin/python",
        "tests/chart/test_image.py",
        "cdctl/__pycache__/x.pyc",
        "x.db",
        ".git",
    ):
        assert _ignored(unwanted, patterns), unwanted


def test_chart_default_image_is_this_build() -> None:
    values = yaml.safe_load((CHART_DIR / "values.yaml").read_text())
    metadata = yaml.safe_load((CHART_DIR / "Chart.yaml").read_text())
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert values["image"]["tag"] == ""  # defaults to the chart's appVersion
    assert f"docker build -t {values['image']['repository']}:{metadata['appVersion']} ." in dockerfile
    version_args = [
        rest for keyword, rest in _stages()[-1] if keyword == "ARG" and rest.startswith("VERSION=")
    ]
    assert version_args == [f"VERSION={metadata['appVersion']}"]
