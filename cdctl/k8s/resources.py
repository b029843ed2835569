"""The Kubernetes resource types cdctl reads and writes, and the REST paths to them.

Used by the transport users in cdctl.k8s (informers, leases, events) and by the controller, which only ever
names a resource through one of these descriptors. Objects travel as plain JSON dicts.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote


@dataclass(frozen=True)
class ResourceType:
    """One REST resource: group/version/plural, its kind and whether it lives in a namespace."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def _prefix(self) -> str:
        return f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"

    def collection_path(self, namespace: str | None = None) -> str:
        """The list/create/watch path; all namespaces when `namespace` is None."""
        if self.namespaced and namespace is not None:
            return f"{self._prefix()}/namespaces/{quote(namespace, safe='')}/{self.plural}"
        return f"{self._prefix()}/{self.plural}"

    def object_path(self, namespace: str | None, name: str, subresource: str | None = None) -> str:
        if self.namespaced and namespace is None:
            raise ValueError(f"{self.kind} is namespaced: a namespace is required")
        path = f"{self.collection_path(namespace)}/{quote(name, safe='')}"
        return f"{path}/{subresource}" if subresource else path

    def with_version(self, version: str) -> ResourceType:
        return ResourceType(self.group, version, self.plural, self.kind, self.namespaced)


COMPUTE_DOMAINS = ResourceType("resource.nvidia.com", "v1beta1", "computedomains", "ComputeDomain", True)
COMPUTE_DOMAIN_CLIQUES = ResourceType(
    "resource.nvidia.com", "v1beta1", "computedomaincliques", "ComputeDomainClique", True
)
NODES = ResourceType("", "v1", "nodes", "Node", False)
PODS = ResourceType("", "v1", "pods", "Pod", True)
EVENTS = ResourceType("", "v1", "events", "Event", True)
DAEMON_SETS = ResourceType("apps", "v1", "daemonsets", "DaemonSet", True)
LEASES = ResourceType("coordination.k8s.io", "v1", "leases", "Lease", True)
RESOURCE_GROUP = "resource.k8s.io"


def resource_claim_templates(version: str) -> ResourceType:
    """ResourceClaimTemplates in the resource.k8s.io version the cluster serves (see cdctl.k8s.discovery)."""
    return ResourceType(RESOURCE_GROUP, version, "resourceclaimtemplates", "ResourceClaimTemplate", True)


def resource_claims(version: str) -> ResourceType:
    """ResourceClaims in the resource.k8s.io version the cluster serves."""
    return ResourceType(RESOURCE_GROUP, version, "resourceclaims", "ResourceClaim", True)
