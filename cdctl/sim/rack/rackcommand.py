"""The body of `cdctl sim rack`: start the rack, run the scenario under the live view, print the summary.

`run_rack_command(directory, nodes, racks, mode)` returns the exit code: 0 only when the rack started, every
worker ran with channel0 and teardown left nothing behind; 1 otherwise (the summary lists what failed). With
`rack_domains` the controller creates one domain per rack and each rack's job uses it (cdctl.domain.racks).
With `hold_s` the formed rack is kept running that long (or until Ctrl-C) before the teardown, and the
commands that look at it are printed: `kubectl` and `cdctl collect` with the rack's kubeconfig (the API
server's address and an admin token, `<directory>/kubeconfig`).
With `isolation="channel"` (`RackOptions`) several domains share the rack(s): `domains` ComputeDomains, each
in its own namespace (`team-a`, `team-b`, ...), each with a job per rack of single-GPU pods (the rack's GPUs
split evenly unless `pods_per_domain` says otherwise), so that several pods of a domain share a node and
domains share nodes; the summary says which domain got which channel and how the workers' imports went.
Called by cdctl.cli.sim.
"""

from __future__ import annotations

import asyncio
import contextlib
import shlex
import signal
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from cdctl.api.isolation import ImexIsolation
from cdctl.asynctasks import wait_at_most
from cdctl.domain.errors import InvalidInput
from cdctl.domain.racks import rack_domain_name
from cdctl.invocation import cdctl_command
from cdctl.sim.node.topology import GPUS_PER_NODE, build_topology
from cdctl.sim.rack.formationfaults import CHANNELS_EXHAUSTED, FormationFault, FormationFaults, parse_fault
from cdctl.sim.rack.launch import Rack, RackStartError
from cdctl.sim.rack.liveview import LiveView, summary
from cdctl.sim.rack.scenario import DomainPlan, ScenarioReport, run_scenario
from cdctl.sim.rack.settings import RackSettings
from cdctl.sim.rack.timelines import draw_timelines
from cdctl.sim.rack.workdir import reuse, work_dir_problem

DOMAIN_NAMESPACE = "team-a"
DOMAIN_NAME = "nvl72"


def held_commands(rack: Rack, plans: list[DomainPlan]) -> list[str]:
    """What to run against a held rack, each a shell command line."""
    kubeconfig = shlex.quote(str(rack.kubeconfig))
    collected = shlex.quote(str(rack.work_dir / "collected.db"))
    plan = plans[0]
    cdctl = cdctl_command()  # the cdctl that runs here, as a shell finds it
    return [
        f"kubectl --kubeconfig {kubeconfig} get computedomains -A",
        f"kubectl --kubeconfig {kubeconfig} get pods -A -o wide",
        f"{cdctl} collect --kubeconfig {kubeconfig} -n {rack.settings.driver_namespace} -o {collected}",
        f"{cdctl} history --db {collected} computedomain/{plan.namespace}/{plan.name}",
    ]


def holding(console: Console, plans: list[DomainPlan], hold_s: float) -> Callable[[Rack], Awaitable[None]]:
    """The scenario's `while_formed`: print the commands, then wait `hold_s` seconds or for Ctrl-C."""

    async def hold(rack: Rack) -> None:
        console.print(
            f"rack formed; held for {hold_s:g} s (Ctrl-C ends the hold, then the rack is torn down)."
            f" The simulated API server is {rack.cluster.url}; try:",
            markup=False, highlight=False, soft_wrap=True,
        )  # fmt: skip
        for command in held_commands(rack, plans):
            console.print(f"  {command}", markup=False, highlight=False, soft_wrap=True)
        interrupted = asyncio.Event()
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGINT, interrupted.set)
        try:
            with contextlib.suppress(TimeoutError):
                await wait_at_most(interrupted.wait(), hold_s)
        finally:
            loop.remove_signal_handler(signal.SIGINT)
        console.print("hold over: tearing the rack down", markup=False, highlight=False)

    return hold


