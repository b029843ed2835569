"""What the rack scenario checks, read from the simulated cluster, the nodes' files and the event logs.

- `worker_states(rack, namespace, job)`: every pod of a job with its node, phase, channel claim progress
  and whether the CDI devices its kubelet recorded resolve (through the node's CDI specs, as the container
  runtime does) to the device node `/dev/nvidia-caps-imex-channels/channel0`; with `channel_isolation`, the
  channels they resolve to (`channel_numbers`: the minors of character devices of the node's channel
  major), and a worker is done once it runs Ready with exactly one channel other than 0.
- `node_states(rack)`: per node, whether its plugin is registered and how its daemon pods are doing.
- `leftovers(rack, namespaces)`: everything a deleted ComputeDomain and job must not leave behind: pods and
  ResourceClaims, claims the kubelets still hold, claim CDI spec files, ComputeDomain node labels, daemon
  DaemonSets and claim templates, ComputeDomains and cliques, the driver's finalizer on any object, daemon
  processes, and claims a plugin's event log (`claim_lifecycle`) does not show as unprepared.
- `kubelet_problems(rack)`: what a strict kubelet would complain about: any error on a plugin's
  resource-health stream, and a worker pod bound to a CPU-only node.
- `admission_problems(rack)`: every write the chart's admission policies denied. The components write
  with tokens bound to their pods (the daemons' through the runtime, as the kubelet mounts them), so a
  component that strays outside its own objects fails the scenario here as it would on a real cluster.
Used by cdctl.sim.rack.scenario and the integration tests.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cdctl.domain.computedomains import FINALIZER, LABEL_COMPUTE_DOMAIN
from cdctl.plugin.cdi import CLAIM_CLASS, VENDOR
from cdctl.sim.apiserver.claimrefs import allocated_node, claim_names
from cdctl.sim.apiserver.errors import NotFound
from cdctl.sim.controllers.daemonsets import pod_is_ready
from cdctl.sim.controllers.jobs import JOB_NAME_LABEL
from cdctl.sim.node.cdiresolver import UnresolvableDevice, resolve
from cdctl.sim.node.fakeimexmem import CHANNEL_DIR, channel_major
from cdctl.sim.rack.launch import Rack

CHANNEL0_DEVICE = "/dev/nvidia-caps-imex-channels/channel0"
CD_GROUP = "resource.nvidia.com"
RESOURCE_GROUP = "resource.k8s.io"


@dataclass(frozen=True)
class WorkerState:
    name: str
    uid: str
    node: str
    phase: str
    claim: str  # "", "created", "allocated", "reserved", "prepared"
    channel0: bool
    channels: tuple[int, ...] = ()  # the IMEX channels its devices resolve to (channel isolation)
    ready: bool = False
    channel_isolation: bool = False

    @property
    def channel(self) -> int | None:
        """Its one channel under channel isolation (None: none, or more than one)."""
        return self.channels[0] if len(self.channels) == 1 else None

    @property
    def done(self) -> bool:
        """Running and Ready (its container runs and, where workers run, exported its buffer: the isolation
        proof imports it) with its channel: its domain's under channel isolation, else channel 0."""
        if self.channel_isolation:
            return self.phase == "Running" and self.ready and self.channel not in (None, 0)
        return self.phase == "Running" and self.ready and self.channel0


def _list(rack: Rack, group: str, plural: str, namespace: str | None = None) -> list[dict[str, Any]]:
    """The stored objects themselves (no copies: the checks only read them)."""
    return rack.store.list_objects(rack.store.type_of(group, plural), namespace, copies=False)[0]


def _shown_phase(pod: dict[str, Any]) -> str:
    """The pod's phase as `kubectl get pods` shows it: Terminating while a deleted pod's kubelet ends it."""
    phase = str((pod.get("status") or {}).get("phase", "Pending"))
    if pod["metadata"].get("deletionTimestamp") and phase not in ("Succeeded", "Failed"):
        return "Terminating"
    return phase


def list_pods(rack: Rack, namespace: str) -> list[dict[str, Any]]:
    return _list(rack, "", "pods", namespace)


