"""Channel isolation proven from inside the workers: which domain holds which channel, and who can import.

- `held_channels(rack, pod_uid)`: the IMEX channels a running worker's container holds, read from the device
  nodes the container runtime gave it (cdctl.sim.node.fakeimexmem.container_channels over its sandbox), not
  from what the controller or the plugin say.
- `published_channels(rack, domain_uid)`: clique ID -> the channel the controller published on the domain's
  ComputeDomainClique objects (the `imexChannel` field of cdctl.api.isolation).
- `prove_isolation(rack, domains)`: every running worker imports (`imex-memcheck import`, run inside it as
  `kubectl exec` would) the buffer of the next worker of its own domain, on another node where there is one,
  and the buffer of a worker of another domain, on its own node where there is one. Every same-domain import
  must succeed, every cross-domain one must fail, refused by isolation (the channel or the IMEX domain); the
  workers of a domain must hold one channel per clique, the one the controller published, and (channel
  isolation) no two domains one channel in one clique. The report lists the channels by domain and clique
  (what `cdctl sim rack` prints) and the problems.
Used by cdctl.sim.rack.scenario under channel isolation and by the integration tests.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from cdctl.api.isolation import CLIQUE_CHANNEL_FIELD
from cdctl.domain.computedomains import LABEL_CLIQUE_ID, LABEL_COMPUTE_DOMAIN
from cdctl.sim.node.fakeimexmem import DEV_ROOT_ENV, EXECUTABLE, PROC_DEVICES_ENV, container_channels
from cdctl.sim.rack.checks import CD_GROUP, WorkerState
from cdctl.sim.rack.launch import Rack
from cdctl.sim.rack.workload import export_name

CONCURRENT_CHECKS = 4  # imports in flight at once (each is a short process)
# What imex-memcheck says when isolation, and nothing else, refuses an import.
ISOLATION_DENIALS = ("which this container does not hold", "are not one IMEX domain")


@dataclass(frozen=True)
class DomainWorkers:
    """One domain's running workers, as the scenario sees them."""

    name: str
    namespace: str
    uid: str
    workers: list[WorkerState]


@dataclass
class IsolationReport:
    # domain name -> clique ID -> the channels its workers' containers hold there
    held: dict[str, dict[str, set[int]]] = field(default_factory=dict)
    published: dict[str, dict[str, int]] = field(default_factory=dict)  # domain -> clique -> imexChannel
    same_domain_imports: int = 0
    cross_domain_imports: int = 0
    problems: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        """`<domain>: channel N in clique C (published N)`, one line per domain and clique."""
        out = []
        for domain, by_clique in sorted(self.held.items()):
            for clique, channels in sorted(by_clique.items()):
                held = ", ".join(str(c) for c in sorted(channels))
                published = self.published.get(domain, {}).get(clique)
                said = "" if published is None else f" (published on its clique: {published})"
                out.append(f"{domain}: channel {held} in clique {clique}{said}")
        return out


def held_channels(rack: Rack, pod_uid: str) -> list[int]:
    running = rack.runtime.running.get(pod_uid)
    if running is None or DEV_ROOT_ENV not in running.env:
        return []
    return container_channels(running.env[DEV_ROOT_ENV], running.env.get(PROC_DEVICES_ENV, ""))


def container_story(rack: Rack, namespace: str, worker: WorkerState) -> str:
    """Why a worker holds no channel, as `kubectl describe` and `kubectl logs` would tell it."""
    running = rack.runtime.running.get(worker.uid)
    if running is None:
        kubelet = rack.cluster.kubelets.get(worker.node)
        said = kubelet.last_errors.get(worker.uid, "") if kubelet is not None else ""
        return f"its container was never started ({said or 'its kubelet reports no error'})"
    view = running.view()
    state = "running" if view.running else f"exited with {view.exit_code} ({view.exit_reason})"
    log_path = rack.runtime.log_path(namespace, worker.name)
    lines = log_path.read_text(errors="replace").splitlines()[-3:] if log_path.exists() else []
    return f"its container {state}, {view.restarts} restarts; its log ends: {' | '.join(lines) or '(empty)'}"


