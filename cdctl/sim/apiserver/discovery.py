"""API discovery documents: `/version`, `/api`, `/apis`, `/apis/<group>` and the per-version resource lists.

Pure functions over the resource registry, served by cdctl.sim.apiserver.handlers, so that kubectl and the
controller's API-version discovery (resource.k8s.io v1 vs v1beta1) work against the simulated server.
"""

from __future__ import annotations

from typing import Any

from cdctl.sim.apiserver.resources import ALL_VERBS, ResourceRegistry, ResourceType

SERVER_VERSION = {
    "major": "1",
    "minor": "34",
    "gitVersion": "v1.34.0-cdctl-sim",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2026-01-01T00:00:00Z",
    "goVersion": "go1.24",
    "compiler": "gc",
    "platform": "linux/amd64",
}


def core_versions(server_address: str) -> dict[str, Any]:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    }


def _group_document(name: str, versions: list[str]) -> dict[str, Any]:
    entries = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
    return {"name": name, "versions": entries, "preferredVersion": entries[0]}


def api_group_list(registry: ResourceRegistry) -> dict[str, Any]:
    groups = [_group_document(name, versions) for name, versions in sorted(registry.groups().items()) if name]
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def api_group(registry: ResourceRegistry, group: str) -> dict[str, Any] | None:
    versions = registry.groups().get(group)
    if not versions or not group:
        return None
    return {"kind": "APIGroup", "apiVersion": "v1", **_group_document(group, versions)}


def _resource_entries(resource_type: ResourceType) -> list[dict[str, Any]]:
    entry: dict[str, Any] = {
        "name": resource_type.plural,
        "singularName": resource_type.singular,
        "namespaced": resource_type.namespaced,
        "kind": resource_type.kind,
        "verbs": list(ALL_VERBS),
    }
    if resource_type.short_names:
        entry["shortNames"] = list(resource_type.short_names)
    if resource_type.categories:
        entry["categories"] = list(resource_type.categories)
    entries = [entry]
    if resource_type.status_subresource:
        entries.append(
            {
                "name": f"{resource_type.plural}/status",
                "singularName": "",
                "namespaced": resource_type.namespaced,
                "kind": resource_type.kind,
                "verbs": ["get", "patch", "update"],
            }
        )
    if resource_type.storage_key == ("", "pods"):
        entries.append(
            {
                "name": "pods/binding",
                "singularName": "",
                "namespaced": True,
                "kind": "Binding",
                "verbs": ["create"],
            }
        )
    return entries


def api_resource_list(registry: ResourceRegistry, group: str, version: str) -> dict[str, Any] | None:
    types = sorted(registry.in_group_version(group, version), key=lambda t: t.plural)
    if not types:
        return None
    resources = [entry for resource_type in types for entry in _resource_entries(resource_type)]
    group_version = f"{group}/{version}" if group else version
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": resources,
    }
