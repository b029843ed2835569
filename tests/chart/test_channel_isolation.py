"""The chart under `resources.computeDomains.imex.isolation: channel`: the channel DeviceClass and what the
kubelet plugin is told."""

from __future__ import annotations

from typing import Any

import pytest
from helm_python import chart as hc

from cdctl.api.isolation import CHANNEL_ISOLATION_DEVICE_CLASS
from cdctl.plugin.channels import shared_channel_devices
from cdctl.sim.controllers.celdevices import device_context, selectors_match
from cdctl.sim.rack import chart as sim_chart
from tests.chart.conftest import render_objects

CHANNEL = {"resources": {"computeDomains": {"imex": {"isolation": "channel"}}}}
OLD_DEVICES = [
    {"name": "channel-0", "attributes": {"type": {"string": "channel"}, "id": {"int": 0}}},
    {"name": "daemon-0", "attributes": {"type": {"string": "daemon"}, "id": {"int": 0}}},
]


def _env(objects: list[dict[str, Any]]) -> dict[str, str]:
    (plugin,) = [o for o in objects if o["kind"] == "DaemonSet" and o["metadata"]["name"].endswith("-plugin")]
    container = plugin["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("value", "") for e in container["env"]}


def _classes(objects: list[dict[str, Any]]) -> list[str]:
    return sorted(o["metadata"]["name"] for o in objects if o["kind"] == "DeviceClass")


@pytest.mark.parametrize("host_managed", [False, True])
def test_channel_isolation_installs_only_the_channel_class(helm_chart: hc.Chart, host_managed: bool) -> None:
    values = {**CHANNEL, "featureGates": {"HostManagedIMEX": host_managed}}
    assert _classes(render_objects(helm_chart, values)) == [CHANNEL_ISOLATION_DEVICE_CLASS]
    assert [c["metadata"]["name"] for c in sim_chart.device_classes(values)] == [
        CHANNEL_ISOLATION_DEVICE_CLASS
    ]


def test_domain_isolation_keeps_the_go_drivers_classes(helm_chart: hc.Chart) -> None:
    assert _classes(render_objects(helm_chart, {})) == [
        "compute-domain-daemon.nvidia.com",
        "compute-domain-default-channel.nvidia.com",
    ]
    env = _env(render_objects(helm_chart, {}))
    assert env["IMEX_ISOLATION"] == "domain"
    assert "CHANNEL_SLOTS" not in env and "CHANNEL_CAPACITY" not in env


def test_the_plugin_is_told_the_isolation_and_its_channel_capacity(helm_chart: hc.Chart) -> None:
    values = {**CHANNEL, "kubeletPlugin": {"channelSlots": 6, "channelCapacity": "slots"}}
    env = _env(render_objects(helm_chart, values))
    assert (env["IMEX_ISOLATION"], env["CHANNEL_SLOTS"], env["CHANNEL_CAPACITY"]) == ("channel", "6", "slots")


@pytest.mark.parametrize(
    "values",
    [
        {"kubeletPlugin": {"channelSlots": -1}},
        {"resources": {"computeDomains": {"imex": {"isolation": "rack"}}}},
    ],
)
def test_bad_values_are_refused(values: dict[str, Any]) -> None:
    with pytest.raises(sim_chart.ChartValuesError):
        sim_chart.merged_values(values)


@pytest.mark.parametrize("consumable", [True, False])
def test_the_channel_class_selects_the_shared_devices_and_nothing_else(consumable: bool) -> None:
    (cls,) = sim_chart.device_classes(CHANNEL)
    selectors = cls["spec"]["selectors"]
    shared = [d.to_v1() for d in shared_channel_devices(consumable, 4)]
    assert all(selectors_match(selectors, device_context("compute-domain.nvidia.com", d)) for d in shared)
    assert not any(
        selectors_match(selectors, device_context("compute-domain.nvidia.com", d)) for d in OLD_DEVICES
    )
    for old in sim_chart.device_classes({}):
        old_selectors = old["spec"]["selectors"]
        assert not any(
            selectors_match(old_selectors, device_context("compute-domain.nvidia.com", d)) for d in shared
        )
