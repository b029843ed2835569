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
    env = _env(render_objects(helm_chart, {}))  # the plugin's default is domain: its pod spec is unchanged
    assert not {"IMEX_ISOLATION", "CHANNEL_SLOTS", "CHANNEL_CAPACITY", "IMEX_CHANNEL_COUNT"} & set(env)


def test_the_plugin_is_told_the_isolation_and_its_channel_capacity(helm_chart: hc.Chart) -> None:
    values = {
        "resources": {"computeDomains": {"imex": {"isolation": "channel"}, "imexChannelCount": 16}},
        "kubeletPlugin": {"channelSlots": 6, "channelCapacity": "slots"},
    }
    env = _env(render_objects(helm_chart, values))
    got = (env["IMEX_ISOLATION"], env["CHANNEL_SLOTS"], env["CHANNEL_CAPACITY"], env["IMEX_CHANNEL_COUNT"])
    assert got == ("channel", "6", "slots", "16")


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


@pytest.mark.parametrize("host_managed", [False, True])
def test_admission_and_prepare_refuse_all_channels_in_the_same_words(
    helm_chart: hc.Chart, host_managed: bool
) -> None:
    """Under channel isolation, host-managed or not, the claim policy and Prepare both give channel
    isolation's reason for allocationMode All (not HostManagedIMEX's one-channel-per-node one)."""
    from cdctl.api.configs import decode_config
    from cdctl.domain.errors import PermanentError
    from cdctl.plugin.channels import ALL_REFUSED, check_channel_config
    from cdctl.plugin.preparesettings import check_host_managed_config
    from tests.chart.claimadmission import TENANT, TENANT_NS, AdmissionCluster, channel, claim
    from tests.chart.test_claim_admission_sources import domain

    values = {**CHANNEL, "featureGates": {"HostManagedIMEX": host_managed}}
    cluster = AdmissionCluster(render_objects(helm_chart, values))
    message = cluster.refusal(claim(channel(allocationMode="All")), user=TENANT)
    field = "spec.devices.config[0].opaque.parameters.allocationMode"
    assert message == f"ResourceClaim {TENANT_NS}/c: {field}: {ALL_REFUSED}"
    assert cluster.refusal(domain("all", "All"), user=TENANT).endswith(
        f"spec.channel.allocationMode: {ALL_REFUSED}"
    )
    decoded = decode_config(channel(allocationMode="All"), strict=True, obj="c")
    with pytest.raises(PermanentError) as caught:
        if host_managed:
            check_host_managed_config(decoded, channel_isolation=True)
        check_channel_config(decoded.all_channels)  # type: ignore[union-attr]
    assert str(caught.value) == ALL_REFUSED
    cluster.write(claim(channel(allocationMode="Single")), user=TENANT)


def _strip(obj: dict[str, Any]) -> dict[str, Any]:
    """What the simulator's mirror keeps of a rendered object: no Helm bookkeeping labels, no volumes."""
    import copy

    out = copy.deepcopy(obj)
    keep = {"app.kubernetes.io/component", "app.kubernetes.io/name", "app.kubernetes.io/instance"}
    for meta in (out["metadata"], (out.get("spec") or {}).get("template", {}).get("metadata") or {}):
        if "labels" in meta:
            meta["labels"] = {k: v for k, v in meta["labels"].items() if k in keep}
    if out["kind"] == "DaemonSet":
        out["metadata"]["labels"] = {"app.kubernetes.io/component": "imex-daemon"}
        pod = out["spec"]["template"]["spec"]
        for key in ("volumes", "priorityClassName"):
            pod.pop(key, None)
        for container in pod["containers"]:
            for key in ("volumeMounts", "image", "imagePullPolicy"):
                container.pop(key, None)
        out["spec"] = {k: v for k, v in out["spec"].items() if k in ("selector", "template")}
    else:
        out["metadata"]["labels"] = {"app.kubernetes.io/component": "imex-daemon"}
    return out


@pytest.mark.parametrize(
    "values",
    [
        CHANNEL,
        {**CHANNEL, "kubeletPlugin": {"nodeSelector": {"gpu": "yes"}}, "maxNodesPerIMEXDomain": 4},
    ],
)
def test_the_shared_daemon_objects_match_helm(helm_chart: hc.Chart, values: dict[str, Any]) -> None:
    from tests.chart.conftest import NAMESPACE

    rendered = render_objects(helm_chart, values)
    helm = [
        _strip(o)
        for o in rendered
        if o["metadata"].get("labels", {}).get("app.kubernetes.io/component") == "imex-daemon"
    ]
    ours = sim_chart.shared_daemon_objects(NAMESPACE, values)
    assert [o["kind"] for o in helm] == ["ServiceAccount", "Role", "RoleBinding", "DaemonSet"]
    assert ours == helm


@pytest.mark.parametrize("values", [{}, {**CHANNEL, "featureGates": {"HostManagedIMEX": True}}])
def test_no_shared_daemon_outside_channel_isolation_with_driver_managed_imex(
    helm_chart: hc.Chart, values: dict[str, Any]
) -> None:
    rendered = render_objects(helm_chart, values)
    assert not [o for o in rendered if o["metadata"]["name"].endswith("-imex-daemon")]
    assert sim_chart.shared_daemon_objects("ns", values) == []


def test_channel_isolation_makes_no_per_domain_daemon_account(helm_chart: hc.Chart) -> None:
    rendered = render_objects(helm_chart, CHANNEL)
    names = {
        o["metadata"]["name"] for o in rendered if o["kind"] in ("ServiceAccount", "Role", "ClusterRole")
    }
    assert "compute-domain-daemon-service-account" not in names
    assert "cdctl-imex-daemon" in names
