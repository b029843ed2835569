"""cdctl.sim.rack.chart (no Helm) gives the simulated cluster the CRDs and DeviceClasses a real Helm
renders."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from helm_python import chart as hc

from cdctl.sim.rack import chart as sim_chart
from tests.chart.conftest import CHART_DIR, NAMESPACE, SCENARIOS, find, render_objects

EXTRA_SCENARIOS: dict[str, dict[str, Any]] = {
    "v1beta1": {"resourceApiVersion": "v1beta1"},
    "host-managed-v1beta2": {"featureGates": {"HostManagedIMEX": True}, "resourceApiVersion": "v1beta2"},
}


def _without_helm_labels(obj: dict[str, Any]) -> dict[str, Any]:
    return {**obj, "metadata": {k: v for k, v in obj["metadata"].items() if k != "labels"}}


def test_the_chart_is_found_from_this_checkout() -> None:
    assert sim_chart.chart_dir() == CHART_DIR


@pytest.mark.parametrize("scenario", sorted({**SCENARIOS, **EXTRA_SCENARIOS}))
def test_device_classes_match_helm(helm_chart: hc.Chart, scenario: str) -> None:
    values = {**SCENARIOS, **EXTRA_SCENARIOS}[scenario]
    helm_classes = [_without_helm_labels(c) for c in find(render_objects(helm_chart, values), "DeviceClass")]
    ours = sim_chart.device_classes(values)
    assert sorted(ours, key=lambda c: c["metadata"]["name"]) == sorted(
        helm_classes, key=lambda c: c["metadata"]["name"]
    )


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_daemon_service_accounts_match_helm(helm_chart: hc.Chart, scenario: str) -> None:
    """The rack creates these so the daemon pods pass ServiceAccount admission, as after `helm install`."""
    values = SCENARIOS[scenario]
    helm_accounts = [
        {"name": sa["metadata"]["name"], "namespace": sa["metadata"]["namespace"]}
        for sa in find(render_objects(helm_chart, values), "ServiceAccount")
        if sa["metadata"]["labels"].get("app.kubernetes.io/component") == "daemon"
    ]
    ours = [sa["metadata"] for sa in sim_chart.daemon_service_accounts(NAMESPACE, values)]
    assert ours == helm_accounts
    merged = sim_chart.merged_values(values)
    assert bool(ours) != (
        sim_chart.feature_gates(merged)["HostManagedIMEX"] or sim_chart.channel_isolation(merged)
    )


def test_crds_match_helm(helm_chart: hc.Chart) -> None:
    helm_crds = [
        document
        for entry in sorted(helm_chart.crds, key=lambda e: e["name"])
        for document in yaml.safe_load_all(entry["data"])
        if document is not None
    ]
    assert sim_chart.crds() == helm_crds


def test_bootstrap_objects_are_crds_then_device_classes() -> None:
    objects = sim_chart.cluster_bootstrap_objects()
    assert [o["kind"] for o in objects] == ["CustomResourceDefinition"] * 2 + ["DeviceClass"] * 2
    host_managed = sim_chart.cluster_bootstrap_objects({"featureGates": {"HostManagedIMEX": True}})
    assert [o["metadata"]["name"] for o in host_managed if o["kind"] == "DeviceClass"] == [
        "compute-domain-default-channel.nvidia.com"
    ]
    older = sim_chart.cluster_bootstrap_objects(resource_api_version="resource.k8s.io/v1beta1")
    assert {o["apiVersion"] for o in older if o["kind"] == "DeviceClass"} == {"resource.k8s.io/v1beta1"}


def test_feature_gates_follow_the_host_managed_override() -> None:
    assert sim_chart.feature_gates({"featureGates": {}}) == dict(sim_chart.GATE_DEFAULTS)
    gates = sim_chart.feature_gates(
        {"featureGates": {"HostManagedIMEX": True, "IMEXDaemonsWithDNSNames": True}}
    )
    assert gates == {
        "IMEXDaemonsWithDNSNames": False,
        "ComputeDomainCliques": False,
        "CrashOnNVLinkFabricErrors": True,
        "HostManagedIMEX": True,
    }


def test_gate_conflict_is_refused_like_helm_does() -> None:
    with pytest.raises(
        sim_chart.ChartValuesError, match="ComputeDomainCliques requires IMEXDaemonsWithDNSNames"
    ):
        sim_chart.device_classes({"featureGates": {"IMEXDaemonsWithDNSNames": False}})


def test_values_merge_like_helm(helm_chart: hc.Chart) -> None:
    overrides = {"controller": {"leaderElection": {"enabled": True}}, "procDevicesPath": None}
    ours = sim_chart.merged_values(overrides)
    assert ours["controller"]["leaderElection"] == {
        "enabled": True,
        "leaseDuration": "3s",
        "renewDeadline": "2s",
        "retryPeriod": "500ms",
    }
    assert ours == helm_chart.merge_values(overrides)


def test_a_missing_chart_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(sim_chart.ChartError, match=r"values\.yaml"):
        sim_chart.device_classes(chart=tmp_path)
    (tmp_path / "crds").mkdir()
    with pytest.raises(sim_chart.ChartError, match="no CustomResourceDefinitions"):
        sim_chart.crds(tmp_path)


@pytest.mark.parametrize(
    "values",
    [
        {},
        {"kubeletPlugin": {"affinity": None}},
        {"kubeletPlugin": {"affinity": None, "nodeSelector": {"gpu": "yes"}, "tolerations": []}},
    ],
)
def test_plugin_placement_matches_helm(helm_chart: hc.Chart, values: dict[str, Any]) -> None:
    (daemonset,) = find(render_objects(helm_chart, values), "DaemonSet")
    pod = daemonset["spec"]["template"]["spec"]
    helm = {k: pod[k] for k in ("nodeSelector", "tolerations", "affinity") if k in pod}
    assert sim_chart.plugin_placement(values) == helm
