"""What `cdctl sim rack` shows: the live view while the scenario runs, and the summary at the end.

`LiveView` is a rich Live display fed with the scenario's `Progress`: the current step and elapsed time, one
row per node (NVLink clique, plugin registered, daemon pod Ready, the worker on it and how far its channel
claim has come) and the steps done so far with their times. Redraws are throttled; its last frame is the
rack as it stood when the domain formed (not the empty table teardown leaves). On a terminal that is not
interactive it prints each step's name as it begins instead. `summary(...)` renders the final figures, each
step once: formation time beside its target, a table of the start-up, formation and teardown steps (each
step's own time, and the time since its phase began), where every event log is, the formation timeline
page, commands to explore them, under channel isolation which domain got which channel and the workers'
import checks, the verdict, and last what `cdctl explain` says of each domain (its slowest node's critical
path and the cause of its longest wait). Used by cdctl.sim.rack.rackcommand.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from cdctl.api.shareddaemon import SHARED_DIR
from cdctl.invocation import cdctl_command, on_path_hint
from cdctl.sim.rack.checks import WorkerState
from cdctl.sim.rack.launch import Rack, StartTimings
from cdctl.sim.rack.scenario import FORMATION_STEPS, Progress, ScenarioReport, formation_target
from cdctl.sim.rack.timelines import Timelines

MAX_ROWS = 36
REFRESH_S = 0.25
_CLAIM_STYLE = {
    "prepared": "green",
    "reserved": "yellow",
    "allocated": "yellow",
    "created": "cyan",
    "": "dim",
}


def _mark(ok: bool, text: str = "") -> Text:
    return Text(text or ("yes" if ok else "no"), style="green" if ok else "dim")


def _pods_cell(workers: list[WorkerState]) -> Text:
    """Several workers on a node (channel isolation): how many of each job, and their IMEX channels."""
    jobs: dict[str, int] = {}
    for worker in workers:
        job = worker.name.rsplit("-", 1)[0]
        jobs[job] = jobs.get(job, 0) + 1
    return Text(", ".join(f"{job} x{count}" for job, count in sorted(jobs.items())))


def _channels_cell(workers: list[WorkerState]) -> Text:
    channels = sorted({c for w in workers for c in w.channels})
    return _mark(bool(channels), " ".join(str(c) for c in channels) or "-")


def progress_table(progress: Progress, with_steps: bool = True) -> RenderableType:
    by_node: dict[str, list[WorkerState]] = {}
    for states in progress.workers.values():
        for w in states:
            if w.node:
                by_node.setdefault(w.node, []).append(w)
    isolated = any(w.channel_isolation for ws in by_node.values() for w in ws)
    table = Table(
        title=f"{progress.phase}  [{progress.elapsed_s:5.1f} s]", expand=False, title_justify="left"
    )
    last = "channels" if isolated else "channel0"
    for column in ("node", "clique", "plugin", "daemon", "worker", "channel claim", last):
        table.add_column(column)
    for node in progress.nodes[:MAX_ROWS]:
        here = by_node.get(node.name, [])
        worker = here[0] if here else None
        daemon = (
            _mark(node.daemons_ready > 0, f"{node.daemons_ready}/{node.daemons} ready")
            if node.daemons
            else Text("-", style="dim")
        )
        table.add_row(
            node.name,
            node.clique.rsplit(".", 1)[-1] if node.clique else "-",
            _mark(node.plugin, "registered" if node.plugin else "starting"),
            daemon,
            _pods_cell(here) if isolated else (f"{worker.name} ({worker.phase})" if worker else ""),
            Text(worker.claim or "-", style=_CLAIM_STYLE.get(worker.claim, "")) if worker else Text(""),
            _channels_cell(here) if isolated else (_mark(worker.channel0) if worker else Text("")),
        )
    if len(progress.nodes) > MAX_ROWS:
        table.caption = f"... and {len(progress.nodes) - MAX_ROWS} more nodes"
    counts = Text(
        f"plugins {sum(n.plugin for n in progress.nodes)}/{len(progress.nodes)}   "
        f"daemons ready {sum(n.daemons_ready for n in progress.nodes)}   "
        f"claims prepared {sum(w.claim == 'prepared' for s in progress.workers.values() for w in s)}"
        f"/{sum(len(s) for s in progress.workers.values())}"
    )
    if not with_steps:
        return Group(table, counts)
    steps = Text("  ".join(f"{name}: {seconds:.2f} s" for name, seconds in progress.steps), style="dim")
    return Group(table, counts, steps)


def formed(progress: Progress) -> bool:
    """Every worker of the scenario Running and Ready with channel0: the frame the view ends on."""
    workers = [w for states in progress.workers.values() for w in states]
    return bool(workers) and all(w.done for w in workers)


class LiveView:
    def __init__(self, console: Console) -> None:
        self.console = console
        self.live: Live | None = None
        self._drawn_at = 0.0
        self._phase = ""
        self._formed: Progress | None = None

    def __enter__(self) -> LiveView:
        if self.console.is_terminal:
            self.live = Live(console=self.console, auto_refresh=False, transient=False)
            self.live.__enter__()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.live is not None:
            if self._formed is not None:  # end on the formed rack; the summary has the step times
                phase = (
                    "formed: every worker Running and Ready with channel0 (then torn down; see the summary)"
                )
                frame = dataclasses.replace(self._formed, phase=phase)
                self.live.update(progress_table(frame, with_steps=False), refresh=True)
            self.live.__exit__(exc_type, exc, tb)

    def __call__(self, progress: Progress) -> None:
        if formed(progress):
            self._formed = progress
        if self.live is None:
            if progress.phase != self._phase and progress.phase not in ("done", "failed"):
                self.console.print(f"  {progress.phase} ...")
            self._phase = progress.phase
            return
        now = time.monotonic()
        if now - self._drawn_at >= REFRESH_S or progress.phase in ("done", "failed"):
            self._drawn_at = now
            self.live.update(progress_table(progress), refresh=True)


def event_logs(rack: Rack) -> list[tuple[str, Path]]:
    logs = [("controller", rack.controller_db)]
    logs += [(f"plugin {node}", rack.plugin_db(node)) for node in rack.topology.nodes]
    logs += [(f"daemon {node} {domain}", db) for node, domain, db in rack.runtime.daemon_logs()]
    return logs


def _step_rows(steps: Sequence[tuple[str, float]]) -> list[tuple[str, float, float]]:
    """Each step's own time and the time since the first of them began."""
    total, out = 0.0, []
    for name, seconds in steps:
        total += seconds
        out.append((name, seconds, total))
    return out


