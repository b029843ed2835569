"""Stand-in for the scheduler and its DRA allocation: picks devices for a pod's claims, binds the pod.

For each pod whose claims all exist, it chooses a node (the pod's own `spec.nodeName`, else the first node by
name that matches `spec.nodeSelector`, whose NoSchedule and NoExecute taints the pod tolerates (a node its
lifecycle controller found unreachable is tainted so), passes the extended-resource and pod-affinity filters
of cdctl.sim.controllers.placement, and can satisfy every claim), picks devices from the ResourceSlices
published for that node whose DeviceClass and request CEL selectors match, honouring `exactly` /
`firstAvailable`, `allocationMode` (ExactCount with `count`, or All), and never handing a device that any
claim holds to another, except a multi-allocatable one (`allowMultipleAllocations`, DRA consumable
capacity), which many claims share while its capacity lasts, each result with its `shareID` and
`consumedCapacity` (cdctl.sim.controllers.devicecapacity). It writes `status.allocation` (results with
request/driver/pool/device, config from class and claim, node selector), adds the pod to `reservedFor`, and
binds the pod (`spec.nodeName`).
Run by the rack via ControllerLoop; tests call `reconcile()`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from cdctl.sim.apiserver.claimrefs import allocated_node, claim_names
from cdctl.sim.apiserver.errors import ApiError
from cdctl.sim.apiserver.objectmeta import now_rfc3339
from cdctl.sim.apiserver.selectors import selector_from_match_labels
from cdctl.sim.apiserver.store import ObjectStore
from cdctl.sim.controllers.celdevices import SelectorError, device_context, selectors_match
from cdctl.sim.controllers.devicecapacity import CapacityError, DeviceKey, Usage
from cdctl.sim.controllers.nodematch import taints_allow
from cdctl.sim.controllers.placement import Placement

log = logging.getLogger(__name__)
PODS = ("", "pods")
NODES = ("", "nodes")
CLAIMS = ("resource.k8s.io", "resourceclaims")
SLICES = ("resource.k8s.io", "resourceslices")
CLASSES = ("resource.k8s.io", "deviceclasses")


class Unsatisfiable(Exception):
    """The claim cannot be allocated on this node (now)."""


@dataclass(frozen=True)
class Candidate:
    driver: str
    pool: str
    name: str
    context: dict[str, Any]
    device: dict[str, Any]  # as the slice has it (allowMultipleAllocations, capacity)

    @property
    def key(self) -> DeviceKey:
        return (self.driver, self.pool, self.name)


class Allocator:
    def __init__(self, store: ObjectStore) -> None:
        self.store = store
        self.kinds = (PODS, NODES, CLAIMS, SLICES, CLASSES)

    # ---- inventory -----------------------------------------------------------------------------------------
    def _in_use(self) -> Usage:
        claims, _ = self.store.list_objects(self.store.type_of(*CLAIMS), copies=False)
        used = Usage()
        for claim in claims:
            allocation = (claim.get("status") or {}).get("allocation") or {}
            for result in (allocation.get("devices") or {}).get("results") or []:
                used.add_result(result)
        return used

    def _devices_on(self, node: str) -> list[Candidate]:
        slices, _ = self.store.list_objects(self.store.type_of(*SLICES), copies=False)
        found = []
        for resource_slice in slices:
            spec = resource_slice.get("spec") or {}
            if spec.get("nodeName") != node and not spec.get("allNodes"):
                continue
            for device in spec.get("devices") or []:
                found.append(
                    Candidate(
                        spec["driver"],
                        spec["pool"]["name"],
                        device["name"],
                        device_context(spec["driver"], device),
                        device,
                    )
                )
        return found

    def _class(self, name: str) -> dict[str, Any]:
        try:
            return self.store.get(self.store.type_of(*CLASSES), "", name)
        except ApiError as error:
            raise Unsatisfiable(f"device class {name} does not exist") from error

    # ---- one request ---------------------------------------------------------------------------------------
    def _pick(
        self, request_name: str, shape: dict[str, Any], devices: list[Candidate], taken: Usage
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        device_class = self._class(shape["deviceClassName"])
        selectors = list((device_class.get("spec") or {}).get("selectors") or []) + list(
            shape.get("selectors") or []
        )
        room: dict[DeviceKey, dict[str, int]] = {}
        try:
            for d in devices:
                amounts = taken.fits(d.key, d.device, shape)
                if amounts is not None and selectors_match(selectors, d.context):
                    room[d.key] = amounts
        except (SelectorError, CapacityError) as error:
            raise Unsatisfiable(str(error)) from error
        matching = [d for d in devices if d.key in room]
        if shape.get("allocationMode", "ExactCount") == "All":
            chosen = matching
            if not chosen:
                raise Unsatisfiable(f"request {request_name}: no matching device")
        else:
            count = int(shape.get("count") or 1)
            if len(matching) < count:
                raise Unsatisfiable(
                    f"request {request_name}: {count} device(s) wanted, {len(matching)} available"
                )
            chosen = matching[:count]
        results = [
            {
                "request": request_name,
                "driver": d.driver,
                "pool": d.pool,
                "device": d.name,
                **taken.take(d.key, d.device, room[d.key]),
            }
            for d in chosen
        ]
        class_config = [
            {"source": "FromClass", "requests": [request_name.split("/")[0]], **entry}
            for entry in (device_class.get("spec") or {}).get("config") or []
        ]
        return results, class_config

    def _allocate_claim(self, claim: dict[str, Any], node: str, taken: Usage) -> dict[str, Any]:
        devices_spec = (claim.get("spec") or {}).get("devices") or {}
        devices = self._devices_on(node)
        results: list[dict[str, Any]] = []
        config: list[dict[str, Any]] = []
        for request in devices_spec.get("requests") or []:
            if "exactly" in request:
                found, class_config = self._pick(request["name"], request["exactly"], devices, taken)
            else:
                for sub in request.get("firstAvailable") or []:
                    attempt = taken.copy()
                    try:
                        found, class_config = self._pick(
                            f"{request['name']}/{sub['name']}", sub, devices, attempt
                        )
                    except Unsatisfiable:
                        continue
                    taken.adopt(attempt)
                    break
                else:
                    raise Unsatisfiable(f"request {request['name']}: no subrequest can be satisfied")
            results += found
            config += class_config
        config += [{"source": "FromClaim", **entry} for entry in devices_spec.get("config") or []]
        allocation: dict[str, Any] = {
            "devices": {"results": results, "config": config},
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                ]
            },
            "allocationTimestamp": now_rfc3339(),
        }
        return allocation

    # ---- one pod -------------------------------------------------------------------------------------------
    def _candidate_nodes(self, pod: dict[str, Any], placement: Placement) -> list[str]:
        bound = (pod.get("spec") or {}).get("nodeName")
        if bound:
            return [bound]
        nodes, _ = self.store.list_objects(self.store.type_of(*NODES), copies=False)
        wanted = selector_from_match_labels((pod.get("spec") or {}).get("nodeSelector"))
        return [
            n["metadata"]["name"]
            for n in nodes
            if wanted.matches(n["metadata"].get("labels"))
            and not (n.get("spec") or {}).get("unschedulable")
            and taints_allow(pod.get("spec") or {}, n)
            and placement.fits(pod, n["metadata"]["name"])
        ]

    def _plan(
        self, claims: list[dict[str, Any]], node: str, in_use: Usage
    ) -> dict[str, dict[str, Any]] | None:
        taken = in_use.copy()
        plan: dict[str, dict[str, Any]] = {}
        for claim in claims:
            if (claim.get("status") or {}).get("allocation"):
                if allocated_node(claim) not in (None, node):
                    return None
                continue
            try:
                plan[claim["metadata"]["name"]] = self._allocate_claim(claim, node, taken)
            except Unsatisfiable as reason:
                log.debug("pod cannot use node %s: %s", node, reason)
                return None
        return plan

    def _schedule(self, pod: dict[str, Any], in_use: Usage, placement: Placement) -> None:
        namespace, pod_name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        names = claim_names(pod)
        if names is None:
            return
        claims_type = self.store.type_of(*CLAIMS)
        try:
            claims = [self.store.peek(claims_type, namespace, name) for name in names]  # read only
        except ApiError:
            return
        if any(c["metadata"].get("deletionTimestamp") for c in claims):
            return
        reserved = all(
            any(
                r.get("uid") == pod["metadata"]["uid"]
                for r in (c.get("status") or {}).get("reservedFor") or []
            )
            for c in claims
        )
        if reserved and pod["spec"].get("nodeName"):
            return
        for node in self._candidate_nodes(pod, placement):
            plan = self._plan(claims, node, in_use)
            if plan is None:
                continue
            reference = {"resource": "pods", "name": pod_name, "uid": pod["metadata"]["uid"]}
            for claim in claims:
                status = dict(claim.get("status") or {})
                if claim["metadata"]["name"] in plan:
                    status["allocation"] = plan[claim["metadata"]["name"]]
                    for result in status["allocation"]["devices"]["results"]:
                        in_use.add_result(result)
                holders = list(status.get("reservedFor") or [])
                if not any(r.get("uid") == reference["uid"] for r in holders):
                    holders.append(reference)
                status["reservedFor"] = holders
                self.store.update(
                    claims_type,
                    namespace,
                    claim["metadata"]["name"],
                    {**claim, "status": status},
                    subresource="status",
                )
            if not pod["spec"].get("nodeName"):
                latest = self.store.get(self.store.type_of(*PODS), namespace, pod_name)
                latest["spec"]["nodeName"] = node
                self.store.update(self.store.type_of(*PODS), namespace, pod_name, latest)
                placement.bind(latest, node)
            return

    def reconcile(self) -> None:
        in_use = self._in_use()
        pods, _ = self.store.list_objects(self.store.type_of(*PODS), copies=False)  # read only
        placement = Placement.of(self.store.list_objects(self.store.type_of(*NODES), copies=False)[0], pods)
        for pod in pods:
            if pod["metadata"].get("deletionTimestamp") or (pod.get("status") or {}).get("phase") in (
                "Succeeded",
                "Failed",
            ):
                continue
            self._schedule(pod, in_use, placement)
