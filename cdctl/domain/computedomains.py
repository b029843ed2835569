"""ComputeDomains, purely: names and labels of the external contract, clique index assignment, status, events.

The controller (cdctl.controller) keeps every ComputeDomainClique itself: it gives each daemon pod the
smallest free index in its clique, keeps that index while the node's entry lives and never gives one index to
two daemons (`assign_clique`). From the cliques and the daemon pods outside any fabric clique it computes
`status.nodes` and the global Ready/NotReady (`status_nodes`, `global_status`; reference section 2.4 without
its quirks). The events recorded in stream `domain/<uid>` are defined at the end: what was observed, what the
controller intended and what came of it. No I/O here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cdctl.domain.events import DomainEvent, event_type

# The external contract (reference section 1.4): identical to the Go driver's so either can run a cluster.
LABEL_COMPUTE_DOMAIN = "resource.nvidia.com/computeDomain"
LABEL_CLIQUE_ID = "resource.nvidia.com/computeDomain.cliqueID"
LABEL_TARGET = "resource.nvidia.com/computeDomainTarget"
TARGET_DAEMON = "Daemon"
TARGET_WORKLOAD = "Workload"
FINALIZER = "resource.nvidia.com/computeDomain"
DRIVER_NAME = "compute-domain.nvidia.com"
CHANNEL_DEVICE_CLASS = "compute-domain-default-channel.nvidia.com"
DAEMON_DEVICE_CLASS = "compute-domain-daemon.nvidia.com"
STATUS_READY = "Ready"
STATUS_NOT_READY = "NotReady"
CONDITION_READY = "Ready"
NON_FABRIC_INDEX = -1


def domain_stream(uid: str) -> str:
    return f"domain/{uid}"


def daemon_set_name(uid: str) -> str:
    return f"computedomain-daemon-{uid}"


def daemon_claim_template_name(uid: str) -> str:
    return f"computedomain-daemon-{uid}"


def clique_name(uid: str, clique_id: str) -> str:
    return f"{uid}.{clique_id}"


@dataclass(frozen=True, slots=True)
class DaemonPod:
    """A daemon pod as the controller needs it. `clique_id` None: the daemon has not labelled itself yet."""

    name: str
    node_name: str
    ip_address: str
    clique_id: str | None
    ready: bool


@dataclass(frozen=True, slots=True)
class DaemonEntry:
    """One daemon in a clique (`ComputeDomainDaemonInfo`) or one node in `status.nodes`."""

    node_name: str
    ip_address: str
    clique_id: str
    index: int
    status: str = STATUS_NOT_READY

    def to_clique_json(self) -> dict[str, Any]:
        return {
            "nodeName": self.node_name,
            "ipAddress": self.ip_address,
            "cliqueID": self.clique_id,
            "index": self.index,
            "status": self.status,
        }

    def to_status_json(self) -> dict[str, Any]:
        return {
            "name": self.node_name,
            "ipAddress": self.ip_address,
            "cliqueID": self.clique_id,
            "index": self.index,
            "status": self.status,
        }

    @staticmethod
    def from_clique_json(raw: Mapping[str, Any]) -> DaemonEntry:
        return DaemonEntry(
            node_name=str(raw.get("nodeName", "")),
            ip_address=str(raw.get("ipAddress", "")),
            clique_id=str(raw.get("cliqueID", "")),
            index=int(raw.get("index", 0) or 0),
            status=str(raw.get("status") or STATUS_NOT_READY),
        )

    @staticmethod
    def from_status_json(raw: Mapping[str, Any]) -> DaemonEntry:
        return DaemonEntry(
            node_name=str(raw.get("name", "")),
            ip_address=str(raw.get("ipAddress", "")),
            clique_id=str(raw.get("cliqueID", "")),
            index=int(raw.get("index", 0) or 0),
            status=str(raw.get("status") or STATUS_NOT_READY),
        )


@dataclass(frozen=True, slots=True)
class CliqueAssignment:
    """The clique's entries ordered by index, and the nodes left out because every index was taken."""

    entries: tuple[DaemonEntry, ...]
    unplaced: tuple[str, ...] = ()


def _status_of(pod: DaemonPod) -> str:
    return STATUS_READY if pod.ready else STATUS_NOT_READY


def _one_pod_per_node(pods: Iterable[DaemonPod]) -> dict[str, DaemonPod]:
    """Per node, the pod that speaks for it: a ready one over one that is not (a replacement may overlap)."""
    chosen: dict[str, DaemonPod] = {}
    for pod in sorted(pods, key=lambda p: p.name):
        if not pod.node_name or not pod.ip_address:
            continue
        current = chosen.get(pod.node_name)
        if current is None or (pod.ready and not current.ready):
            chosen[pod.node_name] = pod
    return chosen