def _claim_progress(rack: Rack, pod: dict[str, Any], prepared: bool) -> str:
    if prepared:
        return "prepared"
    names = claim_names(pod)
    if not names:
        return ""
    try:
        claim = rack.store.peek(
            rack.store.type_of(RESOURCE_GROUP, "resourceclaims"), pod["metadata"]["namespace"], names[0]
        )
    except NotFound:
        return ""
    status = claim.get("status") or {}
    if status.get("reservedFor"):
        return "reserved"
    return "allocated" if allocated_node(claim) else "created"


def has_channel0(rack: Rack, node: str, cdi_devices: list[str]) -> bool:
    """Whether the CDI devices resolve, through the node's CDI specs, to the channel0 device node."""
    if not cdi_devices:
        return False
    try:
        edits = resolve([rack.cdi_root(node)], cdi_devices)
    except UnresolvableDevice:
        return False
    return any(d.get("path") == CHANNEL0_DEVICE for d in edits.device_nodes)


def channel_numbers(rack: Rack, node: str, cdi_devices: list[str]) -> tuple[int, ...]:
    """The IMEX channels the CDI devices resolve to on the node: character devices under the channel
    directory whose major is the node's `nvidia-caps-imex-channels`, by minor (what the driver goes by)."""
    if not cdi_devices:
        return ()
    try:
        edits = resolve([rack.cdi_root(node)], cdi_devices)
    except UnresolvableDevice:
        return ()
    major = channel_major(str(rack.cluster.driver_files(node).proc_devices))
    return tuple(
        sorted(
            {
                int(d["minor"])
                for d in edits.device_nodes
                if str(d.get("path", "")).startswith(f"{CHANNEL_DIR}/")
                and (d.get("type") or "c") == "c"
                and d.get("major") == major
                and d.get("minor") is not None
            }
        )
    )


def worker_states(
    rack: Rack,
    namespace: str,
    job: str,
    verified: set[str] | None = None,
    listed: list[dict[str, Any]] | None = None,
    *,
    channel_isolation: bool = False,
    seen_channels: dict[str, tuple[int, ...]] | None = None,
) -> list[WorkerState]:
    """The job's pods by name. `verified` caches pod uids already seen with channel0, `seen_channels` the
    channels of pods already resolved; `listed` is the namespace's pods when the caller has them (one list
    for several jobs: the store copies every object)."""
    verified = verified if verified is not None else set()
    seen_channels = seen_channels if seen_channels is not None else {}
    pods = [
        p
        for p in (listed if listed is not None else _list(rack, "", "pods", namespace))
        if p["metadata"].get("labels", {}).get(JOB_NAME_LABEL) == job
    ]
    states = []
    for pod in sorted(pods, key=lambda p: p["metadata"]["name"]):
        uid = pod["metadata"]["uid"]
        node = str(pod["spec"].get("nodeName") or "")
        kubelet = rack.cluster.kubelets.get(node)
        prepared = kubelet is not None and uid in kubelet.running
        if (
            prepared
            and uid not in verified
            and kubelet is not None
            and has_channel0(rack, node, kubelet.cdi_devices(uid))
        ):
            verified.add(uid)
        if channel_isolation and prepared and uid not in seen_channels and kubelet is not None:
            found = channel_numbers(rack, node, kubelet.cdi_devices(uid))
            if found:
                seen_channels[uid] = found
        states.append(
            WorkerState(
                pod["metadata"]["name"],
                uid,
                node,
                _shown_phase(pod),
                _claim_progress(rack, pod, prepared),
                uid in verified,
                seen_channels.get(uid, ()) if prepared else (),
                pod_is_ready(pod),
                channel_isolation,
            )
        )
    return states


@dataclass(frozen=True)
class NodeState:
    name: str
    clique: str
    plugin: bool
    daemons: int
    daemons_ready: int


def node_states(rack: Rack) -> list[NodeState]:
    daemon_pods = [
        p
        for p in _list(rack, "", "pods", rack.settings.driver_namespace)
        if rack.runtime.is_daemon_pod(p) or rack.runtime.is_shared_daemon_pod(p)
    ]
    registered = rack.registered_nodes()
    states = []
    for name, fake in rack.topology.nodes.items():
        mine = [p for p in daemon_pods if p["spec"].get("nodeName") == name]
        states.append(
            NodeState(
                name, fake.clique_id, name in registered, len(mine), sum(1 for p in mine if pod_is_ready(p))
            )
        )
    return states