async def _run(
    console: Console,
    settings: RackSettings,
    plans: list[DomainPlan],
    hold_s: float = 0.0,
    faults: Sequence[FormationFault] = (),
) -> tuple[Rack, ScenarioReport | None, str]:
    rack = Rack(settings)
    nodes = len(rack.topology.nodes)
    isolation = f", {settings.isolation} isolation" if settings.channel_isolation else ""
    console.print(
        f"[bold]cdctl sim rack[/bold]: {settings.racks} x {settings.nodes_per_rack}-node GB200 rack(s), "
        f"{settings.mode}{isolation}; "
        f"starting the API server, 1 controller and {nodes} kubelet-plugin processes in {settings.work_dir}"
    )
    try:
        async with rack:
            console.print(
                f"rack up in {rack.timings.cluster_s + rack.timings.components_s:.1f} s; running the scenario"
            )
            hooks = FormationFaults(faults)
            before, during = (hooks.before, hooks.during) if faults else (None, None)
            if faults:
                console.print(f"injecting while the domain forms: {', '.join(str(f) for f in faults)}")
            if hold_s > 0:  # the live view would redraw over the printed commands
                held = holding(console, plans, hold_s)
                report = await run_scenario(
                    rack, plans, while_formed=held, during_formation=during, before_formation=before
                )
            else:
                with LiveView(console) as view:
                    report = await run_scenario(
                        rack, plans, observe=view, during_formation=during, before_formation=before
                    )
            console.print("collecting the rack's event logs to draw the formation timeline")
            report.timelines = await draw_timelines(rack, [(p.namespace, p.name) for p in plans])
    except RackStartError as error:
        return rack, None, str(error)
    return rack, report, ""


def rack_domain_plans(nodes: int, racks: int) -> list[DomainPlan]:
    """One plan per rack: the domain the controller names after the rack's clique, one job per rack."""
    topology = build_topology(racks=racks, nodes_per_rack=nodes)
    cliques = [topology.rack(index)[0].clique_id for index in range(racks)]
    return [DomainPlan(rack_domain_name(c), DOMAIN_NAMESPACE, workers=nodes, rack=c) for c in cliques]


@dataclass(frozen=True)
class RackOptions:
    """`cdctl sim rack`'s channel isolation options."""

    isolation: str = ImexIsolation.DOMAIN.value
    domains: int = 1
    pods_per_domain: int | None = None  # per rack; None: the rack's GPUs split evenly
    imex_channel_count: int | None = None
    faults: tuple[str, ...] = ()  # --fault KIND:NODE[:SECONDS] (cdctl.sim.rack.formationfaults)

    @property
    def channel_holders(self) -> int:
        """--fault channels-exhausted given: another team's domain holds a channel (and a GPU)."""
        return sum(1 for text in self.faults if text.split(":")[0] == CHANNELS_EXHAUSTED)

    def channel_count(self) -> int | None:
        """The rack's --imex-channel-count: one channel per domain under channels-exhausted, unless given."""
        if self.imex_channel_count is None and self.channel_holders:
            return self.domains + 1
        return self.imex_channel_count

    def problem(self, nodes: int, rack_domains: bool) -> str | None:
        """Why these options cannot run, naming the flag; None when they can."""
        channel = self.isolation == ImexIsolation.CHANNEL.value
        if self.channel_holders:
            fault = f"--fault {CHANNELS_EXHAUSTED}"
            if not channel:
                return f"{fault} needs --isolation channel (a channel is what it holds)"
            if self.channel_holders > 1:
                return f"{fault} can be given once"
            count = self.channel_count() or 0
            if count > self.domains + 1:
                return (
                    f"{fault} needs --imex-channel-count at most --domains + 1 ({self.domains + 1}): with "
                    f"{count}, no domain would wait for a channel"
                )
        if not channel:
            flags = [
                flag
                for flag, given in (
                    ("--domains", self.domains != 1),
                    ("--pods-per-domain", self.pods_per_domain is not None),
                    ("--imex-channel-count", self.imex_channel_count is not None),
                )
                if given
            ]
            if flags:
                return f"{', '.join(flags)} need --isolation channel"
            return None
        if rack_domains:
            return "--rack-domains and --isolation channel cannot be combined"
        if self.pods(nodes) < 1:
            return f"--domains {self.domains} leaves no GPU for a pod on {nodes} nodes"
        if self.pods(nodes) * self.domains > self._gpus(nodes):
            return (
                f"--domains {self.domains} x --pods-per-domain {self.pods(nodes)} single-GPU pods do not fit "
                f"the {self._gpus(nodes)} GPUs of a {nodes}-node rack"
                + (f" that {CHANNELS_EXHAUSTED} leaves free" if self.channel_holders else "")
            )
        return None

    def pods(self, nodes: int) -> int:
        if self.pods_per_domain is not None:
            return self.pods_per_domain
        return self._gpus(nodes) // self.domains

    def _gpus(self, nodes: int) -> int:
        """The GPUs the rack's domains may use: the holder's pod takes one."""
        return nodes * GPUS_PER_NODE - self.channel_holders


