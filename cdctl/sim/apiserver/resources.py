"""The kinds the simulated API server serves: a registry of resource types (built-ins plus CRD-defined ones).

Used by the object store (cdctl.sim.apiserver.store) to key and validate objects, by discovery
(cdctl.sim.apiserver.discovery) to answer `/api` and `/apis`, and by the CRD controller
(cdctl.sim.apiserver.crd) which adds and removes custom types. Objects of one group and resource share one
storage, kept in the type's storage version; other served versions are converted on the way in and out
(cdctl.sim.apiserver.conversion).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from cdctl.sim.apiserver.errors import NotFound

ALL_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")
BASE_FIELD_SELECTORS = ("metadata.name", "metadata.namespace")


@dataclass(frozen=True)
class ResourceType:
    """One (group, version, resource) the server serves."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    storage_version: str
    status_subresource: bool = False
    short_names: tuple[str, ...] = ()
    field_selectors: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    schema: dict[str, Any] | None = field(default=None, compare=False, hash=False)
    builtin: bool = True
    printer_columns: tuple[dict[str, Any], ...] = field(default=(), compare=False, hash=False)  # a CRD's

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def group_version(self) -> str:
        return self.api_version

    @property
    def singular(self) -> str:
        return self.kind.lower()

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    @property
    def storage_key(self) -> tuple[str, str]:
        return (self.group, self.plural)

    @property
    def is_storage_version(self) -> bool:
        return self.version == self.storage_version

    def supports_field(self, path: str) -> bool:
        return path in BASE_FIELD_SELECTORS or path in self.field_selectors


_VERSION_RE = re.compile(r"^v(\d+)(?:(alpha|beta)(\d+))?$")


def version_priority(version: str) -> tuple[int, int, int, str]:
    """Sort key giving Kubernetes' version preference (v2 > v1 > v1beta2 > v1beta1 > v1alpha1 > others)."""
    match = _VERSION_RE.match(version)
    if not match:
        return (3, 0, 0, version)
    major = int(match.group(1))
    stage = {None: 0, "beta": 1, "alpha": 2}[match.group(2)]
    minor = int(match.group(3) or 0)
    return (stage, -major, -minor, version)


class ResourceRegistry:
    """Mutable set of served resource types, looked up by (group, version, plural)."""

    def __init__(self) -> None:
        self._types: dict[tuple[str, str, str], ResourceType] = {}

    def add(self, resource_type: ResourceType) -> None:
        key = (resource_type.group, resource_type.version, resource_type.plural)
        self._types[key] = resource_type

    def remove_group_resource(self, group: str, plural: str) -> None:
        for key in [k for k in self._types if k[0] == group and k[2] == plural]:
            del self._types[key]

    def find(self, group: str, version: str, plural: str) -> ResourceType | None:
        return self._types.get((group, version, plural))

    def get(self, group: str, version: str, plural: str) -> ResourceType:
        found = self.find(group, version, plural)
        if found is None:
            gv = f"{group}/{version}" if group else version
            raise NotFound(f"the server could not find the requested resource ({plural}, {gv})")
        return found

    def storage_type(self, group: str, plural: str) -> ResourceType:
        for resource_type in self._types.values():
            if (
                resource_type.group == group
                and resource_type.plural == plural
                and resource_type.is_storage_version
            ):
                return resource_type
        raise NotFound(f"the server could not find the requested resource ({plural}.{group})")

    def by_kind(self, api_version: str, kind: str) -> ResourceType | None:
        for resource_type in self._types.values():
            if resource_type.api_version == api_version and resource_type.kind == kind:
                return resource_type
        return None

    def types(self) -> list[ResourceType]:
        return list(self._types.values())

    def groups(self) -> dict[str, list[str]]:
        """Group name -> served versions, most preferred first."""
        found: dict[str, set[str]] = {}
        for resource_type in self._types.values():
            found.setdefault(resource_type.group, set()).add(resource_type.version)
        return {group: sorted(versions, key=version_priority) for group, versions in found.items()}

    def in_group_version(self, group: str, version: str) -> list[ResourceType]:
        return [t for t in self._types.values() if t.group == group and t.version == version]


