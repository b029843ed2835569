"""The controller's client rate limit and rack-domain values reach its environment, and rack domains add
only their own grants (Nodes read cluster-wide; ComputeDomains created and deleted, claims read, in their
namespace)."""

from __future__ import annotations

from typing import Any

import pytest
from helm_python import chart as hc
from helm_python.errors import HelmValuesError

from tests.chart.conftest import NAMESPACE, one, render_objects
from tests.chart.test_rbac import CONTROLLER, READ, _grants


def _env(objects: list[dict[str, Any]]) -> dict[str, str]:
    controller = one(objects, "StatefulSet", "cdctl-controller")
    container = controller["spec"]["template"]["spec"]["containers"][0]
    return {item["name"]: item.get("value", "") for item in container["env"]}


def test_the_default_rate_limit_suits_a_fleet_and_rack_domains_are_off(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    env = _env(rendered["default"])
    assert (env["KUBE_API_QPS"], env["KUBE_API_BURST"]) == ("100", "200")
    assert env["RACK_DOMAINS"] == "false"
    assert not {"RACK_LABEL", "RACK_DOMAIN_NAMESPACE", "RACK_DOMAIN_NAME"} & set(env)


def test_rate_limit_and_rack_domain_values_reach_the_controller(helm_chart: hc.Chart) -> None:
    values = {
        "controller": {
            "kubeApi": {"qps": 0, "burst": 50},
            "rackDomains": {
                "enabled": True,
                "label": "ds.coreweave.com/nvlink.domain",
                "namespace": "training",
                "namePattern": "rack-{rack}",
            },
        }
    }
    env = _env(render_objects(helm_chart, values))
    assert (env["KUBE_API_QPS"], env["KUBE_API_BURST"]) == ("0", "50")
    assert env["RACK_DOMAINS"] == "true"
    assert env["RACK_LABEL"] == "ds.coreweave.com/nvlink.domain"
    assert env["RACK_DOMAIN_NAMESPACE"] == "training"
    assert env["RACK_DOMAIN_NAME"] == "rack-{rack}"


def test_rack_domains_add_exactly_their_grants(rendered: dict[str, list[dict[str, Any]]]) -> None:
    without = _grants(rendered["default"])[CONTROLLER]
    with_racks = _grants(rendered["rack-domains"])[CONTROLLER]
    assert {
        key: verbs - without.get(key, set())
        for key, verbs in with_racks.items()
        if verbs - without.get(key, set())
    } == {
        ("training", "resource.nvidia.com", "computedomains"): {"create", "delete"},
        ("training", "resource.k8s.io", "resourceclaims"): READ,
    }
    host = _grants(rendered["rack-domains-host-managed"])[CONTROLLER]
    # Under HostManagedIMEX no node is labelled for a domain: the patch is only for domains made before a
    # switch of mode (controller.cleanupAfterModeSwitch); racks add reading them.
    assert host[("*", "", "nodes")] == READ | {"patch"}
    assert host[("default", "resource.nvidia.com", "computedomains")] == {"create", "delete"}
    assert _grants(rendered["host-managed"])[CONTROLLER][("*", "", "nodes")] == {"get", "list", "patch"}
    assert NAMESPACE not in {key[0] for key in with_racks if key[2] == "resourceclaims"}


@pytest.mark.parametrize(
    ("values", "where"),
    [
        ({"controller": {"kubeApi": {"qps": -1}}}, "/controller/kubeApi/qps"),
        ({"controller": {"kubeApi": {"burst": 0}}}, "/controller/kubeApi/burst"),
        ({"controller": {"rackDomains": {"enabled": "yes"}}}, "/controller/rackDomains/enabled"),
        ({"controller": {"rackDomains": {"namePattern": "rack"}}}, "/controller/rackDomains/namePattern"),
        (
            {"controller": {"rackDomains": {"namePattern": "Rack-{rack}"}}},
            "/controller/rackDomains/namePattern",
        ),
        ({"controller": {"rackDomains": {"label": "/rack"}}}, "/controller/rackDomains/label"),
        (
            {"controller": {"rackDomains": {"namespace": "Not_A_Namespace"}}},
            "/controller/rackDomains/namespace",
        ),
    ],
)
def test_schema_refuses_bad_rate_limits_and_rack_settings(
    helm_chart: hc.Chart, values: dict[str, Any], where: str
) -> None:
    with pytest.raises(HelmValuesError, match=f"at '{where}'"):
        helm_chart.validate_schema(values)
