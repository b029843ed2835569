"""Small shared facts about ComputeDomains that the kubelet plugin and its Kubernetes adapter exchange.

`DomainInfo` is what prepare needs to know about a ComputeDomain; the label key is the one the Go driver puts
on nodes (and DaemonSets, claim templates, cliques). Used by cdctl.plugin and cdctl.k8s.
"""

from __future__ import annotations

from dataclasses import dataclass

COMPUTE_DOMAIN_LABEL = "resource.nvidia.com/computeDomain"
# The node's NVLink clique, "<clusterUUID>.<cliqueId>", as GPU Feature Discovery sets it and the kubelet
# plugin does with --gpu-clique-label (upstream PR 1247).
GPU_CLIQUE_LABEL = "nvidia.com/gpu.clique"


@dataclass(frozen=True, slots=True)
class DomainInfo:
    """The ComputeDomain facts prepare uses."""

    uid: str
    name: str
    namespace: str
