"""`eventLog.otlpEndpoint` in the chart: empty by default (no export, no variable); set, it reaches the
controller and every kubelet plugin as CDCTL_OTLP_ENDPOINT, in a form the components accept; the schema
refuses what they would refuse."""

from __future__ import annotations

from typing import Any

import pytest
from helm_python import chart as hc
from helm_python.errors import HelmValuesError

from cdctl.store.otlp import otlp_logs_url
from tests.chart.conftest import render_objects


def _otlp_env(objects: list[dict[str, Any]]) -> dict[str, str | None]:
    found = {}
    for obj in objects:
        if obj["kind"] in ("StatefulSet", "DaemonSet"):
            [container] = obj["spec"]["template"]["spec"]["containers"]
            env = {e["name"]: e.get("value") for e in container.get("env", [])}
            found[obj["kind"]] = env.get("CDCTL_OTLP_ENDPOINT")
    return found


def test_no_export_unless_asked(helm_chart: hc.Chart) -> None:
    assert _otlp_env(render_objects(helm_chart)) == {"StatefulSet": None, "DaemonSet": None}


def test_an_endpoint_reaches_both_components(helm_chart: hc.Chart) -> None:
    url = "http://otel-collector.observability:4318"
    env = _otlp_env(render_objects(helm_chart, {"eventLog": {"otlpEndpoint": url}}))
    assert env == {"StatefulSet": url, "DaemonSet": url}
    assert otlp_logs_url(url) == f"{url}/v1/logs"


@pytest.mark.parametrize("endpoint", ["otel-collector:4318", "grpc://otel:4317", 4318])
def test_the_schema_refuses_what_is_not_an_http_url(helm_chart: hc.Chart, endpoint: object) -> None:
    with pytest.raises(HelmValuesError, match="at '/eventLog/otlpEndpoint'"):
        render_objects(helm_chart, {"eventLog": {"otlpEndpoint": endpoint}})
