"""docs/install.md stays true to the chart: the paths it names exist, each `helm install` shown renders."""

from __future__ import annotations

import re
from typing import Any

from helm_python import chart as hc

from tests.chart.conftest import CHART_DIR, render_objects

ROOT = CHART_DIR.parents[1]
INSTALL = ROOT / "docs" / "install.md"


def _set_value(values: dict[str, Any], assignment: str) -> None:
    """Helm's --set for plain scalars: dotted path, true/false and integers typed."""
    path, _, raw = assignment.partition("=")
    value: Any = raw
    if raw in {"true", "false"}:
        value = raw == "true"
    elif raw.isdigit():
        value = int(raw)
    *parents, leaf = path.split(".")
    node = values
    for key in parents:
        node = node.setdefault(key, {})
    node[leaf] = value


def _helm_installs() -> list[str]:
    text = INSTALL.read_text().replace("\\\n", " ")
    return [line.strip() for line in text.splitlines() if line.strip().startswith("helm install")]


def test_every_documented_install_renders(helm_chart: hc.Chart) -> None:
    installs = _helm_installs()
    assert len(installs) >= 3
    for command in installs:
        assert "./charts/cdctl" in command and "--namespace cdctl-system" in command
        values: dict[str, Any] = {}
        for assignment in re.findall(r"--set (\S+)", command):
            _set_value(values, assignment)
        assert render_objects(helm_chart, values, namespace="cdctl-system"), command


def test_documented_paths_exist() -> None:
    text = INSTALL.read_text()
    assert "kubectl apply --server-side -f charts/cdctl/crds/" in text
    assert (CHART_DIR / "crds").is_dir()
    for path in re.findall(r"`(charts/cdctl/[\w./-]+)`", text):
        assert (ROOT / path).exists(), path
