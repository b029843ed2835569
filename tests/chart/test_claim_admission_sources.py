"""Who may write what, and what real installs write: the chart's claim policies on daemon configs (the
controller's templates, the resource-claim controller's claims for pods, nobody else's), on ComputeDomains,
with channel isolation switched on through its hook, and on the claims and templates NVIDIA's Go driver, its
demos and the deployments this project follows use, which pass (the controller's own templates included). A
tenant going through the API server with its own token gets the refusal as a client sees it.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from helm_python import chart as hc

from cdctl.controller import render
from cdctl.k8s.errors import KubeApiError
from cdctl.k8s.plugincluster import connect, disconnect
from cdctl.sim.apiserver.identity import ADMIN, service_account_token, user_for_token
from cdctl.sim.apiserver.server import ApiServer
from cdctl.sim.rack import chart as sim_chart
from tests.chart.claimadmission import (
    CONTROLLER,
    KCM,
    KCM_ITSELF,
    TENANT,
    TENANT_NS,
    UID,
    AdmissionCluster,
    channel,
    claim,
    config,
    daemon,
    fixture,
    from_pod,
    plugin_words,
    template,
)
from tests.chart.conftest import CHART_DIR, NAMESPACE, render_objects

HOST_MANAGED = {"featureGates": {"HostManagedIMEX": True}}
UNKNOWN_FIELD = 'error decoding config parameters: strict decoding error: unknown field "unexpectedField"'
OWN_LABEL = {"labels": {"resource.nvidia.com/computeDomain": UID}}
DAEMON_WORDS = (
    "parameters.kind: a ComputeDomainDaemonConfig may only come from the cdctl controller "
    f"(system:serviceaccount:{NAMESPACE}:cdctl-controller)"
)


@pytest.fixture(scope="module")
def driver_managed(helm_chart: hc.Chart) -> list[dict[str, Any]]:
    return render_objects(helm_chart, {})


@pytest.fixture(scope="module")
def host_managed(helm_chart: hc.Chart) -> list[dict[str, Any]]:
    return render_objects(helm_chart, HOST_MANAGED)


@pytest.fixture
def cluster(driver_managed: list[dict[str, Any]]) -> AdmissionCluster:
    return AdmissionCluster(driver_managed)


@pytest.fixture
def hm_cluster(host_managed: list[dict[str, Any]]) -> AdmissionCluster:
    return AdmissionCluster(host_managed)


# ---- daemon configs --------------------------------------------------------------------------------------
def test_daemon_templates_come_only_from_the_controller(cluster: AdmissionCluster) -> None:
    body = template(daemon(), name="daemon", metadata=OWN_LABEL)  # the controller policy wants its label
    for user in (TENANT, ADMIN, KCM):
        message = cluster.refusal(body, user=user, namespace=NAMESPACE)
        assert message == (
            f"ResourceClaimTemplate {NAMESPACE}/daemon: spec.spec.devices.config[0].opaque.{DAEMON_WORDS}, "
            f"not from {user.username}"
        )
    cluster.write(body, user=CONTROLLER, namespace=NAMESPACE)
    assert cluster.store.policies.admitted[("claims-policy-cdctl", CONTROLLER.username)] == 1


def test_daemon_claims_come_from_the_controller_or_from_a_pods_template(cluster: AdmissionCluster) -> None:
    body = claim(daemon(), name="d0", metadata=from_pod())
    cluster.write(body, user=KCM)  # kube-controller-manager's resource-claim controller, for a pod
    cluster.write({**body, "metadata": {**body["metadata"], "name": "d1"}}, user=KCM_ITSELF)
    cluster.write(claim(daemon(), name="d2"), user=CONTROLLER)
    # A claim of the resource-claim controller's that is not for a pod, and a tenant wearing a pod's metadata.
    message = cluster.refusal(claim(daemon(), name="d3"), user=KCM)
    assert message == (
        f"ResourceClaim {TENANT_NS}/d3: spec.devices.config[0].opaque.{DAEMON_WORDS}, or from the "
        f"resource-claim controller for a pod's ResourceClaimTemplate, not from {KCM.username}"
    )
    # A compromised daemon pod's own token is no better than a tenant's.
    daemon_pod = user_for_token(
        service_account_token(NAMESPACE, "compute-domain-daemon-service-account", pod="d", node="n1")
    )
    for user in (TENANT, ADMIN, daemon_pod):
        assert cluster.refusal({**body, "metadata": {**body["metadata"], "name": "d4"}}, user=user).endswith(
            f"not from {user.username}"
        )
    owned_by_a_deployment = from_pod()
    owned_by_a_deployment["ownerReferences"][0]["kind"] = "ReplicaSet"
    assert "may only come from" in cluster.refusal(
        claim(daemon(), name="d5", metadata=owned_by_a_deployment), user=KCM
    )


def test_the_index_of_the_daemon_config_is_named(cluster: AdmissionCluster) -> None:
    body = claim(configs=[config(channel()), config(daemon(), requests=["daemon"])], name="mixed")
    message = cluster.refusal(body, user=TENANT)
    assert message.startswith(
        f"ResourceClaim {TENANT_NS}/mixed: spec.devices.config[1].opaque.parameters.kind"
    )


def test_under_host_managed_no_one_writes_a_daemon_config(hm_cluster: AdmissionCluster) -> None:
    words = plugin_words(daemon(), host_managed=True)
    for body, user in (
        (template(daemon(), metadata=OWN_LABEL), CONTROLLER),
        (claim(daemon(), metadata=from_pod()), KCM),
    ):
        assert hm_cluster.refusal(body, user=user).endswith(f"opaque.parameters.kind: {words}")


# ---- ComputeDomains --------------------------------------------------------------------------------------
def domain(name: str, mode: str | None) -> dict[str, Any]:
    channel_spec: dict[str, Any] = {"resourceClaimTemplate": {"name": f"{name}-channel"}}
    if mode is not None:
        channel_spec["allocationMode"] = mode
    return {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomain",
        "metadata": {"name": name},
        "spec": {"numNodes": 0, "channel": channel_spec},
    }


def test_host_managed_refuses_a_domain_of_all_channels_in_the_plugins_words(
    hm_cluster: AdmissionCluster, cluster: AdmissionCluster
) -> None:
    words = plugin_words(channel(allocationMode="All"), host_managed=True)
    message = hm_cluster.refusal(domain("all", "All"), user=TENANT)
    assert message == f"ComputeDomain {TENANT_NS}/all: spec.channel.allocationMode: {words}"
    hm_cluster.write(domain("single", "Single"), user=TENANT)
    hm_cluster.write(domain("default", None), user=TENANT)
    cluster.write(domain("all", "All"), user=TENANT)  # driver-managed: All is a mode it serves


# ---- channel isolation: the hook -------------------------------------------------------------------------
def _isolating(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rendered policies with their channelIsolation constant on, as `imex.isolation: channel` would."""
    switched = copy.deepcopy(objects)
    for obj in switched:
        for variable in obj.get("spec", {}).get("variables") or []:
            if obj["kind"] == "ValidatingAdmissionPolicy" and variable["name"] == "channelIsolation":
                assert variable["expression"] == "false"
                variable["expression"] = "true"
    return switched


