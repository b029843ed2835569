"""Which daemon claims this node prepares, and where a domain's directory lives on the node.

Called by cdctl.plugin.prepare for every `daemon-0` device before anything is written for it. A daemon claim
hands its container the `fabric-imex-mgmt` capability, a domain's identity (env) and that domain's directory
(`/imexd`), so it is prepared only for the controller's own IMEX daemons:

* the ResourceClaim is in the driver namespace (where the controller runs its DaemonSets) or one of the
  additional namespaces the controller manages (ADDITIONAL_NAMESPACES: it reuses an earlier install's
  DaemonSets there), namespaces the operator chose, never a tenant's;
* the ComputeDomain it names exists (the caller looks it up; a miss after a fresh listing is permanent);
* its controlling owner is a Pod (`v1`), the claim is reserved for that pod (`status.reservedFor`), and that
  pod, read fresh (one GET, in the claim's namespace), has the same uid, is controlled by the
  domain's DaemonSet `computedomain-daemon-<domain uid>` (`apps/v1`), carries the domain's label and runs on
  this node.

A claim that breaks a rule gets `DaemonClaimRefused` (permanent) naming the rule. `domain_dir` builds a
domain's directory only from a validated uid, so no path taken from input leaves `<plugin dir>/domains`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cdctl.api.refs import COMPUTE_DOMAIN_LABEL, DomainInfo
from cdctl.domain.computedomains import daemon_set_name
from cdctl.domain.errors import PermanentError, clip, echo, require_uuid
from cdctl.plugin.devices import AllocatedClaim, OwnerRef, claim_object_name
from cdctl.plugin.ports import ClusterPort

DOMAINS_DIR = "domains"
RULE = "daemon claims are prepared only for the controller's IMEX daemon pods"


class DaemonClaimRefused(PermanentError):
    """A daemon claim that is not the claim of one of the controller's daemon pods of that domain."""


def domain_dir(plugin_dir: Path, domain_uid: str) -> Path:
    """`<plugin dir>/domains/<uid>`, built only once the uid is a UUID (no separator, no `..`)."""
    return plugin_dir / DOMAINS_DIR / require_uuid(domain_uid, "ComputeDomain", "uid")


def _refuse(claim: AllocatedClaim, why: str) -> DaemonClaimRefused:
    return DaemonClaimRefused(f"{claim_object_name(claim.ref.namespace, claim.ref.name)}: {RULE}: {why}")


def _owner_pod(claim: AllocatedClaim) -> OwnerRef:
    controllers = [o for o in claim.owners if o.controller]
    if len(controllers) != 1 or controllers[0].kind != "Pod" or controllers[0].api_version != "v1":
        found = ", ".join(f"{clip(o.kind, 40)}/{clip(o.name, 80)}" for o in controllers) or "none"
        raise _refuse(
            claim, f"its controlling owner must be one Pod (metadata.ownerReferences), found {found}"
        )
    return controllers[0]


def _field(obj: Mapping[str, Any], *path: str) -> Any:
    value: Any = obj
    for key in path:
        value = value.get(key) if isinstance(value, Mapping) else None
    return value


async def authorize_daemon_claim(
    claim: AllocatedClaim,
    domain: DomainInfo,
    *,
    namespaces: tuple[str, ...],
    node: str,
    cluster: ClusterPort,
) -> None:
    """Raise DaemonClaimRefused unless `claim` is the claim of `domain`'s daemon pod on `node` (see above).
    `namespaces`: the driver namespace, then the additional namespaces the controller manages."""
    namespace = claim.ref.namespace
    if namespace not in namespaces:
        where = (
            f"the driver namespace {namespaces[0]!r}"
            if len(namespaces) == 1
            else f"one of the driver's namespaces ({', '.join(namespaces)})"
        )
        raise _refuse(claim, f"the claim must be in {where}, not {echo(namespace, 100)}")
    owner = _owner_pod(claim)
    if not any(
        r.resource == "pods" and r.uid == owner.uid and r.name == owner.name for r in claim.reserved_for
    ):
        raise _refuse(claim, f"status.reservedFor does not name its owner pod {clip(owner.name, 100)}")
    pod = await cluster.get_pod(namespace, owner.name)
    pod_name = f"Pod {namespace}/{clip(owner.name, 100)}"
    if pod is None:
        raise _refuse(claim, f"its owner {pod_name} does not exist")
    if _field(pod, "metadata", "uid") != owner.uid:
        raise _refuse(
            claim, f"its owner {pod_name} was replaced (uid {echo(_field(pod, 'metadata', 'uid'))})"
        )
    want = daemon_set_name(domain.uid)
    refs = _field(pod, "metadata", "ownerReferences")
    controllers = (
        [r for r in refs if isinstance(r, Mapping) and r.get("controller") is True]
        if isinstance(refs, list)
        else []
    )
    if not any(
        r.get("kind") == "DaemonSet" and r.get("apiVersion") == "apps/v1" and r.get("name") == want
        for r in controllers
    ):
        raise _refuse(claim, f"its owner {pod_name} is not controlled by the domain's DaemonSet {want}")
    if _field(pod, "metadata", "labels", COMPUTE_DOMAIN_LABEL) != domain.uid:
        raise _refuse(claim, f"its owner {pod_name} does not carry {COMPUTE_DOMAIN_LABEL}={domain.uid}")
    if _field(pod, "spec", "nodeName") != node:
        where = echo(_field(pod, "spec", "nodeName"), 100)
        raise _refuse(claim, f"its owner {pod_name} runs on node {where}, not on this node {node}")
