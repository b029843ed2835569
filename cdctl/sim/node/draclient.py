"""The simulated kubelet's side of the DRA gRPC API: which claims a pod needs of which driver, and the calls.

`claims_by_driver` reads a pod's ResourceClaims as the kubelet's DRA manager does (each must exist and be
reserved for the pod); `call_plugin` sends NodePrepareResources or NodeUnprepareResources over the plugin's
unix socket in the service version negotiated at registration; `check_answer` holds the answer to the
kubelet's rules (every claim answered, none it was not asked about, no per-claim error). Used by
cdctl.sim.node.kubelet.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import grpclib
from grpclib.client import Channel
from grpclib.exceptions import StreamTerminatedError

from cdctl._proto.k8s.io.kubelet.pkg.apis.dra import v1 as dra_v1
from cdctl._proto.k8s.io.kubelet.pkg.apis.dra import v1beta1 as dra_v1beta1
from cdctl.sim.apiserver.claimrefs import claim_names
from cdctl.sim.apiserver.errors import NotFound
from cdctl.sim.apiserver.store import ObjectStore
from cdctl.sim.node.pluginwatcher import RegisteredPlugin

PREPARE_TIMEOUT_S = 45.0
CLAIMS = ("resource.k8s.io", "resourceclaims")
_STUBS: dict[str, Any] = {"v1.DRAPlugin": dra_v1, "v1beta1.DRAPlugin": dra_v1beta1}


class PrepareFailed(Exception):
    """A plugin call failed as a whole or for one claim; the kubelet tries again after a backoff."""


class NotPreparableYet(PrepareFailed):
    """The pod's claims are not allocated and reserved yet, or its driver is not registered: try next pass."""


@dataclass(frozen=True)
class ClaimRef:
    namespace: str
    uid: str
    name: str


def claims_by_driver(
    store: ObjectStore, pod: dict[str, Any]
) -> tuple[dict[str, list[ClaimRef]], dict[str, str]]:
    """The pod's claims by the driver of their allocation results, and its pod claim names' claim uids."""
    names = claim_names(pod)
    if names is None:
        raise NotPreparableYet("waiting for the pod's ResourceClaims to be created")
    namespace = pod["metadata"]["namespace"]
    by_driver: dict[str, list[ClaimRef]] = {}
    pod_claim_names = [str(c.get("name", "")) for c in (pod.get("spec") or {}).get("resourceClaims") or []]
    by_pod_name: dict[str, str] = {}
    for pod_claim_name, name in zip(pod_claim_names, names, strict=False):
        try:
            claim = store.get(store.type_of(*CLAIMS), namespace, name)
        except NotFound as error:
            raise NotPreparableYet(f"ResourceClaim {namespace}/{name} does not exist") from error
        status = claim.get("status") or {}
        if not any(r.get("uid") == pod["metadata"]["uid"] for r in status.get("reservedFor") or []):
            raise NotPreparableYet(f"ResourceClaim {namespace}/{name} is not reserved for the pod yet")
        results = ((status.get("allocation") or {}).get("devices") or {}).get("results") or []
        ref = ClaimRef(namespace, claim["metadata"]["uid"], name)
        by_pod_name[pod_claim_name] = ref.uid
        for driver in sorted({r["driver"] for r in results}):
            by_driver.setdefault(driver, []).append(ref)
    return by_driver, by_pod_name


async def call_plugin(
    plugin: RegisteredPlugin, driver: str, refs: list[ClaimRef], *, prepare: bool
) -> dict[str, Any]:
    """One NodePrepareResources (or NodeUnprepareResources) call; the answer by claim uid, unchecked."""
    module = _STUBS[plugin.service]
    claims = [module.Claim(namespace=r.namespace, uid=r.uid, name=r.name) for r in refs]
    channel = Channel(path=str(plugin.endpoint))
    try:
        stub = module.DraPluginStub(channel)
        if prepare:
            request = module.NodePrepareResourcesRequest(claims=claims)
            response = await stub.node_prepare_resources(request, timeout=PREPARE_TIMEOUT_S)
        else:
            request = module.NodeUnprepareResourcesRequest(claims=claims)
            response = await stub.node_unprepare_resources(request, timeout=PREPARE_TIMEOUT_S)
    except (OSError, TimeoutError, grpclib.GRPCError, StreamTerminatedError) as error:
        verb = "NodePrepareResources" if prepare else "NodeUnprepareResources"
        raise PrepareFailed(f"{verb} for {driver}: {error}") from error
    finally:
        channel.close()
    return dict(response.claims)


def check_answer(driver: str, refs: list[ClaimRef], answered: dict[str, Any]) -> None:
    """The kubelet's rules for an answer: each claim asked about, no other, and none failed."""
    missing = [r.uid for r in refs if r.uid not in answered]
    if missing:
        raise PrepareFailed(f"{driver} left out/skipped {len(missing)} claims: {missing}")
    unknown = sorted(set(answered) - {r.uid for r in refs})
    if unknown:
        raise PrepareFailed(f"{driver} answered for claims it was not asked about: {unknown}")
    failed = {uid: entry.error for uid, entry in answered.items() if entry.error}
    if failed:
        raise PrepareFailed(f"{driver} failed claims: {failed}")