def shared_rack_plans(nodes: int, racks: int, options: RackOptions) -> list[DomainPlan]:
    """Channel isolation: `options.domains` domains, one namespace each, single-GPU pods on every rack."""
    return [
        DomainPlan(
            f"cd-{letter}",
            f"team-{letter}",
            workers=options.pods(nodes),
            jobs=racks,
            gpus_per_pod=1,
        )
        for letter in (_letters(index) for index in range(options.domains))
    ]


def _letters(index: int) -> str:
    """a, b, ..., z, aa, ab, ...: a name part for the index-th domain."""
    name = ""
    index += 1
    while index:
        index, rest = divmod(index - 1, 26)
        name = chr(ord("a") + rest) + name
    return name


def run_rack_command(
    directory: Path,
    nodes: int,
    racks: int,
    mode: str,
    rack_domains: bool = False,
    options: RackOptions | None = None,
    hold_s: float = 0.0,
) -> int:
    console = Console()
    options = options or RackOptions()
    problem = work_dir_problem(directory) or options.problem(nodes, rack_domains)
    names = list(build_topology(racks=racks, nodes_per_rack=nodes).nodes)
    try:
        faults = [parse_fault(text, names) for text in options.faults]
    except InvalidInput as error:
        problem = problem or error.message
    if problem:
        console.print(f"cdctl sim rack: {problem}", style="red")
        return 2
    if reuse(directory):
        console.print(f"cdctl sim rack: replaced the previous rack's files in {directory}")
    namespace = DOMAIN_NAMESPACE if rack_domains else ""
    settings = RackSettings(
        directory,
        racks=racks,
        nodes_per_rack=nodes,
        mode=mode,
        rack_domains_namespace=namespace,
        isolation=options.isolation,
        imex_channel_count=options.channel_count(),
    )
    if settings.channel_isolation:
        plans = shared_rack_plans(nodes, racks, options)
    elif rack_domains:
        plans = rack_domain_plans(nodes, racks)
    else:
        plans = [DomainPlan(DOMAIN_NAME, DOMAIN_NAMESPACE, workers=nodes, jobs=racks)]
    rack, report, failure = asyncio.run(_run(console, settings, plans, hold_s, faults))
    if report is None:
        console.print(f"cdctl sim rack: the rack did not start: {failure}", style="red")
        console.print(f"process logs: {rack.logs_dir}")
        return 1
    console.print(summary(rack, report), soft_wrap=True)  # a command copied from it runs as printed
    if rack_domains:
        command = f"{cdctl_command()} events --db {shlex.quote(str(rack.controller_db))} --stream 'rack/*'"
        console.print(f"rack domain decisions: {command}", soft_wrap=True)
    return 0 if report.ok else 1
