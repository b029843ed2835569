"""The chart as a subchart: a parent chart's `global` values reach it and its schema accepts them; the removed
`nvidiaCDIHookPath` is refused by name."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from helm_python import chart as hc
from helm_python.errors import HelmRenderError, HelmValuesError

from cdctl.sim.rack import chart as sim_chart
from tests.chart.conftest import CHART_DIR, NAMESPACE, find, render_objects


@pytest.fixture
def parent_chart(tmp_path: Path) -> hc.Chart:
    """A chart that depends on cdctl, vendored under its charts/ as `helm dependency build` leaves it."""
    version = yaml.safe_load((CHART_DIR / "Chart.yaml").read_text())["version"]
    parent = tmp_path / "platform"
    (parent / "charts").mkdir(parents=True)
    shutil.copytree(CHART_DIR, parent / "charts" / "cdctl")
    (parent / "Chart.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v2",
                "name": "platform",
                "version": "1.0.0",
                "dependencies": [{"name": "cdctl", "version": version}],
            }
        )
    )
    (parent / "values.yaml").write_text(yaml.safe_dump({"global": {"imageRegistry": "registry.example"}}))
    return hc.Chart.load(parent)


def _render(chart: hc.Chart, values: dict[str, Any]) -> list[dict[str, Any]]:
    manifests = chart.render(values, name="platform", namespace=NAMESPACE, is_install=True)
    return [
        document
        for name, text in sorted(manifests.items())
        if name.endswith(".yaml")
        for document in yaml.safe_load_all(text)
        if document is not None
    ]


def test_the_chart_renders_as_a_subchart_with_global_values(parent_chart: hc.Chart) -> None:
    values = {"global": {"labels": {"team": "gpu"}}, "cdctl": {"logFormat": "console"}}
    try:
        objects = _render(parent_chart, values)
    finally:
        parent_chart.close()
    (controller,) = find(objects, "StatefulSet")
    (container,) = controller["spec"]["template"]["spec"]["containers"]
    assert {e["name"]: e.get("value") for e in container["env"]}["LOG_FORMAT"] == "console"
    assert find(objects, "DaemonSet"), "the kubelet plugin is rendered too"


def test_global_is_an_open_object_to_the_chart_alone(helm_chart: hc.Chart) -> None:
    values = {"global": {"imageRegistry": "registry.example", "anything": {"nested": [1, 2]}}}
    helm_chart.validate_schema(values)
    assert sim_chart.merged_values(values)["global"] == values["global"]
    with pytest.raises(HelmValuesError):
        helm_chart.validate_schema({"global": "not-an-object"})


def test_the_removed_cdi_hook_path_is_refused_by_name(helm_chart: hc.Chart) -> None:
    """No hook has work in cdctl's CDI specs (see docs/install.md): the Go chart's empty default is accepted
    (docs/upgrade-from-nvidia.md), a path is refused by name, not ignored."""
    render_objects(helm_chart, {"nvidiaCDIHookPath": ""})
    with pytest.raises(HelmRenderError, match="nvidiaCDIHookPath: not applicable to cdctl"):
        render_objects(helm_chart, {"nvidiaCDIHookPath": "/usr/local/bin/nvidia-cdi-hook"})