def formation_line(
    report: ScenarioReport, nodes: int, workers: int | None = None, channel_isolation: bool = False
) -> Text | None:
    """`formation: 1.39 s (target for 18 nodes: < 3 s, met) ...`."""
    if report.formation_s is None:
        return None
    target = formation_target(nodes)
    beside = ""
    if target is not None:
        size, limit = target
        verdict = "met" if report.formation_s < limit else "MISSED"
        beside = f" (target for {size} nodes: < {limit:g} s, {verdict})"
    if report.load_average is not None:
        beside += f" at load average {report.load_average:.2f} on {os.cpu_count()} cores"
    held = "their domain's channel" if channel_isolation else "channel0"
    return Text(
        f"formation: {report.formation_s:.2f} s{beside}: ComputeDomain created -> the last of "
        f"{workers or nodes} workers Running with {held}",
        style="bold",
    )


def steps_table(timings: StartTimings, report: ScenarioReport) -> Table:
    """Start-up, formation and teardown, each step once: its own time, and the time since its phase
    began (the formation phase: since the ComputeDomain was created)."""
    table = Table(title="steps (seconds)", title_justify="left")
    table.add_column("step")
    table.add_column("took", justify="right")
    table.add_column("since the phase began", justify="right")
    launched = timings.per_step.get("launch processes", 0.0)
    registered = timings.per_step.get(
        "plugins registered", launched
    )  # since launch: its own step is the rest
    start_up = [
        ("start cluster, chart objects, GPU labels", timings.cluster_s),
        ("launch controller and plugin processes", launched),
        ("plugins registered with ResourceSlices", registered - launched),
    ]
    forming = [(n, s) for n, s in report.steps if n in FORMATION_STEPS]
    tearing = [(n, s) for n, s in report.steps if n not in FORMATION_STEPS]
    for phase, steps in (
        ("rack start-up (not part of formation)", start_up),
        ("formation (since the ComputeDomain was created)", forming),
        ("teardown (since the jobs were deleted)", tearing),
    ):
        if not steps:
            continue
        table.add_row(Text(phase, style="bold"), "", "")
        for name, seconds, total in _step_rows(steps):
            table.add_row(f"  {name}", f"{seconds:.2f}", f"{total:.2f}")
    return table


