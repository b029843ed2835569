"""Conversion between served versions of one resource, as the API server does between v1beta1 and v1.

The object store keeps each resource in its storage version; the HTTP handlers call `convert` on request
bodies and on everything they answer (objects, lists, watch events). Only resource.k8s.io differs
in shape (v1beta1 nests device fields under `basic` and keeps request fields flat; v1beta2 and v1 are equal).
Other kinds, CRDs included (conversion strategy None), only get their apiVersion rewritten.
"""

from __future__ import annotations

import copy
from typing import Any

from cdctl.sim.apiserver.resources import ResourceType

_FLAT_REQUEST_FIELDS = (
    "deviceClassName",
    "selectors",
    "allocationMode",
    "count",
    "adminAccess",
    "tolerations",
    "capacity",
)


def _request_to_v1(request: dict[str, Any]) -> dict[str, Any]:
    if "exactly" in request or "firstAvailable" in request:
        return request
    converted = {key: value for key, value in request.items() if key not in _FLAT_REQUEST_FIELDS}
    exactly = {key: request[key] for key in _FLAT_REQUEST_FIELDS if key in request}
    if exactly:
        converted["exactly"] = exactly
    return converted


def _request_to_v1beta1(request: dict[str, Any]) -> dict[str, Any]:
    converted = {key: value for key, value in request.items() if key != "exactly"}
    converted.update(request.get("exactly") or {})
    return converted


def _device_to_v1(device: dict[str, Any]) -> dict[str, Any]:
    converted = {key: value for key, value in device.items() if key != "basic"}
    converted.update(device.get("basic") or {})
    return converted


def _device_to_v1beta1(device: dict[str, Any]) -> dict[str, Any]:
    basic = {key: value for key, value in device.items() if key != "name"}
    converted: dict[str, Any] = {"name": device.get("name")}
    if basic:
        converted["basic"] = basic
    return converted


def _claim_spec_requests(obj: dict[str, Any], plural: str) -> list[Any] | None:
    spec = obj.get("spec") or {}
    if plural == "resourceclaimtemplates":
        spec = spec.get("spec") or {}
    requests = (spec.get("devices") or {}).get("requests")
    return requests if isinstance(requests, list) else None


def _convert_resource_group(obj: dict[str, Any], plural: str, to_beta1: bool) -> None:
    if plural == "resourceslices":
        devices = (obj.get("spec") or {}).get("devices")
        if isinstance(devices, list):
            device_shape = _device_to_v1beta1 if to_beta1 else _device_to_v1
            obj["spec"]["devices"] = [device_shape(d) if isinstance(d, dict) else d for d in devices]
    elif plural in ("resourceclaims", "resourceclaimtemplates"):
        requests = _claim_spec_requests(obj, plural)
        if requests is not None:
            request_shape = _request_to_v1beta1 if to_beta1 else _request_to_v1
            requests[:] = [request_shape(r) if isinstance(r, dict) else r for r in requests]


def convert(obj: dict[str, Any], source: ResourceType, target: ResourceType) -> dict[str, Any]:
    """`obj` (served as `source`) in the shape of `target` (same group and resource), in a new top-level dict.

    Only a change between resource.k8s.io versions rewrites nested parts, so only then is the whole object
    copied; otherwise the nested parts are `obj`'s own: callers serialize the result, or store it as the new
    object of a write (a request body nobody else holds)."""
    if source.group == "resource.k8s.io" and (source.version == "v1beta1") != (target.version == "v1beta1"):
        converted = copy.deepcopy(obj)
        _convert_resource_group(converted, source.plural, to_beta1=target.version == "v1beta1")
    else:
        converted = dict(obj)
    if "apiVersion" in converted or "kind" in converted:
        converted["apiVersion"] = target.api_version
        converted["kind"] = target.kind
    return converted