def assign_clique(
    clique_id: str, existing: Sequence[DaemonEntry], pods: Iterable[DaemonPod], max_nodes: int
) -> CliqueAssignment:
    """The clique's entries given its previous entries and its daemon pods now.

    An entry lives while a daemon pod of the clique runs on its node: it keeps its index and follows the pod's
    IP and readiness. A node without an entry gets the smallest index in [0, max_nodes) no live entry holds;
    nodes are placed in name order so the outcome does not depend on arrival order within one batch. Indices
    are unique even if `existing` was not (a later duplicate is re-placed).
    """
    by_node = _one_pod_per_node(pods)
    kept: dict[str, DaemonEntry] = {}
    taken: set[int] = set()
    for entry in sorted(existing, key=lambda e: (e.index, e.node_name)):
        pod = by_node.get(entry.node_name)
        if pod is None or entry.node_name in kept or entry.index in taken:
            continue
        if not 0 <= entry.index < max_nodes:
            continue
        taken.add(entry.index)
        kept[entry.node_name] = DaemonEntry(
            entry.node_name, pod.ip_address, clique_id, entry.index, _status_of(pod)
        )
    unplaced: list[str] = []
    free = (index for index in range(max_nodes) if index not in taken)
    for node_name in sorted(set(by_node) - set(kept)):
        index = next(free, None)
        if index is None:
            unplaced.append(node_name)
            continue
        pod = by_node[node_name]
        kept[node_name] = DaemonEntry(node_name, pod.ip_address, clique_id, index, _status_of(pod))
    entries = tuple(sorted(kept.values(), key=lambda e: e.index))
    return CliqueAssignment(entries, tuple(unplaced))


@dataclass(frozen=True, slots=True)
class PodsByClique:
    fabric: Mapping[str, tuple[DaemonPod, ...]]
    non_fabric: tuple[DaemonPod, ...]
    unlabelled: tuple[DaemonPod, ...]


def split_by_clique(pods: Iterable[DaemonPod]) -> PodsByClique:
    """Fabric pods per cliqueID, pods on nodes outside any clique (label ""), pods not labelled yet."""
    fabric: dict[str, list[DaemonPod]] = {}
    non_fabric: list[DaemonPod] = []
    unlabelled: list[DaemonPod] = []
    for pod in pods:
        if pod.clique_id is None:
            unlabelled.append(pod)
        elif pod.clique_id == "":
            non_fabric.append(pod)
        else:
            fabric.setdefault(pod.clique_id, []).append(pod)
    return PodsByClique({k: tuple(v) for k, v in fabric.items()}, tuple(non_fabric), tuple(unlabelled))


def status_nodes(
    clique_entries: Iterable[DaemonEntry], non_fabric_pods: Iterable[DaemonPod]
) -> list[DaemonEntry]:
    """`status.nodes`: every clique entry, then one entry per node running a non-fabric daemon (index -1)."""
    nodes = list(clique_entries)
    for node_name, pod in sorted(_one_pod_per_node(non_fabric_pods).items()):
        nodes.append(DaemonEntry(node_name, pod.ip_address, "", NON_FABRIC_INDEX, _status_of(pod)))
    return sorted(nodes, key=lambda e: (e.clique_id, e.index, e.node_name))


def global_status(nodes: Sequence[DaemonEntry], num_nodes: int) -> str:
    """NotReady while fewer than `numNodes` nodes are known or any known node is NotReady, else Ready."""
    if len(nodes) < num_nodes:
        return STATUS_NOT_READY
    if any(node.status != STATUS_READY for node in nodes):
        return STATUS_NOT_READY
    return STATUS_READY


@dataclass(frozen=True, slots=True)
class Blocked:
    """What keeps a domain NotReady whatever its daemons say: the controller could not do what it meant (its
    workload template's name is taken by another object, say). Shown as a `Ready=False` condition."""

    reason: str
    message: str
    since: str  # lastTransitionTime (RFC 3339): when this reason began

    def condition(self) -> dict[str, Any]:
        return {
            "type": CONDITION_READY,
            "status": "False",
            "reason": self.reason,
            "message": self.message,
            "lastTransitionTime": self.since,
        }


def blocked_since(current: Mapping[str, Any] | None, reason: str, now: str) -> str:
    """The transition time to keep: the current Ready condition's, if it already says `reason`, else now."""
    for condition in (current or {}).get("conditions") or []:
        if condition.get("type") == CONDITION_READY and condition.get("reason") == reason:
            return str(condition.get("lastTransitionTime") or now)
    return now


