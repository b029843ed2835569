"""Resource API version choice and conversion of our v1-shaped claim templates."""

from __future__ import annotations

import pytest

from cdctl.k8s.discovery import NoResourceApiError, choose_resource_version, convert_claim_template
from cdctl.k8s.resources import COMPUTE_DOMAINS, NODES, resource_claim_templates

TEMPLATE = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceClaimTemplate",
    "metadata": {"name": "t", "namespace": "n"},
    "spec": {
        "spec": {
            "devices": {
                "requests": [{"name": "channel", "exactly": {"deviceClassName": "c.example.com"}}],
                "config": [{"requests": ["channel"], "opaque": {"driver": "d", "parameters": {"k": 1}}}],
            }
        }
    },
}


@pytest.mark.parametrize(
    ("served", "chosen"),
    [
        (["v1beta1", "v1", "v1beta2"], "v1"),
        (["v1beta1", "v1beta2"], "v1beta2"),
        (["v1alpha3", "v1beta1"], "v1beta1"),
    ],
)
def test_preference_is_v1_then_v1beta2_then_v1beta1(served: list[str], chosen: str) -> None:
    assert choose_resource_version(served) == chosen


def test_no_usable_version_is_an_error_naming_what_is_served() -> None:
    with pytest.raises(NoResourceApiError, match="v1alpha3"):
        choose_resource_version(["v1alpha3"])


def test_override_must_be_served() -> None:
    assert choose_resource_version(["v1", "v1beta1"], "v1beta1") == "v1beta1"
    with pytest.raises(NoResourceApiError):
        choose_resource_version(["v1"], "v1beta2")


def test_v1beta2_keeps_the_v1_shape_with_its_own_api_version() -> None:
    converted = convert_claim_template(TEMPLATE, "v1beta2")
    assert converted["apiVersion"] == "resource.k8s.io/v1beta2"
    assert converted["spec"] == TEMPLATE["spec"]


def test_v1beta1_flattens_exactly_into_the_request_and_leaves_the_original_alone() -> None:
    converted = convert_claim_template(TEMPLATE, "v1beta1")
    assert converted["apiVersion"] == "resource.k8s.io/v1beta1"
    assert converted["spec"]["spec"]["devices"]["requests"] == [
        {"name": "channel", "deviceClassName": "c.example.com"}
    ]
    assert converted["spec"]["spec"]["devices"]["config"] == TEMPLATE["spec"]["spec"]["devices"]["config"]
    assert "exactly" in TEMPLATE["spec"]["spec"]["devices"]["requests"][0]


def test_paths() -> None:
    assert COMPUTE_DOMAINS.collection_path() == "/apis/resource.nvidia.com/v1beta1/computedomains"
    assert (
        COMPUTE_DOMAINS.object_path("ns", "cd", "status")
        == "/apis/resource.nvidia.com/v1beta1/namespaces/ns/computedomains/cd/status"
    )
    assert NODES.object_path(None, "n1") == "/api/v1/nodes/n1"
    assert resource_claim_templates("v1beta1").api_version == "resource.k8s.io/v1beta1"
    with pytest.raises(ValueError, match="namespaced"):
        COMPUTE_DOMAINS.object_path(None, "cd")
