"""The OpenAPI v3 documents of the simulated API server, as much of them as kubectl reads.

`kubectl apply` (and create, replace, edit) validates a manifest before sending it: it reads `/openapi/v3`,
then the document of the object's group-version, and when the PATCH operation of that kind lists the
`fieldValidation` query parameter it leaves validation to the server (`?fieldValidation=Strict`), as with
every v1.27+ server; without the documents it fails with `failed to download openapi`. `root(registry)` lists
a `serverRelativeURL` per served group-version (with a hash, as a real server gives, that changes when the
group-version's kinds do) and `group_version(registry, path)` gives that group-version's paths: per kind, its
collection and object paths with their operations and `x-kubernetes-group-version-kind`. There are no schemas
(`components` is empty): the simulated server validates custom objects against their CRD itself
(cdctl.sim.apiserver.crd, with the request's fieldValidation) and keeps no schema of the built-in kinds.
Called by cdctl.sim.apiserver.handlers for `GET /openapi/v3` and `GET /openapi/v3/<path>`.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from cdctl.sim.apiserver.resources import ResourceRegistry, ResourceType

FIELD_VALIDATION = {
    "name": "fieldValidation",
    "in": "query",
    "description": "How the server treats unknown or duplicate fields: Ignore, Warn or Strict.",
    "schema": {"type": "string", "uniqueItems": True},
}
_INFO = {"title": "Kubernetes", "version": "v1.36.2"}


def _api_path(resource_type: ResourceType) -> str:
    if resource_type.group:
        return f"apis/{resource_type.group}/{resource_type.version}"
    return f"api/{resource_type.version}"


def _group_versions(registry: ResourceRegistry) -> dict[str, list[ResourceType]]:
    found: dict[str, list[ResourceType]] = {}
    for resource_type in registry.types():
        found.setdefault(_api_path(resource_type), []).append(resource_type)
    return found


def _operation(resource_type: ResourceType, action: str, with_validation: bool) -> dict[str, Any]:
    operation: dict[str, Any] = {
        "operationId": f"{action}{resource_type.kind}",
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": {
            "group": resource_type.group,
            "version": resource_type.version,
            "kind": resource_type.kind,
        },
        "responses": {"200": {"description": "OK"}},
    }
    if with_validation:
        operation["parameters"] = [FIELD_VALIDATION]
    return operation


def _paths(resource_type: ResourceType) -> dict[str, Any]:
    prefix = "/" + _api_path(resource_type)
    scope = "/namespaces/{namespace}" if resource_type.namespaced else ""
    collection = f"{prefix}{scope}/{resource_type.plural}"
    return {
        collection: {
            "get": _operation(resource_type, "list", False),
            "post": _operation(resource_type, "post", True),
        },
        collection + "/{name}": {
            "get": _operation(resource_type, "get", False),
            "put": _operation(resource_type, "put", True),
            "patch": _operation(resource_type, "patch", True),
            "delete": _operation(resource_type, "delete", False),
        },
    }


def _document(types: list[ResourceType]) -> dict[str, Any]:
    paths: dict[str, Any] = {}
    for resource_type in sorted(types, key=lambda t: t.plural):
        paths.update(_paths(resource_type))
    return {"openapi": "3.0.0", "info": _INFO, "paths": paths, "components": {"schemas": {}}}


def _hash(document: dict[str, Any]) -> str:
    return hashlib.sha512(json.dumps(document, sort_keys=True).encode()).hexdigest()[:64].upper()


def root(registry: ResourceRegistry) -> dict[str, Any]:
    return {
        "paths": {
            path: {"serverRelativeURL": f"/openapi/v3/{path}?hash={_hash(_document(types))}"}
            for path, types in sorted(_group_versions(registry).items())
        }
    }


def group_version(registry: ResourceRegistry, path: str) -> dict[str, Any] | None:
    types = _group_versions(registry).get(path.strip("/"))
    return _document(types) if types else None
