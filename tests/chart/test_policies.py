"""The chart's ValidatingAdmissionPolicies: each is bound with [Deny] and fails closed, each component's keeps
to that component's service account, the claim policies come and go with `admission.enabled`, and every
expression of every rendered policy compiles in the simulated API server (which refuses what it cannot run),
so the policies the component tests rely on are the chart's own.
"""

from __future__ import annotations

from typing import Any

import pytest

from cdctl.domain.computedomains import DRIVER_NAME
from cdctl.sim.apiserver.store import ObjectStore
from cdctl.sim.rack import chart as sim_chart
from tests.chart.conftest import NAMESPACE, SCENARIOS, find, one, render_objects

GROUP = "admissionregistration.k8s.io"
CLAIMS = {"claims", "computedomains"}
DRIVER_MANAGED = {"resourceslices", "kubelet-plugin-nodes", "controller", "daemon-pods"} | CLAIMS
HOST_MANAGED = {"resourceslices", "controller"} | CLAIMS


def _policies(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {
        o["metadata"]["name"].removesuffix("-policy-cdctl"): o
        for o in find(objects, "ValidatingAdmissionPolicy")
    }


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_every_rendered_policy_compiles_in_the_simulator(
    rendered: dict[str, list[dict[str, Any]]], scenario: str
) -> None:
    store = ObjectStore()
    for obj in rendered[scenario]:
        if obj["kind"] == "ValidatingAdmissionPolicy":
            store.create(store.type_of(GROUP, "validatingadmissionpolicies"), "", obj)
    for obj in rendered[scenario]:
        if obj["kind"] == "ValidatingAdmissionPolicyBinding":
            store.create(store.type_of(GROUP, "validatingadmissionpolicybindings"), "", obj)
    assert set(store.policies.policies) == {
        o["metadata"]["name"] for o in find(rendered[scenario], "ValidatingAdmissionPolicy")
    }
    assert {b.policy for b in store.policies.bindings.values()} == set(store.policies.policies)


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_every_policy_is_bound_to_deny_and_fails_closed(
    rendered: dict[str, list[dict[str, Any]]], scenario: str
) -> None:
    objects = rendered[scenario]
    policies = _policies(objects)
    host_managed = "host-managed" in scenario
    assert set(policies) == (HOST_MANAGED if host_managed else DRIVER_MANAGED)
    for policy in policies.values():
        name = policy["metadata"]["name"]
        binding = one(objects, "ValidatingAdmissionPolicyBinding", name)
        assert binding["spec"] == {"policyName": name, "validationActions": ["Deny"]}
        assert policy["spec"]["failurePolicy"] == "Fail"
        assert binding["metadata"]["labels"] == policy["metadata"]["labels"]
        assert policy["metadata"]["labels"]["app.kubernetes.io/component"] in {
            "controller",
            "kubelet-plugin",
            "daemon",
            "admission",
        }
        for expression in _expressions(policy):
            assert "[?" not in expression and ".?" not in expression and "orValue" not in expression


def _expressions(policy: dict[str, Any]) -> list[str]:
    spec = policy["spec"]
    found = [c["expression"] for c in spec.get("matchConditions") or []]
    found += [v["expression"] for v in spec.get("variables") or []]
    for validation in spec["validations"]:
        found += [
            validation["expression"],
            *([validation["messageExpression"]] if "messageExpression" in validation else []),
        ]
    return found


def test_each_policy_keeps_to_its_components_accounts(rendered: dict[str, list[dict[str, Any]]]) -> None:
    policies = _policies(rendered["driver-managed"])
    account = f"system:serviceaccount:{NAMESPACE}"
    conditions = {
        name: p["spec"]["matchConditions"][0]["expression"]
        for name, p in policies.items()
        if name not in CLAIMS
    }
    assert conditions["resourceslices"] == f'request.userInfo.username in ["{account}:cdctl-kubelet-plugin"]'
    assert conditions["kubelet-plugin-nodes"] == conditions["resourceslices"]
    assert conditions["controller"] == f'request.userInfo.username in ["{account}:cdctl-controller"]'
    daemons = [
        f"system:serviceaccount:{ns}:compute-domain-daemon-service-account" for ns in (NAMESPACE, "team-a")
    ]
    assert conditions["daemon-pods"] == "request.userInfo.username in " + str(daemons).replace(
        "'", '"'
    ).replace(", ", ",")


def test_the_slice_policy_keeps_the_plugin_to_its_driver(rendered: dict[str, list[dict[str, Any]]]) -> None:
    policy = _policies(rendered["default"])["resourceslices"]
    assert any(
        f"object.spec.driver == '{DRIVER_NAME}'" in v["expression"] for v in policy["spec"]["validations"]
    )


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_the_simulators_policies_match_helm(helm_chart: Any, scenario: str) -> None:
    values = SCENARIOS[scenario]
    helm = [
        {**o, "metadata": {k: v for k, v in o["metadata"].items() if k != "labels"}}
        for o in render_objects(helm_chart, values)
        if o["kind"].startswith("ValidatingAdmissionPolicy")
    ]
    ours = [
        {**o, "metadata": {k: v for k, v in o["metadata"].items() if k != "labels"}}
        for o in sim_chart.admission_policies(values, namespace=NAMESPACE)
    ]
    assert ours == helm


def test_the_claim_policies_apply_to_every_writer_and_follow_admission_enabled(helm_chart: Any) -> None:
    policies = _policies(render_objects(helm_chart, {}))
    for name in CLAIMS:
        conditions = policies[name]["spec"].get("matchConditions") or []
        assert all(c["name"] != "isServiceAccount" for c in conditions)
    off = _policies(render_objects(helm_chart, {"admission": {"enabled": False}}))
    assert set(off) == DRIVER_MANAGED - CLAIMS
    assert sim_chart.admission_policies({"admission": {"enabled": False}}, namespace=NAMESPACE) == [
        o
        for o in sim_chart.admission_policies({}, namespace=NAMESPACE)
        if "-policy-" in o["metadata"]["name"] and o["metadata"]["name"].split("-policy-")[0] not in CLAIMS
    ]
