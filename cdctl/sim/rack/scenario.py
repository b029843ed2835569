"""The seeds' scenario on a running rack: ComputeDomains, their jobs, formation, teardown, leftover checks.

`run_scenario(rack, plans, observe=...)` creates each planned ComputeDomain, waits for the controller to
create its workload ResourceClaimTemplate, submits the job that uses it (cdctl.sim.rack.workload), waits until
every worker pod is Running and Ready with channel0 in its CDI edits, runs `while_formed(rack)` when given
(the integration tests restart a kubelet there), then deletes the jobs and waits for the kubelets
to unprepare every claim, deletes the domains and waits until nothing is left (cdctl.sim.rack.checks). Each
poll hands a `Progress` to `observe` (the live view). The `ScenarioReport` holds the per-step timings, the
formation time (first domain created -> every claim prepared), the teardown time and the problems found;
`ok` is true only when every check held. A plan with a `rack` (`cdctl sim rack --rack-domains`) uses the
domain the controller created when that rack joined (template `imex-channel-<name>`) instead of creating one,
and its teardown takes the rack's nodes out (their rack label removed) so that the controller deletes it.
Under channel isolation a worker is formed once it runs Ready with one channel other than 0, and once all
are, the workers prove their isolation (cdctl.sim.rack.isolation: imports within a domain succeed, across
domains fail); `ScenarioReport.isolation` holds which domain got which channel.
Used by `cdctl sim rack`, the integration tests and the benchmark.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from cdctl.asynctasks import wait_at_most
from cdctl.domain.racks import channel_template_name as rack_template_name
from cdctl.sim.apiserver.errors import AlreadyExists, NotFound
from cdctl.sim.apiserver.watch import StoredEvent
from cdctl.sim.node.topology import GPUS_PER_NODE
from cdctl.sim.rack.checks import (
    CD_GROUP,
    RESOURCE_GROUP,
    NodeState,
    WorkerState,
    admission_problems,
    kubelet_problems,
    leftovers,
    list_pods,
    node_states,
    worker_states,
)
from cdctl.sim.rack.isolation import DomainWorkers, IsolationReport, prove_isolation
from cdctl.sim.rack.launch import CLIQUE_LABEL, Rack
from cdctl.sim.rack.timelines import Timelines
from cdctl.sim.rack.workload import channel_template_name, compute_domain, worker_job

# Formation targets (nodes -> seconds), what bench/formation.py measures against; a rack of up to 18 nodes
# is held to the 18-node target, up to 144 to the 144-node one.
FORMATION_TARGETS_S = {18: 3.0, 144: 15.0}
CREATE_STEP = "create ComputeDomains"
TEMPLATES_STEP = "controller creates channel templates"
WORKERS_STEP = "workers Running and Ready with channel0"
WORKERS_CHANNEL_STEP = "workers Running with their domain's channel"  # channel isolation
IMPORTS_STEP = "workers' imports: within domains succeed, across fail"  # channel isolation, once formed
FORMATION_STEPS = (CREATE_STEP, TEMPLATES_STEP, WORKERS_STEP, WORKERS_CHANNEL_STEP, IMPORTS_STEP)
POLL_S = 0.05
NODES_PER_POLL_S = 400  # a poll passes over every pod, in the process that serves the cluster
PODS = ("", "pods")


@dataclass(frozen=True)
class DomainPlan:
    """One ComputeDomain and the jobs using it: `jobs` jobs (one per rack) of `workers` pods each."""

    name: str
    namespace: str
    workers: int
    jobs: int = 1
    rack: str = ""  # the rack label's value when the controller creates the domain for the rack
    num_nodes: int | None = None  # the domain's spec.numNodes; None: as many as its workers (0: elastic)
    gpus_per_pod: int = GPUS_PER_NODE  # 1: single-GPU pods, several on a node (channel isolation)
    node_selector: tuple[tuple[str, str], ...] = ()  # the jobs' pods' nodeSelector (pin a domain to a rack)

    @property
    def template(self) -> str:
        return rack_template_name(self.name) if self.rack else channel_template_name(self.name)

    @property
    def job_names(self) -> list[str]:
        if self.jobs == 1:
            return [f"{self.name}-job"]
        return [f"{self.name}-job{index}" for index in range(self.jobs)]

    @property
    def nodes(self) -> int:
        """The domain's pods (one per node unless its pods are smaller than a node)."""
        return self.workers * self.jobs

    def spec_num_nodes(self) -> int:
        if self.num_nodes is not None:
            return self.num_nodes
        return -(-self.nodes * self.gpus_per_pod // GPUS_PER_NODE)


@dataclass
class Progress:
    phase: str
    elapsed_s: float
    nodes: list[NodeState]
    workers: dict[str, list[WorkerState]]  # by job name
    steps: list[tuple[str, float]]


@dataclass
class ScenarioReport:
    steps: list[tuple[str, float]] = field(default_factory=list)
    formation_s: float | None = None
    formation_by_domain: dict[str, float] = field(default_factory=dict)
    teardown_s: float | None = None
    domain_uids: dict[str, str] = field(default_factory=dict)
    formed_at: datetime | None = None
    load_average: float | None = None  # the 1-minute load average when the domain formed
    isolation: IsolationReport | None = None  # channel isolation: channels held and the import checks
    workers: int = 0  # worker pods the plans asked for
    problems: list[str] = field(default_factory=list)
    timelines: Timelines | None = None  # what `cdctl sim rack` drew at the end (cdctl.sim.rack.timelines)

    @property
    def ok(self) -> bool:
        return not self.problems and self.formation_s is not None and self.teardown_s is not None


def formation_target(nodes: int) -> tuple[int, float] | None:
    """(size, seconds) of the target a rack of `nodes` nodes is held to; None above the largest."""
    return next(((size, limit) for size, limit in sorted(FORMATION_TARGETS_S.items()) if nodes <= size), None)


class ScenarioFailed(Exception):
    """A wait ran out of time; the message says what was still missing."""


class _Runner:
    def __init__(
        self,
        rack: Rack,
        plans: list[DomainPlan],
        observe: Callable[[Progress], None] | None,
        timeout_s: float,
    ) -> None:
        self.rack = rack
        self.plans = plans
        self.observe = observe
        self.timeout_s = timeout_s
        self.report = ScenarioReport()
        self.started = time.perf_counter()
        self.verified: set[str] = set()
        self.channels: dict[str, tuple[int, ...]] = {}
        self.phase = ""

    def workers(self) -> dict[str, list[WorkerState]]:
        pods = {ns: list_pods(self.rack, ns) for ns in {p.namespace for p in self.plans}}
        return {
            job: worker_states(
                self.rack,
                p.namespace,
                job,
                self.verified,
                pods[p.namespace],
                channel_isolation=self.rack.settings.channel_isolation,
                seen_channels=self.channels,
            )
            for p in self.plans
            for job in p.job_names
        }

    async def prove_isolation(self) -> None:
        """The workers' imports, within and across domains (channel isolation)."""
        began = time.perf_counter()
        states = self.workers()
        domains = [
            DomainWorkers(
                p.name,
                p.namespace,
                self.report.domain_uids.get(p.name, ""),
                [w for job in p.job_names for w in states[job]],
            )
            for p in self.plans
        ]
        self.report.isolation = await prove_isolation(self.rack, domains)
        self.report.problems += self.report.isolation.problems
        self.report.steps.append((IMPORTS_STEP, time.perf_counter() - began))

    @property
    def channel_words(self) -> str:
        return "their domain's channel" if self.rack.settings.channel_isolation else "channel0"

    def show(self, workers: dict[str, list[WorkerState]] | None = None) -> None:
        if self.observe is not None:
            self.observe(
                Progress(
                    self.phase,
                    time.perf_counter() - self.started,
                    node_states(self.rack),
                    workers if workers is not None else self.workers(),
                    list(self.report.steps),
                )
            )

    async def step(self, name: str, done: Callable[[], str | None], timeout_s: float | None = None) -> float:
        """Poll until `done()` returns None (it returns what is still missing); record the step's time."""
        self.phase = name
        began = time.perf_counter()
        deadline = began + (timeout_s or self.timeout_s)
        while (missing := done()) is not None:
            if time.perf_counter() > deadline:
                raise ScenarioFailed(f"{name}: still waiting after {deadline - began:.0f} s: {missing}")
            self.show()
            await asyncio.sleep(max(POLL_S, len(self.rack.topology.nodes) / NODES_PER_POLL_S))
        elapsed = time.perf_counter() - began
        self.report.steps.append((name, elapsed))
        self.show()
        return elapsed

    def create(self, group: str, plural: str, namespace: str, obj: dict[str, object]) -> dict[str, object]:
        return self.rack.store.create(self.rack.store.type_of(group, plural), namespace, obj)

    def delete(self, group: str, plural: str, namespace: str, name: str) -> None:
        try:
            self.rack.store.delete(self.rack.store.type_of(group, plural), namespace, name)
        except NotFound:
            pass

    def exists(self, group: str, plural: str, namespace: str, name: str) -> bool:
        try:
            self.rack.store.get(self.rack.store.type_of(group, plural), namespace, name)
        except NotFound:
            return False
        return True

    def rack_leaves(self, rack: str) -> None:
        """The rack's nodes lose their rack label: to the controller the rack is gone."""
        nodes = self.rack.store.type_of("", "nodes")
        for node in self.rack.store.list_objects(nodes)[0]:
            labels = node["metadata"].get("labels") or {}
            if labels.get(CLIQUE_LABEL) == rack:
                del labels[CLIQUE_LABEL]
                self.rack.store.update(nodes, "", node["metadata"]["name"], node)

    # ---- the scenario --------------------------------------------------------------------------------------
    async def form(self) -> None:
        for namespace in sorted({p.namespace for p in self.plans}):
            try:
                self.create("", "namespaces", "", {"metadata": {"name": namespace}})
            except AlreadyExists:
                pass
        created_at = time.perf_counter()
        created: dict[str, float] = {}
        self.report.workers = sum(p.nodes for p in self.plans)
        for plan in (p for p in self.plans if not p.rack):
            obj = self.create(
                CD_GROUP,
                "computedomains",
                plan.namespace,
                compute_domain(plan.name, plan.namespace, plan.spec_num_nodes()),
            )
            created[plan.name] = time.perf_counter()
            self.report.domain_uids[plan.name] = str(obj["metadata"]["uid"])  # type: ignore[index]
        self.report.steps.append((CREATE_STEP, time.perf_counter() - created_at))

        def templates_missing() -> str | None:
            missing = [
                p.template
                for p in self.plans
                if not self.exists(RESOURCE_GROUP, "resourceclaimtemplates", p.namespace, p.template)
            ]
            return f"ResourceClaimTemplates {missing}" if missing else None

        await self.step(TEMPLATES_STEP, templates_missing)
        formed: dict[str, float] = {}
        # When each worker turned Running, taken from the store's write itself: the poll below sees it up to a
        # poll period (and, on a busy rack, a late turn of the event loop) afterwards. Its CDI edits came
        # from the Prepare that ended before the kubelet wrote the status, so the write is the last step.
        running_at: dict[str, float] = {}
        namespaces = {p.namespace for p in self.plans}

        def note_running(event: StoredEvent) -> None:
            if event.storage_key != PODS or event.namespace not in namespaces:
                return
            uid = event.obj["metadata"]["uid"]
            if event.type == "DELETED" or (event.obj.get("status") or {}).get("phase") != "Running":
                running_at.pop(uid, None)
            elif uid not in running_at:
                running_at[uid] = time.perf_counter()

        def not_formed() -> str | None:
            states = self.workers()
            for plan in self.plans:
                pods = [w for job in plan.job_names for w in states[job]]
                if plan.name not in formed and len(pods) == plan.nodes and all(w.done for w in pods):
                    formed[plan.name] = max(running_at.get(w.uid, time.perf_counter()) for w in pods)
            self.show(states)
            waiting = [w.name for pods in states.values() for w in pods if not w.done]
            short = sum(p.nodes for p in self.plans) - sum(len(pods) for pods in states.values())
            if waiting or short:
                return f"{len(waiting)} workers not Running with {self.channel_words}, {short} not created"
            return None

        self.rack.store.hub.listeners.append(note_running)
        try:
            for plan in self.plans:
                if plan.rack:
                    cds = self.rack.store.type_of(CD_GROUP, "computedomains")
                    domain = self.rack.store.get(cds, plan.namespace, plan.name)
                    self.report.domain_uids[plan.name] = str(domain["metadata"]["uid"])
                    created[plan.name] = created_at
                for job in plan.job_names:
                    body = worker_job(
                        job,
                        plan.namespace,
                        plan.workers,
                        plan.template,
                        plan.gpus_per_pod,
                        dict(plan.node_selector),
                    )
                    self.create("batch", "jobs", plan.namespace, body)
            await self.step(
                WORKERS_CHANNEL_STEP if self.rack.settings.channel_isolation else WORKERS_STEP, not_formed
            )
        finally:
            self.rack.store.hub.listeners.remove(note_running)
        self.report.formation_s = max(formed.values()) - created_at
        self.report.formation_by_domain = {name: formed[name] - created[name] for name in formed}
        self.report.formed_at = datetime.now(UTC)
        self.report.load_average = os.getloadavg()[0]

    async def tear_down(self) -> None:
        began = time.perf_counter()
        for plan in self.plans:
            for job in plan.job_names:
                self.delete("batch", "jobs", plan.namespace, job)

        def claims_held() -> str | None:
            held = [n for n, k in self.rack.cluster.kubelets.items() if k.pods_holding_claims()]
            pods = sum(len(states) for states in self.workers().values())
            return f"{pods} worker pods, claims held on {held}" if held or pods else None

        await self.step("delete jobs: claims unprepared", claims_held)
        for plan in self.plans:
            if plan.rack:
                self.rack_leaves(plan.rack)
            else:
                self.delete(CD_GROUP, "computedomains", plan.namespace, plan.name)
        namespaces = sorted({p.namespace for p in self.plans})
        jobs = [job for p in self.plans for job in p.job_names]

        def remains() -> str | None:
            found = leftovers(self.rack, namespaces, jobs)
            return (
                "; ".join(found[:5]) + (f" (+{len(found) - 5} more)" if len(found) > 5 else "")
                if found
                else None
            )

        try:
            await self.step("delete ComputeDomains: nothing left", remains)
        except ScenarioFailed as failure:
            self.report.problems.append(str(failure))
        self.report.teardown_s = time.perf_counter() - began
        self.report.problems += leftovers(self.rack, namespaces, jobs)


async def _forming_with(runner: _Runner, faults: Awaitable[None]) -> None:
    """Form while the faults run; a fault that fails is a problem of the run, and one still running when the
    domains have formed is waited for (a node that loses power comes back before the teardown)."""
    injecting = asyncio.ensure_future(faults)
    try:
        await runner.form()
    finally:
        try:
            await wait_at_most(asyncio.shield(injecting), runner.timeout_s)
        except Exception as error:  # the fault's own failure: said, not raised over the scenario's
            injecting.cancel()
            runner.report.problems.append(f"injecting the faults failed: {type(error).__name__}: {error}")


async def run_scenario(
    rack: Rack,
    plans: list[DomainPlan],
    *,
    observe: Callable[[Progress], None] | None = None,
    timeout_s: float = 180.0,
    while_formed: Callable[[Rack], Awaitable[None]] | None = None,
    during_formation: Callable[[Rack], Awaitable[None]] | None = None,
    before_formation: Callable[[Rack], Awaitable[None]] | None = None,
) -> ScenarioReport:
    """Run `before_formation` (a fault to set up ahead of the domains), form the plans' domains (running
    `during_formation` beside, faults to inject while they form), run `while_formed` (a fault to inject once
    formed, say) if given, tear them down."""
    runner = _Runner(rack, plans, observe, timeout_s)
    try:
        if before_formation is not None:
            try:
                await before_formation(rack)
            except Exception as error:  # the fault's own failure: said, and the domains formed without it
                runner.report.problems.append(
                    f"setting up the faults failed: {type(error).__name__}: {error}"
                )
        if during_formation is not None:
            await _forming_with(runner, during_formation(rack))
        else:
            await runner.form()
        if rack.settings.channel_isolation and rack.settings.runs_workers:
            await runner.prove_isolation()
        if while_formed is not None:
            await while_formed(rack)
        await runner.tear_down()
    except ScenarioFailed as failure:
        runner.report.problems.append(str(failure))
    dead = rack.exited()
    runner.report.problems += [c.failure() for c in dead]
    runner.report.problems += kubelet_problems(rack) + admission_problems(rack)
    runner.phase = "done" if runner.report.ok else "failed"
    runner.show()
    return runner.report
