"""Reading the claims a pod uses and the node a claim is allocated to, from the API objects.

The accessors the scheduler stand-in (cdctl.sim.controllers.allocator), the kubelet (cdctl.sim.node.kubelet)
and the scenario checks (cdctl.sim.rack.checks) share, as the real scheduler and kubelet share
k8s.io/dynamic-resource-allocation/resourceclaim. Pure reads of the objects' fields.
"""

from __future__ import annotations

from typing import Any


def claim_names(pod: dict[str, Any]) -> list[str] | None:
    """The ResourceClaim names a pod uses, or None while a template claim is not created yet."""
    statuses = {
        s.get("name"): s.get("resourceClaimName")
        for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []
    }
    names = []
    for pod_claim in (pod.get("spec") or {}).get("resourceClaims") or []:
        if pod_claim.get("resourceClaimName"):
            names.append(pod_claim["resourceClaimName"])
        elif pod_claim["name"] in statuses and statuses[pod_claim["name"]]:
            names.append(statuses[pod_claim["name"]])
        else:
            return None
    return names


def allocated_node(claim: dict[str, Any]) -> str | None:
    selector = ((claim.get("status") or {}).get("allocation") or {}).get("nodeSelector") or {}
    for term in selector.get("nodeSelectorTerms") or []:
        for field in term.get("matchFields") or []:
            if field.get("key") == "metadata.name" and field.get("values"):
                return str(field["values"][0])
    return None
