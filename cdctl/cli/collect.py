"""`cdctl collect`: gather every component's event log through the Kubernetes API into one collected file.

Flags to cdctl.collect.run.CollectSettings; a progress bar (sources and events) on a terminal's stderr; a
summary table of what each log gave. Exit codes: 0 every source collected; 4 a pod or a log was skipped or
cut short (listed, and recorded in the file with its error), unless `--allow-partial`; 2 bad input; 3 a file
that is not a collected file; 1 the collection could not run at all (no pods, not allowed to list them).
docs/collect.md is the operator's guide.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

from cdctl.cli.errors import fail, guarded, parse_time, run
from cdctl.collect.fetch import NoProgress
from cdctl.collect.run import CollectSettings, Summary, collect
from cdctl.domain.errors import InvalidInput
from cdctl.k8s.tokens import parse_service_account

EXIT_PARTIAL = 4
DEFAULT_NAMESPACE = "cdctl-system"


class BarProgress:
    """Sources done out of those seen, and one bar of events per log being read."""

    def __init__(self, console: Console) -> None:
        self.bar = Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            console=console, transient=False,
        )  # fmt: skip
        self.sources = self.bar.add_task("sources", total=0)
        self.seen = 0
        self.tasks: dict[str, TaskID] = {}

    def started(self, name: str, total: int) -> None:
        self.tasks[name] = self.bar.add_task(f"  {name}", total=total or None)
        self.seen += 1
        self.bar.update(self.sources, total=self.seen)

    def advance(self, name: str, events: int) -> None:
        if name in self.tasks:
            self.bar.advance(self.tasks[name], events)

    def finished(self, name: str, status: str) -> None:
        task = self.tasks.pop(name, None)
        if task is not None:
            self.bar.remove_task(task)
        else:
            self.seen += 1  # never started: skipped before its stream began
            self.bar.update(self.sources, total=self.seen)
        self.bar.advance(self.sources, 1)


def _print_summary(summary: Summary, as_json: bool) -> None:
    if as_json:
        body = {
            "output": str(summary.output),
            "collection": summary.collection,
            "domains": list(summary.domains),
            "events": summary.events,
            "outcome": "partial" if summary.partial else "complete",
            "sources": [
                {"name": o.name, "component": o.component, "node": o.node, "pod": o.pod, "log": o.log,
                 "status": o.status, "events": o.events, "error": o.error}
                for o in summary.outcomes
            ],
        }  # fmt: skip
        click.echo(json.dumps(body, sort_keys=True))
        return
    table = Table(title="collected", header_style="bold")
    for column in ("source", "node", "status", "new events", "error"):
        table.add_column(column, overflow="fold")
    for o in summary.outcomes:
        table.add_row(o.name, o.node, o.status, str(o.events), o.error)
    console = Console(soft_wrap=True) if sys.stdout.isatty() else Console(width=240)
    console.print(table)
    outcome = "partial" if summary.partial else "complete"
    click.echo(
        f"{summary.events} new events from {len(summary.outcomes)} sources into {summary.output}"
        f" (collection {summary.collection}): {outcome}"
    )


@click.command("collect")
@click.option(
    "-o", "--output", required=True, type=click.Path(path_type=Path),
    help="The collected file (created, or added to: a later run fetches only what is new).",
)  # fmt: skip
@click.option(
    "-n", "--namespace", envvar="CDCTL_NAMESPACE", default=DEFAULT_NAMESPACE, show_default=True,
    help="The driver namespace (where the chart is installed).",
)  # fmt: skip
@click.option("--kubeconfig", envvar="KUBECONFIG", default=None, help="Kubeconfig file (the operator's).")
@click.option(
    "--since", help="Only events recorded at or after (for sources new to the file): ISO 8601 or 2h."
)
@click.option(
    "--domain", "domains", multiple=True, metavar="UID|NAMESPACE/NAME",
    help="Only these ComputeDomains: their streams in the controller's and plugins' logs, their daemons'.",
)  # fmt: skip
@click.option("--node", "nodes", multiple=True, help="Only the kubelet plugins of these nodes (repeatable).")
@click.option(
    "--selector", default="", help="More label selector for the pods, e.g. app.kubernetes.io/instance=X."
)
@click.option(
    "--service-account", default="", metavar="NAMESPACE/NAME",
    help="The reader whose tokens to mint (default: the one each pod names, in the driver namespace).",
)  # fmt: skip
@click.option(
    "--concurrency", default=8, show_default=True, type=click.IntRange(1, 64), help="Pods read at once."
)
@click.option("--allow-partial", is_flag=True, help="Exit 0 even when a source was skipped or cut short.")
@click.option(
    "--progress/--no-progress", "show_progress", default=None, help="Progress bar [default: on a TTY]."
)
@click.option("--json", "as_json", is_flag=True, help="The summary as one JSON document.")
@guarded
def collect_command(
    output: Path,
    namespace: str,
    kubeconfig: str | None,
    since: str | None,
    domains: tuple[str, ...],
    nodes: tuple[str, ...],
    selector: str,
    service_account: str,
    concurrency: int,
    allow_partial: bool,
    show_progress: bool | None,
    as_json: bool,
) -> None:
    """Gather the event logs of every controller replica, kubelet plugin and IMEX daemon into one file.

    Through the Kubernetes API only (pods/proxy and a short-lived collector token: the chart's
    <fullname>-collector Role); verify it with `cdctl verify --db FILE`, query it with the other history
    commands.
    """
    since_text = parse_time(since, "--since").isoformat(timespec="microseconds") if since else ""
    if service_account:
        try:
            if parse_service_account(service_account)[0] != namespace:
                raise ValueError(f"{service_account!r} is not in the driver namespace {namespace}")
        except ValueError as exc:
            raise InvalidInput("command line", "--service-account", str(exc)) from None
    settings = CollectSettings(
        output=output, namespace=namespace, kubeconfig=kubeconfig, since=since_text, domains=domains,
        nodes=nodes, selector=selector, service_account=service_account, concurrency=concurrency,
    )  # fmt: skip
    console = Console(stderr=True)
    shown = console.is_terminal if show_progress is None else show_progress
    if shown:
        bar = BarProgress(console)
        with bar.bar:
            summary = run(collect(settings, bar))
    else:
        summary = run(collect(settings, NoProgress()))
    _print_summary(summary, as_json)
    if summary.partial:
        for outcome in summary.partial:
            where = f"{outcome.name} ({outcome.log})" if outcome.log else f"pod {outcome.pod}"
            click.echo(f"cdctl: collect: {where} {outcome.status}: {outcome.error}", err=True)
        if not allow_partial:
            missing = len(summary.partial)
            fail(
                f"{missing} source(s) not fully collected; see above (--allow-partial to accept)",
                EXIT_PARTIAL,
            )
