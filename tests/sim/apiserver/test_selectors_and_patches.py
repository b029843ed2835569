"""Pure pieces of the API server: selector parsing edge cases, strategic merge directives, conversion."""

from __future__ import annotations

import pytest

from cdctl.sim.apiserver.conversion import convert
from cdctl.sim.apiserver.errors import BadRequest, UnsupportedMediaType
from cdctl.sim.apiserver.patch import STRATEGIC_MERGE_PATCH, apply_patch, merge_patch, strategic_merge
from cdctl.sim.apiserver.resources import builtin_registry
from cdctl.sim.apiserver.selectors import parse_field_selector, parse_label_selector


@pytest.mark.parametrize("text", ["a in (x", "a in x", "=b", "a b"])
def test_malformed_label_selectors_are_bad_requests(text: str) -> None:
    with pytest.raises(BadRequest):
        parse_label_selector(text)


def test_not_equal_matches_objects_without_the_label() -> None:
    selector = parse_label_selector("tier!=web")
    assert selector.matches({}) and selector.matches({"tier": "db"}) and not selector.matches({"tier": "web"})


def test_field_selector_value_lookup() -> None:
    slices = builtin_registry().get("resource.k8s.io", "v1", "resourceslices")
    selector = parse_field_selector("spec.nodeName=n1,spec.driver!=x", slices)
    assert selector.value_of("spec.nodeName") == "n1"
    assert selector.matches({"spec": {"nodeName": "n1", "driver": "y"}})
    assert not selector.matches({"spec": {"nodeName": "n1", "driver": "x"}})


def test_merge_patch_null_removes_keys() -> None:
    assert merge_patch({"a": {"b": 1, "c": 2}}, {"a": {"b": None}}) == {"a": {"c": 2}}


def test_strategic_merge_delete_directive_and_primitive_list_deletion() -> None:
    current = {"spec": {"containers": [{"name": "a"}, {"name": "b"}]}, "metadata": {"finalizers": ["x", "y"]}}
    patched = strategic_merge(
        current,
        {
            "spec": {"containers": [{"name": "a", "$patch": "delete"}]},
            "metadata": {"$deleteFromPrimitiveList/finalizers": ["x"]},
        },
    )
    assert patched == {"spec": {"containers": [{"name": "b"}]}, "metadata": {"finalizers": ["y"]}}


def test_strategic_merge_adds_finalizers_as_a_set() -> None:
    patched = strategic_merge({"metadata": {"finalizers": ["x"]}}, {"metadata": {"finalizers": ["x", "y"]}})
    assert patched["metadata"]["finalizers"] == ["x", "y"]


def test_unknown_patch_type_is_415() -> None:
    with pytest.raises(UnsupportedMediaType):
        apply_patch({}, {}, "application/xml", custom=False)
    with pytest.raises(UnsupportedMediaType):
        apply_patch({}, {}, STRATEGIC_MERGE_PATCH, custom=True)


def test_v1beta1_round_trip_keeps_first_available_requests() -> None:
    registry = builtin_registry()
    beta = registry.get("resource.k8s.io", "v1beta1", "resourceclaims")
    stable = registry.get("resource.k8s.io", "v1", "resourceclaims")
    claim = {
        "apiVersion": "resource.k8s.io/v1beta1",
        "kind": "ResourceClaim",
        "spec": {
            "devices": {
                "requests": [
                    {"name": "a", "deviceClassName": "c", "count": 2},
                    {"name": "b", "firstAvailable": [{"name": "s", "deviceClassName": "c"}]},
                ]
            }
        },
    }
    as_v1 = convert(claim, beta, stable)
    assert as_v1["spec"]["devices"]["requests"] == [
        {"name": "a", "exactly": {"deviceClassName": "c", "count": 2}},
        {"name": "b", "firstAvailable": [{"name": "s", "deviceClassName": "c"}]},
    ]
    assert convert(as_v1, stable, beta) == claim