def summary(rack: Rack, report: ScenarioReport) -> RenderableType:
    lines: list[RenderableType] = []
    nodes = len(rack.topology.nodes)
    headline = formation_line(report, nodes, report.workers or nodes, report.isolation is not None)
    if headline is not None:
        lines.append(headline)
    lines.append(steps_table(rack.timings, report))
    logs = event_logs(rack)
    plugin_logs = [path for who, path in logs if who.startswith("plugin")]
    daemon_logs = [path for who, path in logs if who.startswith("daemon")]
    lines.append(Text("event logs:", style="bold"))
    lines.append(Text(f"  controller: {rack.controller_db}"))
    if plugin_logs:
        pattern = str(rack.plugin_db("NODE")).replace("NODE", "<node>")
        lines.append(Text(f"  kubelet plugins ({len(plugin_logs)}): {pattern}"))
    if daemon_logs and rack.settings.channel_isolation:
        pattern = str(rack.plugin_db("NODE").parent / SHARED_DIR / "events.db").replace("NODE", "<node>")
        lines.append(Text(f"  shared IMEX daemons ({len(daemon_logs)}): {pattern}"))
    elif daemon_logs:
        pattern = str(rack.plugin_db("NODE").parent / "domains" / "DOMAIN" / "events.db")
        pattern = pattern.replace("NODE", "<node>").replace("DOMAIN", "<domain>")
        kept = "imex-history/<domain>.db once gone"
        lines.append(Text(f"  IMEX daemons ({len(daemon_logs)}): {pattern} ({kept})"))
    lines.append(Text(f"  process logs: {rack.logs_dir}"))
    drawn = report.timelines
    if drawn is not None and drawn.collected is not None:
        lines.append(Text(f"  all of them, collected: {drawn.collected}"))
    if drawn is not None:
        for page in drawn.pages:
            lines.append(Text(f"formation timeline: {page}", style="bold"))
        lines += [Text(f"  (timeline not drawn: {problem})", style="yellow") for problem in drawn.problems]
    first_plugin = plugin_logs[0] if plugin_logs else rack.controller_db
    at = report.formed_at.isoformat() if report.formed_at else "15m"  # to the microsecond: the formed state
    query = "SELECT name, node, kind, state, requested_at, prepared_at, unprepared_at FROM claim_lifecycle"
    lines.append(Text("explore them:", style="bold"))
    cdctl = cdctl_command()
    for command in (
        f"{cdctl} events --db {shlex.quote(str(rack.controller_db))} --stream 'domain/*'",
        f"{cdctl} sql --db {shlex.quote(str(first_plugin))} {shlex.quote(query)}",
        f"{cdctl} replay --db {shlex.quote(str(first_plugin))} --at {at}",
    ):
        lines.append(Text(f"  {command}"))
    hint = on_path_hint()
    if hint:
        lines.append(Text(f"  {hint}"))
    if report.isolation is not None:
        lines.append(Text("IMEX channels (what each domain's workers hold, by clique):", style="bold"))
        lines += [Text(f"  {line}") for line in report.isolation.lines()]
        lines.append(
            Text(
                f"  imports inside the workers: {report.isolation.same_domain_imports} within a domain "
                f"(must succeed), {report.isolation.cross_domain_imports} across domains (must be refused)"
            )
        )
        lines.append(
            Text(
                f"  assignments: {cdctl} sql --db {shlex.quote(str(rack.controller_db))} "
                f"{shlex.quote('SELECT * FROM channel_assignments')}"
            )
        )
    if report.ok:
        held = "their domain's channel" if report.isolation is not None else "channel0"
        lines.append(
            Text(
                f"every check held: all workers ran with {held}, and nothing was left behind",
                style="bold green",
            )
        )
    else:
        lines.append(Text("checks failed:", style="bold red"))
        lines += [Text(f"  - {problem}", style="red") for problem in report.problems]
    if drawn is not None and drawn.collected is not None:
        lines += explain_lines(drawn, cdctl)
    return Group(*lines)


def explain_lines(drawn: Timelines, cdctl: str) -> list[Text]:
    """What `cdctl explain` says of each domain's slowest node: its critical path and longest wait's cause."""
    lines: list[Text] = []
    for explanation in drawn.explanations:
        lines.append(Text(f"why {explanation.subject} took its time (cdctl explain):", style="bold"))
        lines += [Text(f"  {line}") for line in explanation.text()]
        lines.append(
            Text(f"  {cdctl} explain --db {shlex.quote(str(drawn.collected))} {explanation.subject}")
        )
    return lines
