"""A values file written for NVIDIA's Go chart installs cdctl (docs/upgrade-from-nvidia.md): the Go chart's
names that map are read, its GPU half is ignored, the names without a counterpart are refused naming the
document, and what the chart renders (FEATURE_GATES, IMEX_MODE) is what the components accept."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from helm_python import chart as hc
from helm_python.errors import HelmRenderError

from cdctl.api.gates import parse_feature_gates
from cdctl.sim.rack import chart as sim_chart
from tests.chart.conftest import CHART_DIR, NAMESPACE, env_of, find, one, render_objects
from tests.chart.test_render import NEWEST, _validate_strict

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "upstream" / "values-v0.5.0.yaml"
DOC = "docs/upgrade-from-nvidia.md"
HOST_MANAGED = {
    "resources__computeDomains__imex__mode": "hostManaged",
    "featureGates__HostManagedIMEXDaemon": True,
}


def upstream_values() -> dict[str, Any]:
    values = yaml.safe_load(FIXTURE.read_text())
    assert isinstance(values, dict)
    return values


def with_changes(**paths: Any) -> dict[str, Any]:
    """The upstream values with dotted paths set (a value of None deletes the key)."""
    values = upstream_values()
    for dotted, value in paths.items():
        node = values
        *parents, leaf = dotted.split("__")
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = copy.deepcopy(value)
    return values


def plugin_container(objects: list[dict[str, Any]]) -> dict[str, Any]:
    return one(objects, "DaemonSet")["spec"]["template"]["spec"]["containers"][0]  # type: ignore[no-any-return]


def controller_container(objects: list[dict[str, Any]]) -> dict[str, Any]:
    return one(objects, "StatefulSet")["spec"]["template"]["spec"]["containers"][0]  # type: ignore[no-any-return]


def test_the_go_charts_default_values_render(helm_chart: hc.Chart) -> None:
    objects = render_objects(helm_chart, upstream_values())
    plugin = env_of(plugin_container(objects))
    assert plugin["HTTP_ENDPOINT"] == ":8081" and plugin["HEALTHCHECK_PORT"] == "51515"
    assert plugin["KUBELET_PLUGINS_DIRECTORY_PATH"] == "/var/lib/kubelet/plugins"
    assert plugin["IMEX_MODE"] == "driverManaged" and plugin["GPU_CLIQUE_LABEL_ENABLED"] == "false"
    assert plugin["LOG_VERBOSITY"] == "4"
    controller = controller_container(objects)
    assert env_of(controller)["HTTP_ENDPOINT"] == ":8080"
    tolerations = one(objects, "StatefulSet")["spec"]["template"]["spec"]["tolerations"]
    assert {"key": "CriticalAddonsOnly", "operator": "Exists"} in tolerations  # the Go chart's, kept
    assert plugin_container(objects)["securityContext"]["privileged"] is True
    assert "compute-domain-daemon.nvidia.com" in {o["metadata"]["name"] for o in find(objects, "DeviceClass")}


def test_the_rendered_feature_gates_parse_in_the_components(helm_chart: hc.Chart) -> None:
    for values, host_managed in (
        (upstream_values(), False),
        (with_changes(**HOST_MANAGED), True),
    ):
        objects = render_objects(helm_chart, values)
        for container in (plugin_container(objects), controller_container(objects)):
            env = env_of(container)
            gates = parse_feature_gates(env["FEATURE_GATES"], env["IMEX_MODE"])
            assert gates.enabled("HostManagedIMEX") is host_managed


def test_the_go_charts_host_managed_spelling_is_host_managed_mode(helm_chart: hc.Chart) -> None:
    values = with_changes(
        resources__computeDomains__imex__mode="hostManaged", featureGates__HostManagedIMEXDaemon=True
    )
    objects = render_objects(helm_chart, values)
    assert "compute-domain-daemon.nvidia.com" not in {
        o["metadata"]["name"] for o in find(objects, "DeviceClass")
    }
    ours = render_objects(helm_chart, {"featureGates": {"HostManagedIMEX": True}})
    assert {o["metadata"]["name"] for o in find(objects, "ValidatingAdmissionPolicy")} == {
        o["metadata"]["name"] for o in find(ours, "ValidatingAdmissionPolicy")
    }
    merged = sim_chart.merged_values(values, chart=CHART_DIR)
    assert sim_chart.feature_gates(merged)["HostManagedIMEX"]


def test_names_that_map_are_read(helm_chart: hc.Chart) -> None:
    values = with_changes(
        altProcDevices="/var/lib/nvml-mock/proc-devices",
        resourceApiVersion="resource.k8s.io/v1beta1",
        serviceAccount__annotations={"iam.example.com/role": "dra"},
        controller__metrics__httpEndpoint="0.0.0.0:9090",
        controller__metrics__profilePath="/debug/pprof",
        controller__podAnnotations={"a": "b"},
        controller__containers__computeDomain__env=[{"name": "X", "value": "1"}],
        kubeletPlugin__kubeletPluginsDirectoryPath="/data/kubelet/plugins",
        kubeletPlugin__metrics__computeDomainHttpEndpoint=":9091",
        kubeletPlugin__containers__computeDomains__healthcheckPort=-1,
        kubeletPlugin__containers__computeDomains__gpuCliqueLabelEnabled=True,
        kubeletPlugin__containers__computeDomains__resources={"limits": {"memory": "1Gi"}},
    )
    objects = render_objects(helm_chart, values)
    daemonset = one(objects, "DaemonSet")["spec"]["template"]["spec"]
    plugin = plugin_container(objects)
    env = env_of(plugin)
    volumes = {v["name"]: v.get("hostPath", {}).get("path") for v in daemonset["volumes"]}
    assert volumes["proc-devices"] == "/var/lib/nvml-mock/proc-devices"
    assert volumes["plugins"] == "/data/kubelet/plugins"
    assert env["CDCTL_DB"] == "/data/kubelet/plugins/compute-domain.nvidia.com/events.db"
    assert env["HTTP_ENDPOINT"] == ":9091" and env["GPU_CLIQUE_LABEL_ENABLED"] == "true"
    assert "startupProbe" not in plugin and "livenessProbe" not in plugin  # a negative port: no probe
    assert plugin["resources"] == {"limits": {"memory": "1Gi"}}
    controller = controller_container(objects)
    assert (
        env_of(controller)["HTTP_ENDPOINT"] == ":9090" and env_of(controller)["PPROF_PATH"] == "/debug/pprof"
    )
    assert env_of(controller)["X"] == "1"
    assert controller["ports"][0]["containerPort"] == 9090
    assert one(objects, "Service", "cdctl-controller")["spec"]["ports"][0]["port"] == 9090
    statefulset = one(objects, "StatefulSet")["spec"]["template"]
    assert statefulset["metadata"]["annotations"] == {"a": "b"}
    for account in find(objects, "ServiceAccount"):
        if account["metadata"]["name"].endswith(("-controller", "-kubelet-plugin")):
            assert account["metadata"]["annotations"] == {"iam.example.com/role": "dra"}
    assert {o["apiVersion"] for o in find(objects, "DeviceClass")} == {"resource.k8s.io/v1beta1"}


@pytest.mark.parametrize(
    ("changes", "needle"),
    [
        (
            {"resources__computeDomains__imex__mode": "hostManaged"},
            "requires featureGates.HostManagedIMEXDaemon",
        ),
        (
            {"resources__computeDomains__imex__mode": "driverManaged", "featureGates__HostManagedIMEX": True},
            "conflicts with featureGates.HostManagedIMEX",
        ),
        ({"featureGates__NodeLocalFabricIPC": True}, "featureGates.NodeLocalFabricIPC: not supported"),
        ({"resources__computeDomains__enabled": False}, "resources.computeDomains.enabled=false"),
        ({"resources__computeDomains__imex__hostSocketPath": "/run/imex.sock"}, "hostSocketPath"),
        ({"webhook__enabled": True}, "webhook.enabled: not applicable"),
        ({"nvidiaCDIHookPath": "/usr/bin/nvidia-cdi-hook"}, "nvidiaCDIHookPath: not applicable"),
        ({"namespaceOverride": "gpu"}, "namespaceOverride: not applicable"),
        ({"serviceAccount__create": False}, "serviceAccount.create=false"),
        ({"serviceAccount__name": "mine"}, "serviceAccount.name: not applicable"),
        ({"controller__podSecurityContext": {"runAsUser": 0}}, "controller.podSecurityContext"),
        ({"kubeletPlugin__networkPolicy__enabled": True}, "kubeletPlugin.networkPolicy.enabled"),
        ({"kubeletPlugin__metrics__enabled": False}, "kubeletPlugin.metrics.enabled=false"),
        ({"kubeletPlugin__containers__init__resources": {"limits": {"cpu": "1"}}}, "containers.init"),
        (
            {"kubeletPlugin__containers__computeDomains__securityContext": {"runAsUser": 5}},
            "only privileged maps",
        ),
        (
            {"image__repository": "registry.k8s.io/dra-driver-nvidia/dra-driver-nvidia-gpu"},
            "the Go driver's image",
        ),
    ],
)
def test_names_without_a_counterpart_are_refused_with_the_document(
    helm_chart: hc.Chart, changes: dict[str, Any], needle: str
) -> None:
    with pytest.raises(HelmRenderError) as err:
        render_objects(helm_chart, with_changes(**changes))
    assert needle in str(err.value) and DOC in str(err.value)


def test_the_gpu_half_is_accepted_and_ignored(helm_chart: hc.Chart) -> None:
    values = with_changes(
        resources__gpus__enabled=True, gpuResourcesEnabledOverride=True, consumableShares="memory",
        featureGates__ConsumableShares=True, featureGates__DRAListTypeAttributes=True,
        kubeletPlugin__containers__gpus__healthcheckPort=-1,
    )  # fmt: skip
    objects = render_objects(helm_chart, values)
    assert [c["name"] for c in one(objects, "DaemonSet")["spec"]["template"]["spec"]["containers"]] == [
        "compute-domains"
    ]
    gates = parse_feature_gates(env_of(plugin_container(objects))["FEATURE_GATES"])
    assert any("ConsumableShares=true belongs to the GPU driver" in note for note in gates.ignored)


def test_the_simulated_cluster_reads_the_go_charts_names_as_helm_does(helm_chart: hc.Chart) -> None:
    values = with_changes(
        kubeletPlugin__metrics__computeDomainHttpEndpoint=":9091",
        kubeletPlugin__containers__computeDomains__gpuCliqueLabelEnabled=True,
        **HOST_MANAGED,
    )
    assert sim_chart.http_ports(values, chart=CHART_DIR) == {"controller": 8080, "kubelet-plugin": 9091}
    helm = [o for o in render_objects(helm_chart, values) if o["kind"] == "ValidatingAdmissionPolicy"]
    sim = [o for o in sim_chart.admission_policies(values, namespace="cdctl-system", chart=CHART_DIR)]
    sim = [o for o in sim if o["kind"] == "ValidatingAdmissionPolicy"]
    assert {o["metadata"]["name"] for o in helm} == {o["metadata"]["name"] for o in sim}
    nodes = next(o for o in sim if o["metadata"]["name"].startswith("kubelet-plugin-nodes"))
    labels = next(v for v in nodes["spec"]["variables"] if v["name"] == "pluginNodeLabels")
    assert labels["expression"] == '["nvidia.com/gpu.clique"]'  # host-managed: no ComputeDomain label


def test_the_go_charts_values_lint_strictly_and_render_valid_objects(
    helm_chart: hc.Chart, crd_objects: dict[str, dict[str, Any]]
) -> None:
    values = with_changes(kubeletPlugin__containers__computeDomains__gpuCliqueLabelEnabled=True)
    report = hc.lint(CHART_DIR, values, strict=True, namespace=NAMESPACE, kube_version="v1.32.0")
    assert report["errors"] == [] and [m for m in report["messages"] if m["severity"] >= 2] == []
    for obj in render_objects(helm_chart, values):
        _validate_strict(obj, NEWEST, crd_objects)