def test_channel_isolation_refuses_all_channels_once_switched_on(
    driver_managed: list[dict[str, Any]],
) -> None:
    isolating = AdmissionCluster(_isolating(driver_managed))
    words = (
        "allocationMode All is not supported with channel isolation: it would hand one tenant every channel"
    )
    message = isolating.refusal(claim(channel(allocationMode="All")), user=TENANT)
    assert (
        message
        == f"ResourceClaim {TENANT_NS}/c: spec.devices.config[0].opaque.parameters.allocationMode: {words}"
    )
    assert isolating.refusal(domain("all", "All"), user=TENANT).endswith(f"allocationMode: {words}")
    isolating.write(claim(channel(allocationMode="Single")), user=TENANT)
    isolating.write(domain("single", "Single"), user=TENANT)


def test_the_hook_follows_imex_isolation() -> None:
    """Helm and the simulator's mirror both turn the constant on from
    `resources.computeDomains.imex.isolation: channel` alone, and leave it off for `domain` and by default."""
    loaded = hc.Chart.load(CHART_DIR)
    try:
        for values, expected in (
            ({"resources": {"computeDomains": {"imex": {"isolation": "channel"}}}}, "true"),
            ({"resources": {"computeDomains": {"imex": {"isolation": "domain"}}}}, "false"),
            ({}, "false"),
        ):
            ours = sim_chart.admission_policies(values, namespace=NAMESPACE)
            helm = render_objects(loaded, values)
            for objects in (ours, helm):
                constants = {
                    v["name"]: v["expression"]
                    for o in objects
                    if o["kind"] == "ValidatingAdmissionPolicy"
                    for v in o["spec"].get("variables") or []
                }
                assert constants["channelIsolation"] == expected
    finally:
        loaded.close()
    with pytest.raises(sim_chart.ChartValuesError):
        sim_chart.merged_values({"resources": {"computeDomains": {"imex": {"isolation": "channels"}}}})