def _builtin(
    group: str,
    versions: tuple[str, ...],
    plural: str,
    kind: str,
    *,
    namespaced: bool,
    status: bool = False,
    short_names: tuple[str, ...] = (),
    fields: tuple[str, ...] = (),
) -> list[ResourceType]:
    return [
        ResourceType(
            group=group,
            version=version,
            plural=plural,
            kind=kind,
            namespaced=namespaced,
            storage_version=versions[0],
            status_subresource=status,
            short_names=short_names,
            field_selectors=fields,
        )
        for version in versions
    ]


RESOURCE_VERSIONS = ("v1", "v1beta1", "v1beta2")


def builtin_types() -> list[ResourceType]:
    """The built-in kinds our components touch (core, apps, coordination, RBAC, CRDs, resource.k8s.io)."""
    types: list[ResourceType] = []
    core = ("v1",)
    types += _builtin(
        "",
        core,
        "namespaces",
        "Namespace",
        namespaced=False,
        status=True,
        short_names=("ns",),
        fields=("status.phase",),
    )
    types += _builtin(
        "",
        core,
        "nodes",
        "Node",
        namespaced=False,
        status=True,
        short_names=("no",),
        fields=("spec.unschedulable",),
    )
    types += _builtin(
        "",
        core,
        "pods",
        "Pod",
        namespaced=True,
        status=True,
        short_names=("po",),
        fields=("spec.nodeName", "status.phase", "spec.schedulerName", "spec.serviceAccountName"),
    )
    types += _builtin(
        "",
        core,
        "events",
        "Event",
        namespaced=True,
        short_names=("ev",),
        fields=(
            "involvedObject.kind",
            "involvedObject.name",
            "involvedObject.namespace",
            "involvedObject.uid",
            "reason",
            "type",
        ),
    )
    types += _builtin("", core, "configmaps", "ConfigMap", namespaced=True, short_names=("cm",))
    types += _builtin("", core, "secrets", "Secret", namespaced=True, fields=("type",))
    types += _builtin("", core, "serviceaccounts", "ServiceAccount", namespaced=True, short_names=("sa",))
    types += _builtin("", core, "services", "Service", namespaced=True, status=True, short_names=("svc",))
    types += _builtin(
        "apps", core, "daemonsets", "DaemonSet", namespaced=True, status=True, short_names=("ds",)
    )
    types += _builtin(
        "apps", core, "deployments", "Deployment", namespaced=True, status=True, short_names=("deploy",)
    )
    types += _builtin("coordination.k8s.io", core, "leases", "Lease", namespaced=True)
    types += _builtin("events.k8s.io", core, "events", "Event", namespaced=True, short_names=("ev",))
    rbac = "rbac.authorization.k8s.io"
    types += _builtin(rbac, core, "clusterroles", "ClusterRole", namespaced=False)
    types += _builtin(rbac, core, "clusterrolebindings", "ClusterRoleBinding", namespaced=False)
    types += _builtin(rbac, core, "roles", "Role", namespaced=True)
    types += _builtin(rbac, core, "rolebindings", "RoleBinding", namespaced=True)
    admission = "admissionregistration.k8s.io"
    types += _builtin(
        admission,
        core,
        "validatingadmissionpolicies",
        "ValidatingAdmissionPolicy",
        namespaced=False,
        status=True,
    )
    types += _builtin(
        admission,
        core,
        "validatingadmissionpolicybindings",
        "ValidatingAdmissionPolicyBinding",
        namespaced=False,
    )
    types += _builtin(
        "apiextensions.k8s.io",
        core,
        "customresourcedefinitions",
        "CustomResourceDefinition",
        namespaced=False,
        status=True,
        short_names=("crd", "crds"),
    )
    resource = "resource.k8s.io"
    types += _builtin(resource, RESOURCE_VERSIONS, "deviceclasses", "DeviceClass", namespaced=False)
    types += _builtin(
        resource,
        RESOURCE_VERSIONS,
        "resourceslices",
        "ResourceSlice",
        namespaced=False,
        fields=("spec.nodeName", "spec.driver", "spec.pool.name"),
    )
    types += _builtin(
        resource, RESOURCE_VERSIONS, "resourceclaims", "ResourceClaim", namespaced=True, status=True
    )
    types += _builtin(
        resource, RESOURCE_VERSIONS, "resourceclaimtemplates", "ResourceClaimTemplate", namespaced=True
    )
    return types


def builtin_registry() -> ResourceRegistry:
    registry = ResourceRegistry()
    for resource_type in builtin_types():
        registry.add(resource_type)
    return registry
