"""The chart's monitoring and hygiene: ServiceMonitor/PodMonitor, PrometheusRule and Grafana dashboard (all
off by default), every metric their PromQL reads listed in docs/metrics.md (whose table the scrape tests hold
to the components' real /metrics), controller anti-affinity and PodDisruptionBudget with more than one
replica, the `helm test` pod, and `helm lint --strict` (the embedded Helm's lint) clean with all of it on.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from helm_python import chart as hc

from tests.chart.conftest import CHART_DIR, NAMESPACE, find, one, render_objects
from tests.chart.test_docs import ROOT, _set_value
from tests.docs.metricsdocs import promql_metrics, queryable_names

DASHBOARD = CHART_DIR / "dashboards" / "cdctl.json"
ALL_ON: dict[str, Any] = {
    "controller": {"replicas": 2, "leaderElection": {"enabled": True}},
    "monitoring": {
        "labels": {"release": "kube-prometheus"},
        "podMonitor": {"enabled": True},
        "serviceMonitor": {"enabled": True},
        "prometheusRule": {"enabled": True},
        "grafanaDashboard": {"enabled": True},
    },
}
MONITORING_KINDS = {"PodMonitor", "ServiceMonitor", "PrometheusRule"}


def dashboard_exprs() -> list[str]:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    return [target["expr"] for panel in panels for target in panel["targets"]]


def rule_exprs(objects: list[dict[str, Any]]) -> dict[str, str]:
    rule = one(objects, "PrometheusRule")
    return {r["alert"]: r["expr"] for group in rule["spec"]["groups"] for r in group["rules"]}


def test_the_promql_scan_finds_metric_names_and_nothing_else() -> None:
    expr = (
        "histogram_quantile(0.99, sum by (le, instance)"
        ' (rate(a_seconds_bucket{op="x",le!="1"}[$__rate_interval])))'
        " / ignoring(job) b_total offset 5m > 0.5 or absent(c_info) and on (pod) d"
    )
    assert promql_metrics(expr) == {"a_seconds_bucket", "b_total", "c_info", "d"}


def test_monitoring_is_off_by_default(helm_chart: hc.Chart) -> None:
    objects = render_objects(helm_chart)
    assert not [o for o in objects if o["kind"] in MONITORING_KINDS]
    assert not find(objects, "ConfigMap")
    assert not find(objects, "PodDisruptionBudget")
    statefulset = one(objects, "StatefulSet")
    assert "affinity" not in statefulset["spec"]["template"]["spec"]


def test_every_metric_the_dashboard_and_alerts_read_is_documented_and_so_scraped(
    helm_chart: hc.Chart,
) -> None:
    known = queryable_names()
    alerts = rule_exprs(render_objects(helm_chart, ALL_ON))
    assert set(alerts) == {"CdctlComputeDomainNotReady", "CdctlPrepareErrors", "CdctlNoLeader"}
    exprs = [*dashboard_exprs(), *alerts.values()]
    assert len(exprs) >= 15
    for expr in exprs:
        names = promql_metrics(expr)
        assert names, expr
        assert names <= known, f"{expr}: {sorted(names - known)} not in docs/metrics.md"
    # What the issue asks the dashboard to show, by the metric that shows it.
    read = set().union(*map(promql_metrics, dashboard_exprs()))
    for metric in (
        "cdctl_controller_domain_formation_seconds_bucket",
        "nvidia_dra_request_duration_seconds_bucket",
        "nvidia_dra_node_prepare_errors_total",
        "nvidia_dra_compute_domain_info",
        "cdctl_controller_reconcile_errors_total",
        "cdctl_event_log_size_bytes",
    ):
        assert metric in read, metric


def test_the_alerts_say_what_the_docs_say(helm_chart: hc.Chart) -> None:
    rule = one(render_objects(helm_chart, ALL_ON), "PrometheusRule")
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus"
    rules = {r["alert"]: r for r in rule["spec"]["groups"][0]["rules"]}
    assert rules["CdctlComputeDomainNotReady"]["for"] == "10m"
    assert "domain_name" in rules["CdctlComputeDomainNotReady"]["expr"]
    assert rules["CdctlPrepareErrors"]["expr"].rstrip().endswith("> 0.05")
    assert rules["CdctlNoLeader"]["labels"]["severity"] == "critical"
    changed = {
        "monitoring": {"prometheusRule": {"enabled": True, "notReadyFor": "30m", "prepareErrorRatio": 0.2}}
    }
    rules = {r["alert"]: r for r in rule_exprs_objects(helm_chart, changed)}
    assert rules["CdctlComputeDomainNotReady"]["for"] == "30m"
    assert rules["CdctlPrepareErrors"]["expr"].rstrip().endswith("> 0.2")


def rule_exprs_objects(helm_chart: hc.Chart, values: dict[str, Any]) -> list[dict[str, Any]]:
    rule = one(render_objects(helm_chart, values), "PrometheusRule")
    return [r for group in rule["spec"]["groups"] for r in group["rules"]]


def test_monitors_scrape_each_components_http_port_and_path(helm_chart: hc.Chart) -> None:
    values = {**ALL_ON, "kubeletPlugin": {"metricsPath": "/plugin-metrics"}}
    objects = render_objects(helm_chart, values)
    for kind, endpoints in (("PodMonitor", "podMetricsEndpoints"), ("ServiceMonitor", "endpoints")):
        monitors = {o["metadata"]["name"]: o for o in find(objects, kind)}
        assert set(monitors) == {"cdctl-controller", "cdctl-kubelet-plugin"}
        plugin = monitors["cdctl-kubelet-plugin"]
        assert plugin["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"] == "kubelet-plugin"
        assert plugin["spec"][endpoints] == [{"port": "http", "path": "/plugin-metrics", "interval": "30s"}]
        assert monitors["cdctl-controller"]["spec"][endpoints][0]["path"] == "/metrics"
    # The ServiceMonitors' Services exist and name the port they scrape.
    for name in ("cdctl-controller", "cdctl-kubelet-plugin"):
        service = one(objects, "Service", name)
        assert service["spec"]["clusterIP"] == "None"
        assert [p["name"] for p in service["spec"]["ports"]] == ["http"]


def test_the_dashboard_ships_as_a_labelled_configmap_and_as_a_file(helm_chart: hc.Chart) -> None:
    values = {"monitoring": {"grafanaDashboard": {"enabled": True, "namespace": "grafana"}}}
    configmap = one(render_objects(helm_chart, values), "ConfigMap")
    assert configmap["metadata"]["namespace"] == "grafana"
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(configmap["data"]["cdctl.json"]) == json.loads(DASHBOARD.read_text())


def test_two_replicas_get_anti_affinity_and_a_disruption_budget(helm_chart: hc.Chart) -> None:
    objects = render_objects(helm_chart, ALL_ON)
    budget = one(objects, "PodDisruptionBudget")
    assert budget["spec"]["maxUnavailable"] == 1
    selector = budget["spec"]["selector"]["matchLabels"]
    statefulset = one(objects, "StatefulSet")
    assert selector == statefulset["spec"]["selector"]["matchLabels"]
    anti = statefulset["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
    [preferred] = anti["preferredDuringSchedulingIgnoredDuringExecution"]
    assert preferred["podAffinityTerm"] == {
        "labelSelector": {"matchLabels": selector},
        "topologyKey": "kubernetes.io/hostname",
    }

    hard = {"controller": {**ALL_ON["controller"], "podAntiAffinity": "hard"}}
    spec = one(render_objects(helm_chart, hard), "StatefulSet")["spec"]["template"]["spec"]
    assert spec["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0][
        "topologyKey"
    ] == ("kubernetes.io/hostname")
    own = {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}, "nodeAffinity": {}}
    mine = {"controller": {**ALL_ON["controller"], "affinity": own}}
    spec = one(render_objects(helm_chart, mine), "StatefulSet")["spec"]["template"]["spec"]
    assert spec["affinity"] == own  # the operator's own anti-affinity wins


def test_the_helm_test_pod_is_a_test_hook_that_asks_every_component(helm_chart: hc.Chart) -> None:
    pod = one(render_objects(helm_chart, ALL_ON), "Pod", "cdctl-probe")
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    assert pod["spec"]["restartPolicy"] == "Never"
    assert pod["spec"]["automountServiceAccountToken"] is False
    containers = {c["name"]: c for c in pod["spec"]["containers"]}
    controller = containers["controller"]
    assert controller["command"] == ["cdctl", "probe"]
    assert "--min-addresses=2" in controller["args"]
    assert f"--get=http://cdctl-controller.{NAMESPACE}.svc:8080/healthz" in controller["args"]
    assert "--expect=cdctl_leader" in controller["args"]
    plugins = containers["kubelet-plugins"]
    assert f"--metrics=http://cdctl-kubelet-plugin.{NAMESPACE}.svc:8081/metrics" in plugins["args"]
    assert not find(render_objects(helm_chart, {"helmTest": {"enabled": False}}), "Pod")


@pytest.mark.parametrize("values", [ALL_ON, {**ALL_ON, "controller": {"replicas": 1}}], ids=["two", "one"])
def test_lint_strict_is_clean_with_monitoring_and_tests(values: dict[str, Any]) -> None:
    report = hc.lint(CHART_DIR, values, strict=True, namespace=NAMESPACE, kube_version="v1.32.0")
    assert report["errors"] == []
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


def test_bad_monitoring_values_are_refused_by_the_schema() -> None:
    report = hc.lint(
        CHART_DIR,
        {"monitoring": {"prometheusRule": {"notReadyFor": "ten minutes"}}},
        strict=True,
        namespace=NAMESPACE,
    )
    assert any("notReadyFor" in str(m["error"]) for m in report["messages"]) or any(
        "notReadyFor" in e for e in report["errors"]
    )


def test_every_helm_command_of_the_metrics_doc_renders_what_it_says(helm_chart: hc.Chart) -> None:
    commands = [
        line.strip()
        for line in (ROOT / "docs" / "metrics.md").read_text().splitlines()
        if line.startswith("helm ")
    ]
    assert len(commands) == 4
    wanted = {
        "podMonitor": "PodMonitor",
        "serviceMonitor": "ServiceMonitor",
        "prometheusRule": "PrometheusRule",
    }
    wanted["grafanaDashboard"] = "ConfigMap"
    for command in commands:
        assert "./charts/cdctl" in command and "--namespace cdctl-system" in command
        values: dict[str, Any] = {}
        [assignment] = command.split("--set ")[1:]
        _set_value(values, assignment.strip())
        [key] = values["monitoring"]
        assert find(render_objects(helm_chart, values), wanted[key]), command