# ---- what real installs write ----------------------------------------------------------------------------
def test_the_go_drivers_and_deployed_templates_pass(
    cluster: AdmissionCluster, hm_cluster: AdmissionCluster
) -> None:
    (workload,) = fixture("go-workload-claim-template.yaml")
    (rack,) = fixture("coreweave-rack-claim-template.yaml")
    for target in (cluster, hm_cluster):
        target.write(workload, user=CONTROLLER)
        target.write(rack, user=CONTROLLER)
    (daemon_template,) = fixture("go-daemon-claim-template.yaml")
    cluster.write(daemon_template, user=CONTROLLER)
    assert "may only come from the cdctl controller" in cluster.refusal(daemon_template, user=ADMIN)
    assert "daemon claims are disabled under HostManagedIMEX" in hm_cluster.refusal(
        daemon_template, user=CONTROLLER
    )


def test_the_go_drivers_unknown_field_claim_is_refused_in_its_prepare_words(
    cluster: AdmissionCluster,
) -> None:
    (bad,) = fixture("go-bats-unknown-field-claim.yaml")
    message = cluster.refusal(bad, user=TENANT)
    assert message == (
        f"ResourceClaim {TENANT_NS}/batssuite-rc-bad-opaque-config: spec.devices.config[0].opaque.parameters."
        f"unexpectedField: {UNKNOWN_FIELD}"
    )


def test_the_demo_and_design_domains_and_their_controller_templates(
    cluster: AdmissionCluster, hm_cluster: AdmissionCluster
) -> None:
    single, every = fixture("go-demo-computedomains.yaml")
    (host_managed_domain,) = fixture("hostmanaged-computedomain.yaml")
    for target, domains in ((cluster, (single, every)), (hm_cluster, (single, host_managed_domain))):
        for body in domains:
            created = target.write(body, user=TENANT)
            for version in ("v1", "v1beta2", "v1beta1"):
                made = render.workload_claim_template(created, version)
                made["metadata"]["name"] += f"-{version}"
                target.write(made, user=CONTROLLER)
        if target is cluster:
            target.write(render.daemon_claim_template(created, NAMESPACE, "v1"), user=CONTROLLER)
    assert "not supported with HostManagedIMEX" in hm_cluster.refusal(every, user=TENANT)


async def test_a_tenant_sees_the_refusal_through_the_api(
    tmp_path: Path, driver_managed: list[dict[str, Any]]
) -> None:
    (bad,) = fixture("go-bats-unknown-field-claim.yaml")
    beta = copy.deepcopy(bad)
    beta["apiVersion"] = "resource.k8s.io/v1beta1"
    beta["spec"]["devices"]["requests"] = [
        {"name": "chan", "deviceClassName": "compute-domain-default-channel.nvidia.com"}
    ]
    async with ApiServer() as server:
        server.store.create(server.store.type_of("", "namespaces"), "", {"metadata": {"name": TENANT_NS}})
        assert server.load_policies(driver_managed) > 0
        token = service_account_token(TENANT_NS, "trainer")
        api = await connect(str(server.write_kubeconfig(tmp_path / "kc", token)), 0, 0)
        try:
            path = f"/apis/resource.k8s.io/v1beta1/namespaces/{TENANT_NS}/resourceclaims"
            with pytest.raises(KubeApiError) as caught:
                await api.create(path, beta)
            good = copy.deepcopy(beta)
            good["metadata"]["name"] = "good"
            parameters = good["spec"]["devices"]["config"][0]["opaque"]["parameters"]
            del parameters["unexpectedField"]
            parameters["domainID"] = UID  # the fixture's "not-needed-for-test" is no uid
            await api.create(path, good)
        finally:
            await disconnect(api)
    assert caught.value.status == 422
    assert (
        "ValidatingAdmissionPolicy 'claims-policy-cdctl' with binding 'claims-policy-cdctl' denied request: "
        f"ResourceClaim {TENANT_NS}/batssuite-rc-bad-opaque-config: spec.devices.config[0].opaque.parameters."
        f"unexpectedField: {UNKNOWN_FIELD}"
    ) in str(caught.value)
