"""The Helm commands of docs/host-managed-imex.md render the chart in the mode they name (gate on: no daemon
DeviceClass; gate off: the daemon DeviceClass is back)."""

from __future__ import annotations

import re

from helm_python import chart as hc

from tests.chart.conftest import CHART_DIR, find, render_objects

GUIDE = CHART_DIR.parents[1] / "docs" / "host-managed-imex.md"


def test_the_guides_helm_commands_render_the_mode_they_name(helm_chart: hc.Chart) -> None:
    text = GUIDE.read_text().replace("\\\n", " ")
    commands = re.findall(r"helm (?:install|upgrade) cdctl \./charts/cdctl[^\n`]*", text)
    assert len(commands) == 3
    for command in commands:
        (flag,) = re.findall(r"--set featureGates\.HostManagedIMEX=(true|false)", command)
        objects = render_objects(helm_chart, {"featureGates": {"HostManagedIMEX": flag == "true"}})
        daemon_class = find(objects, "DeviceClass", "compute-domain-daemon.nvidia.com")
        assert (daemon_class == []) == (flag == "true"), command