def log_rows(db: Path, query: str) -> list[tuple[Any, ...]]:
    """The rows of a query over a component's event log, opened read-only (as `cdctl sql` does) while the
    component may be writing it."""
    connection = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10.0)
    try:
        return connection.execute(query).fetchall()
    finally:
        connection.close()


def unprepared_in_log(db: Path) -> list[str]:
    """Claims the plugin's event log shows prepared or pending and not unprepared since (a claim invalidated
    by a reboot holds nothing: its CDI spec and channel went with the old boot)."""
    if not db.exists():
        return []
    try:
        rows = log_rows(
            db,
            "SELECT claim_uid, name, state FROM claim_lifecycle"
            " WHERE unprepared_at IS NULL AND state != 'Invalidated'",
        )
    except sqlite3.OperationalError:
        return []
    return [f"{name or uid} is {state}" for uid, name, state in rows]


def leftovers(rack: Rack, namespaces: list[str], job_names: list[str]) -> list[str]:
    """Every trace that should be gone after the jobs and domains were deleted; empty when clean."""
    found: list[str] = []
    watched = [*namespaces, rack.settings.driver_namespace]
    for namespace in watched:
        for pod in _list(rack, "", "pods", namespace):
            labels = pod["metadata"].get("labels") or {}
            if labels.get(JOB_NAME_LABEL) in job_names or rack.runtime.is_daemon_pod(pod):
                found.append(f"pod {namespace}/{pod['metadata']['name']} still exists")
        for claim in _list(rack, RESOURCE_GROUP, "resourceclaims", namespace):
            found.append(f"ResourceClaim {namespace}/{claim['metadata']['name']} still exists")
    for name, kubelet in rack.cluster.kubelets.items():
        held = kubelet.pods_holding_claims()
        if held:
            found.append(f"kubelet {name} still holds {held} pods' claims")
        for spec in sorted(rack.cdi_root(name).glob(f"{VENDOR}-{CLAIM_CLASS}_*")):
            found.append(f"CDI spec {spec} still exists")
        found += [f"{name}: plugin log: {line}" for line in unprepared_in_log(rack.plugin_db(name))]
    for node in _list(rack, "", "nodes"):
        for label in node["metadata"].get("labels") or {}:
            if label.startswith(LABEL_COMPUTE_DOMAIN):
                found.append(f"node {node['metadata']['name']} still has label {label}")
    for group, plural in (
        ("apps", "daemonsets"),
        (RESOURCE_GROUP, "resourceclaimtemplates"),
        (CD_GROUP, "computedomains"),
        (CD_GROUP, "computedomaincliques"),
    ):
        for obj in _list(rack, group, plural):
            metadata = obj["metadata"]
            owned = LABEL_COMPUTE_DOMAIN in (metadata.get("labels") or {}) or group == CD_GROUP
            if owned or FINALIZER in (metadata.get("finalizers") or []):
                where = f"{metadata.get('namespace', '')}/{metadata['name']}"
                extra = " (finalizer set)" if FINALIZER in (metadata.get("finalizers") or []) else ""
                found.append(f"{obj.get('kind', plural)} {where} still exists{extra}")
    if rack.runtime.domain_containers():  # the shared IMEX daemons stay: the install's, not a domain's
        found.append(f"{len(rack.runtime.domain_containers())} daemon or worker containers still run")
    return found


def admission_problems(rack: Rack) -> list[str]:
    """The writes the chart's ValidatingAdmissionPolicies refused during the run."""
    return [f"admission policy denied a write: {d}" for d in rack.cluster.apiserver.store.policies.denials]


def kubelet_problems(rack: Rack) -> list[str]:
    """Errors the kubelets saw on the resource-health streams, and pods on CPU-only nodes."""
    found = [error for kubelet in rack.cluster.kubelets.values() for error in kubelet.health.errors]
    for name in rack.topology.cpu_nodes:
        kubelet = rack.cluster.kubelets.get(name)
        if kubelet is not None and kubelet.pods_holding_claims():
            found.append(f"CPU-only node {name} runs pods that use DRA claims")
    return found