def desired_status(
    nodes: Sequence[DaemonEntry], num_nodes: int, blocked: Blocked | None = None
) -> dict[str, Any]:
    """The full `status` object to write: NotReady with a `Ready=False` condition while `blocked`; no
    conditions otherwise (the Go driver's status shape)."""
    status: dict[str, Any] = {
        "status": global_status(nodes, num_nodes) if blocked is None else STATUS_NOT_READY,
        "nodes": [node.to_status_json() for node in nodes],
    }
    if blocked is not None:
        status["conditions"] = [blocked.condition()]
    return status


def _conditions(status: Mapping[str, Any]) -> list[tuple[str, str, str, str]]:
    return sorted(
        (str(c.get("type")), str(c.get("status")), str(c.get("reason")), str(c.get("message")))
        for c in status.get("conditions") or []
    )


def same_status(current: Mapping[str, Any] | None, desired: Mapping[str, Any]) -> bool:
    """Whether writing `desired` would change nothing (nodes compared as a map name -> entry, conditions
    without their transition time)."""
    current = current or {}
    if current.get("status") != desired.get("status"):
        return False
    if _conditions(current) != _conditions(desired):
        return False
    if current.get("channels") != desired.get("channels"):  # `channel` isolation only
        return False

    def by_name(nodes: Any) -> dict[str, DaemonEntry]:
        return {str(n.get("name")): DaemonEntry.from_status_json(n) for n in nodes or []}

    return by_name(current.get("nodes")) == by_name(desired.get("nodes"))


# --- Events of stream domain/<uid> -------------------------------------------------------------------------


@event_type("ComputeDomainObserved")
@dataclass(frozen=True, slots=True)
class ComputeDomainObserved(DomainEvent):
    """The ComputeDomain as a watch or list reported it (`change`: ADDED, MODIFIED or DELETED)."""

    uid: str
    namespace: str
    name: str
    resource_version: str
    change: str
    num_nodes: int = 0
    channel_template_name: str = ""
    allocation_mode: str = "Single"
    deleting: bool = False
    finalizers: list[str] = field(default_factory=list)
    status: dict[str, Any] = field(default_factory=dict)


@event_type("DomainObjectObserved")
@dataclass(frozen=True, slots=True)
class DomainObjectObserved(DomainEvent):
    """An object labelled for the domain (DaemonSet, template, pod, clique, node) changed.

    `summary` holds only what the controller decides on: for a pod its node, IP, clique label and readiness;
    for a clique its daemons; for a template or DaemonSet its labels, finalizers and whether it is deleting.
    """

    domain_uid: str
    kind: str
    namespace: str
    name: str
    uid: str
    resource_version: str
    change: str
    summary: dict[str, Any] = field(default_factory=dict)


@event_type("DomainActionIntended")
@dataclass(frozen=True, slots=True)
class DomainActionIntended(DomainEvent):
    """The controller is about to change the cluster (recorded before the API call)."""

    domain_uid: str
    action: str
    kind: str
    namespace: str
    name: str


@event_type("DomainActionSucceeded")
@dataclass(frozen=True, slots=True)
class DomainActionSucceeded(DomainEvent):
    domain_uid: str
    action: str
    kind: str
    namespace: str
    name: str
    detail: str = ""


@event_type("DomainActionFailed")
@dataclass(frozen=True, slots=True)
class DomainActionFailed(DomainEvent):
    domain_uid: str
    action: str
    kind: str
    namespace: str
    name: str
    error: str
    retriable: bool = True


@event_type("CliqueIndexAssigned")
@dataclass(frozen=True, slots=True)
class CliqueIndexAssigned(DomainEvent):
    """A node's daemon got an index in its clique (kept for as long as the entry lives)."""

    domain_uid: str
    clique_id: str
    node_name: str
    index: int


@event_type("CliqueEntryRemoved")
@dataclass(frozen=True, slots=True)
class CliqueEntryRemoved(DomainEvent):
    """A node's daemon left its clique; its index is free again."""

    domain_uid: str
    clique_id: str
    node_name: str
    index: int


@event_type("ComputeDomainStatusChanged")
@dataclass(frozen=True, slots=True)
class ComputeDomainStatusChanged(DomainEvent):
    domain_uid: str
    status: str
    nodes: int
    ready_nodes: int


@event_type("ComputeDomainTornDown")
@dataclass(frozen=True, slots=True)
class ComputeDomainTornDown(DomainEvent):
    """Every object the domain owned is gone and its finalizer removed."""

    domain_uid: str
    namespace: str
    name: str
