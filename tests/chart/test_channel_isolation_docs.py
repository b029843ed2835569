"""The Helm commands of docs/channel-isolation.md render the mode they name: channel isolation reaches the
controller and the kubelet plugin, the channel DeviceClass is the only class, and the shared IMEX daemon's
DaemonSet exists under driver-managed IMEX only. `helm upgrade ... --reuse-values` is rendered over the
default values."""

from __future__ import annotations

import re
from typing import Any

from helm_python import chart as hc

from cdctl.api.isolation import CHANNEL_ISOLATION_DEVICE_CLASS
from tests.chart.conftest import CHART_DIR, env_of, find, render_objects
from tests.chart.test_docs import _set_value

GUIDE = CHART_DIR.parents[1] / "docs" / "channel-isolation.md"


def _helm_commands() -> list[str]:
    text = GUIDE.read_text().replace("\\\n", " ")
    return re.findall(r"helm (?:install|upgrade) cdctl \./charts/cdctl[^\n`]*", text)


def test_the_guides_helm_commands_render_channel_isolation(helm_chart: hc.Chart) -> None:
    commands = _helm_commands()
    assert len(commands) == 3  # two installs, the migration's upgrade
    for command in commands:
        values: dict[str, Any] = {}
        for assignment in re.findall(r"--set (\S+)", command):
            _set_value(values, assignment)
        objects = render_objects(helm_chart, values, namespace="cdctl-system")
        host_managed = "HostManagedIMEX=true" in command
        classes = [c["metadata"]["name"] for c in find(objects, "DeviceClass")]
        assert classes == [CHANNEL_ISOLATION_DEVICE_CLASS], command
        for kind in ("StatefulSet", "DaemonSet"):
            for workload in find(objects, kind):
                for container in workload["spec"]["template"]["spec"]["containers"]:
                    if "IMEX_ISOLATION" in env_of(container):
                        assert env_of(container)["IMEX_ISOLATION"] == "channel", command
        daemons = [d["metadata"]["name"] for d in find(objects, "DaemonSet")]
        assert ("cdctl-imex-daemon" in daemons) == (not host_managed), (command, daemons)


def test_the_guide_names_the_charts_values() -> None:
    text = GUIDE.read_text()
    for name in ("kubeletPlugin.channelCapacity", "kubeletPlugin.channelSlots"):
        assert name in text
        leaf = name.rpartition(".")[2]
        values = (CHART_DIR / "values.yaml").read_text()
        assert re.search(rf"^\s+{leaf}:", values, re.M), name
    assert "resources.computeDomains.imexChannelCount" in text
