"""The logs' retention in the chart: `eventLog.retention.age`, `.size` and `.interval` reach the controller
and the kubelet plugin as CDCTL_RETENTION_AGE / _SIZE / _INTERVAL (the controller hands them on to the IMEX
daemons), and the schema refuses what the components would refuse to parse."""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml
from helm_python import chart as hc
from helm_python.errors import HelmValuesError

from cdctl.domain.retention import (
    DEFAULT_AGE,
    DEFAULT_INTERVAL,
    DEFAULT_SIZE,
    parse_age,
    parse_interval,
    parse_size,
)
from cdctl.sim.rack import chart as sim_chart
from tests.chart.conftest import CHART_DIR, render_objects


def _retention_env(objects: list[dict[str, Any]]) -> dict[str, dict[str, str]]:
    found = {}
    for obj in objects:
        if obj["kind"] in ("StatefulSet", "DaemonSet"):
            [container] = obj["spec"]["template"]["spec"]["containers"]
            env = {e["name"]: e.get("value") for e in container.get("env", [])}
            found[obj["kind"]] = {k: v for k, v in env.items() if k.startswith("CDCTL_RETENTION_")}
    return found


def test_both_components_keep_their_logs_under_the_default_bounds(helm_chart: hc.Chart) -> None:
    defaults = yaml.safe_load((CHART_DIR / "values.yaml").read_text())["eventLog"]["retention"]
    assert (defaults["age"], defaults["size"], defaults["interval"]) == (
        DEFAULT_AGE,
        DEFAULT_SIZE,
        DEFAULT_INTERVAL,
    )
    expected = {
        "CDCTL_RETENTION_AGE": DEFAULT_AGE,
        "CDCTL_RETENTION_SIZE": DEFAULT_SIZE,
        "CDCTL_RETENTION_INTERVAL": DEFAULT_INTERVAL,
    }
    assert _retention_env(render_objects(helm_chart)) == {"StatefulSet": expected, "DaemonSet": expected}


def test_set_bounds_reach_both_components_as_the_components_read_them(helm_chart: hc.Chart) -> None:
    values = {"eventLog": {"retention": {"age": "7d", "size": 0, "interval": "30s"}}}
    env = _retention_env(render_objects(helm_chart, values))
    assert (
        env["StatefulSet"]
        == env["DaemonSet"]
        == {"CDCTL_RETENTION_AGE": "7d", "CDCTL_RETENTION_SIZE": "0", "CDCTL_RETENTION_INTERVAL": "30s"}
    )
    assert (parse_age(env["DaemonSet"]["CDCTL_RETENTION_AGE"]), parse_size("0")) == (7 * 86400, 0)
    assert parse_interval(env["DaemonSet"]["CDCTL_RETENTION_INTERVAL"]) == 30


@pytest.mark.parametrize(
    ("retention", "where"),
    [
        ({"age": "a month"}, "/eventLog/retention/age"),
        ({"age": 30}, "/eventLog/retention/age"),
        ({"size": "1PB"}, "/eventLog/retention/size"),
        ({"size": "-1GiB"}, "/eventLog/retention/size"),
        ({"keep": "forever"}, "/eventLog/retention"),
        ({"interval": "0s"}, "/eventLog/retention/interval"),
        ({"interval": "often"}, "/eventLog/retention/interval"),
    ],
)
def test_the_schema_refuses_bounds_the_components_cannot_read(
    helm_chart: hc.Chart, retention: dict[str, Any], where: str
) -> None:
    values = {"eventLog": {"retention": retention}}
    with pytest.raises(HelmValuesError, match=f"at '{re.escape(where)}'"):
        helm_chart.validate_schema(values)
    with pytest.raises(sim_chart.ChartValuesError, match=f"at '{re.escape(where)}'"):
        sim_chart.merged_values(values, chart=CHART_DIR)