def published_channels(rack: Rack, domain_uid: str) -> dict[str, int]:
    cliques, _ = rack.store.list_objects(rack.store.type_of(CD_GROUP, "computedomaincliques"), copies=False)
    found: dict[str, int] = {}
    for clique in cliques:
        labels = clique["metadata"].get("labels") or {}
        channel = clique.get(CLIQUE_CHANNEL_FIELD)
        if labels.get(LABEL_COMPUTE_DOMAIN) == domain_uid and isinstance(channel, int):
            found[str(labels.get(LABEL_CLIQUE_ID, ""))] = channel
    return found


def _pick(candidates: list[WorkerState], prefer_node: str, same_node: bool) -> WorkerState | None:
    preferred = [w for w in candidates if (w.node == prefer_node) == same_node]
    chosen = preferred or candidates
    return chosen[0] if chosen else None


async def prove_isolation(rack: Rack, domains: list[DomainWorkers]) -> IsolationReport:
    report = IsolationReport()
    clique_of = {name: fake.clique_id for name, fake in rack.topology.nodes.items()}
    holders: dict[tuple[str, int], set[str]] = {}  # (clique, channel) -> domains
    for domain in domains:
        held = report.held.setdefault(domain.name, {})
        for worker in domain.workers:
            own = held_channels(rack, worker.uid)
            held.setdefault(clique_of.get(worker.node, ""), set()).update(own)
            if len(own) != 1:
                story = container_story(rack, domain.namespace, worker)
                report.problems.append(f"worker {worker.name} of {domain.name} holds channels {own}: {story}")
        report.published[domain.name] = published_channels(rack, domain.uid)
        for clique, channels in held.items():
            if len(channels) > 1:
                report.problems.append(
                    f"{domain.name}'s workers hold channels {sorted(channels)} in {clique}"
                )
            published = report.published[domain.name].get(clique)
            if channels and published is not None and channels != {published}:
                report.problems.append(
                    f"{domain.name} holds {sorted(channels)} in {clique} but its clique says {published}"
                )
            for channel in channels:
                holders.setdefault((clique, channel), set()).add(domain.name)
    for (clique, channel), names in sorted(holders.items()):
        # Under domain isolation every domain holds channel 0 of an IMEX domain of its own.
        if len(names) > 1 and rack.settings.channel_isolation:
            report.problems.append(f"domains {sorted(names)} share channel {channel} in clique {clique}")
    checks: list[tuple[DomainWorkers, WorkerState, DomainWorkers, WorkerState]] = []
    for domain in domains:
        for index, worker in enumerate(domain.workers):
            peers = domain.workers[index + 1 :] + domain.workers[:index]
            peer = _pick(peers, worker.node, same_node=False)
            if peer is not None:
                checks.append((domain, worker, domain, peer))
            others = [(d, w) for d in domains if d is not domain for w in d.workers]
            other = _pick([w for _, w in others], worker.node, same_node=True)
            if other is not None:
                owner = next(d for d, w in others if w is other)
                checks.append((domain, worker, owner, other))
    limit = asyncio.Semaphore(CONCURRENT_CHECKS)

    async def check(
        importer: DomainWorkers, worker: WorkerState, owner: DomainWorkers, peer: WorkerState
    ) -> None:
        async with limit:
            handle = export_name(owner.namespace, peer.name)
            try:
                code, output = await rack.exec_in(worker.uid, [EXECUTABLE, "import", handle])
            except ProcessLookupError:
                code, output = 1, "the importing container does not run"
        what = (
            f"{worker.name} ({importer.name}, {worker.node}) importing {handle} ({owner.name}, {peer.node})"
        )
        if owner is importer:
            report.same_domain_imports += 1
            if code != 0:
                report.problems.append(f"{what} failed: {output}")
        else:
            report.cross_domain_imports += 1
            if code == 0:
                report.problems.append(f"{what} succeeded across domains: {output}")
            elif not any(reason in output for reason in ISOLATION_DENIALS):
                # Refused, but not by isolation (the exporter gone, a daemon down): proves nothing.
                report.problems.append(f"{what} failed for another reason than isolation: {output}")

    await asyncio.gather(*(check(*c) for c in checks))
    return report
