"""What `cdctl sim rack` shows: the live view while the scenario runs, and the summary at the end.

`LiveView` is a rich Live display fed with the scenario's `Progress`: the current step and elapsed time, one
row per node (NVLink clique, plugin registered, daemon pod Ready, the worker on it and how far its channel
claim has come) and the steps done so far with their times. Redraws are throttled; on a terminal that is
not interactive it prints one line per step instead. `summary(...)` renders the final figures: formation
time, per-step timings, where every event log is, three commands to explore them, and the verdict.
Used by cdctl.cli.sim.
"""

from __future__ import annotations

import shlex
import time
from pathlib import Path
from types import TracebackType

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from cdctl.invocation import cdctl_command, on_path_hint
from cdctl.sim.rack.launch import Rack
from cdctl.sim.rack.scenario import Progress, ScenarioReport

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


def progress_table(progress: Progress) -> RenderableType:
    workers = {w.node: w for states in progress.workers.values() for w in states if w.node}
    table = Table(
        title=f"{progress.phase}  [{progress.elapsed_s:5.1f} s]", expand=False, title_justify="left"
    )
    for column in ("node", "clique", "plugin", "daemon", "worker", "channel claim", "channel0"):
        table.add_column(column)
    for node in progress.nodes[:MAX_ROWS]:
        worker = workers.get(node.name)
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
            f"{worker.name} ({worker.phase})" if worker else "",
            Text(worker.claim or "-", style=_CLAIM_STYLE.get(worker.claim, "")) if worker else Text(""),
            _mark(worker.channel0) if worker else Text(""),
        )
    if len(progress.nodes) > MAX_ROWS:
        table.caption = f"... and {len(progress.nodes) - MAX_ROWS} more nodes"
    counts = Text(
        f"plugins {sum(n.plugin for n in progress.nodes)}/{len(progress.nodes)}   "
        f"daemons ready {sum(n.daemons_ready for n in progress.nodes)}   "
        f"claims prepared {sum(w.claim == 'prepared' for s in progress.workers.values() for w in s)}"
        f"/{sum(len(s) for s in progress.workers.values())}"
    )
    steps = Text("  ".join(f"{name}: {seconds:.2f} s" for name, seconds in progress.steps), style="dim")
    return Group(table, counts, steps)


class LiveView:
    def __init__(self, console: Console) -> None:
        self.console = console
        self.live: Live | None = None
        self._drawn_at = 0.0
        self._steps_printed = 0

    def __enter__(self) -> LiveView:
        if self.console.is_terminal:
            self.live = Live(console=self.console, auto_refresh=False, transient=False)
            self.live.__enter__()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.live is not None:
            self.live.__exit__(exc_type, exc, tb)

    def __call__(self, progress: Progress) -> None:
        if self.live is None:
            for name, seconds in progress.steps[self._steps_printed :]:
                self.console.print(f"  {name}: {seconds:.2f} s")
            self._steps_printed = len(progress.steps)
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


def summary(rack: Rack, report: ScenarioReport) -> RenderableType:
    lines: list[RenderableType] = []
    nodes = len(rack.topology.nodes)
    if report.formation_s is not None:
        lines.append(
            Text(
                f"formation: {report.formation_s:.2f} s "
                f"(ComputeDomain created -> all {nodes} workers' claims prepared)",
                style="bold",
            )
        )
    steps = Table(title="steps", title_justify="left")
    steps.add_column("step")
    steps.add_column("seconds", justify="right")
    steps.add_row("start cluster, chart objects, GPU labels", f"{rack.timings.cluster_s:.2f}")
    for name, seconds in rack.timings.per_step.items():
        steps.add_row(f"components: {name}", f"{seconds:.2f}")
    for name, seconds in report.steps:
        steps.add_row(name, f"{seconds:.2f}")
    if report.teardown_s is not None:
        steps.add_row("teardown (jobs and domains deleted -> nothing left)", f"{report.teardown_s:.2f}")
    lines.append(steps)
    logs = event_logs(rack)
    plugin_logs = [path for who, path in logs if who.startswith("plugin")]
    daemon_logs = [path for who, path in logs if who.startswith("daemon")]
    lines.append(Text("event logs:", style="bold"))
    lines.append(Text(f"  controller: {rack.controller_db}"))
    if plugin_logs:
        pattern = str(rack.plugin_db("NODE")).replace("NODE", "<node>")
        lines.append(Text(f"  kubelet plugins ({len(plugin_logs)}): {pattern}"))
    if daemon_logs:
        pattern = str(rack.plugin_db("NODE").parent / "domains" / "DOMAIN" / "events.db")
        pattern = pattern.replace("NODE", "<node>").replace("DOMAIN", "<domain>")
        kept = "imex-history/<domain>.db once gone"
        lines.append(Text(f"  IMEX daemons ({len(daemon_logs)}): {pattern} ({kept})"))
    lines.append(Text(f"  process logs: {rack.logs_dir}"))
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
    if report.ok:
        lines.append(
            Text(
                "every check held: all workers ran with channel0, and nothing was left behind",
                style="bold green",
            )
        )
    else:
        lines.append(Text("checks failed:", style="bold red"))
        lines += [Text(f"  - {problem}", style="red") for problem in report.problems]
    return Group(*lines)
