"""Which resource.k8s.io version the cluster serves, and conversion of our v1-shaped objects to it.

The controller renders ResourceClaimTemplates in the v1 shape (cdctl.controller.render) and converts them
here for a cluster that serves only v1beta2 (same JSON) or v1beta1 (requests flattened: no `exactly`).
Called once at controller start; `convert_claim_spec` is pure and unit-tested.
"""

from __future__ import annotations

from typing import Any

from cdctl.k8s.errors import NotFoundError
from cdctl.k8s.resources import RESOURCE_GROUP
from cdctl.k8s.rest import JsonObject, KubeApi

PREFERRED_RESOURCE_VERSIONS = ("v1", "v1beta2", "v1beta1")


class NoResourceApiError(RuntimeError):
    """The cluster serves none of the resource.k8s.io versions we can speak (DRA is off or too old)."""


def choose_resource_version(served: list[str], override: str | None = None) -> str:
    """The best of `served` in our order of preference, or `override` when set (it must be served)."""
    if override:
        if override not in served:
            raise NoResourceApiError(f"{RESOURCE_GROUP}/{override} is not served (served: {served})")
        return override
    for version in PREFERRED_RESOURCE_VERSIONS:
        if version in served:
            return version
    raise NoResourceApiError(
        f"{RESOURCE_GROUP} serves {served or 'nothing'}; need one of {list(PREFERRED_RESOURCE_VERSIONS)}"
    )


async def served_resource_versions(api: KubeApi) -> list[str]:
    """The versions of resource.k8s.io the API server lists (`GET /apis/resource.k8s.io`)."""
    try:
        group = await api.get(f"/apis/{RESOURCE_GROUP}")
    except NotFoundError:
        return []
    return [str(entry.get("version")) for entry in group.get("versions", []) if entry.get("version")]


async def discover_resource_version(api: KubeApi, override: str | None = None) -> str:
    return choose_resource_version(await served_resource_versions(api), override)


def convert_claim_spec(spec: JsonObject, version: str) -> JsonObject:
    """A v1 ResourceClaimSpec in the shape of `version` (v1 and v1beta2 are identical; v1beta1 is flat).

    `spec` is not changed; the result shares the parts that need no conversion with it (the controller renders
    these on every reconcile, and copying whole objects cost more than rendering them)."""
    if version in ("v1", "v1beta2"):
        return spec
    if version != "v1beta1":
        raise NoResourceApiError(f"cannot convert a claim spec to {RESOURCE_GROUP}/{version}")
    devices: dict[str, Any] = spec.get("devices", {})
    if "requests" not in devices:
        return spec
    flat_requests = []
    for request in devices["requests"]:
        flat = {key: value for key, value in request.items() if key not in ("exactly", "firstAvailable")}
        flat.update(request.get("exactly", {}))
        if "firstAvailable" in request:
            flat["firstAvailable"] = request["firstAvailable"]
        flat_requests.append(flat)
    return {**spec, "devices": {**devices, "requests": flat_requests}}


def convert_claim_template(template: JsonObject, version: str) -> JsonObject:
    """A v1 ResourceClaimTemplate rendered for `version`: apiVersion and the inner claim spec converted
    (`template` unchanged; unconverted parts shared, as in `convert_claim_spec`)."""
    converted = {**template, "apiVersion": f"{RESOURCE_GROUP}/{version}"}
    inner = template.get("spec", {})
    if "spec" in inner:
        converted["spec"] = {**inner, "spec": convert_claim_spec(inner["spec"], version)}
    return converted
