"""`cdctl demo`: a built-in scenario written through the real event store and projections.

A log to explore in a second, without a cluster (`make demo` runs the simulated rack, `cdctl sim rack`): the
events one ComputeDomain on a GB200 rack produces (controller decisions, daemon and channel claims prepared on
every node, one daemon-not-ready retry, teardown), appended through the store and folded by the projection
runner. It keeps the log it wrote and prints where, with commands to explore it. It never overwrites an
existing log unless told to (`--overwrite`).
"""

from __future__ import annotations

import shlex
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import click

from cdctl.cli.errors import guarded, run
from cdctl.domain.claims import (
    CdiSpecWritten,
    ChannelAllocated,
    ChannelReleased,
    ClaimPrepareCompleted,
    ClaimPrepareFailed,
    ClaimPrepareStarted,
    ClaimUnprepared,
    claim_stream,
)
from cdctl.domain.computedomains import (
    CliqueEntryRemoved,
    CliqueIndexAssigned,
    ComputeDomainObserved,
    ComputeDomainStatusChanged,
    ComputeDomainTornDown,
    DomainActionIntended,
    DomainActionSucceeded,
    domain_stream,
)
from cdctl.domain.errors import InvalidInput
from cdctl.domain.events import Actor, DomainEvent, NewEvent
from cdctl.invocation import cdctl_command, on_path_hint
from cdctl.projections.lifecycle import lifecycle_projections
from cdctl.projections.runner import ProjectionRunner
from cdctl.store import SqliteEventStore, StreamAppend

CDI_VENDOR = "k8s.compute-domain.nvidia.com"
CONTROLLER = Actor("controller", "cdctl-controller-0")


def _plugin(node: str) -> Actor:
    return Actor("kubelet-plugin", f"cdctl-kubelet-plugin-{node}", node)


@dataclass(frozen=True, slots=True)
class Summary:
    events: int
    claims: int
    prepared_at_peak: int
    left_prepared: int
    formation_s: float


async def write_scenario(path: Path, nodes: int) -> Summary:
    domain_uid, namespace, name = str(uuid.uuid4()), "team-a", "nvl72-job"
    domain = domain_stream(domain_uid)
    clique = "c6d1e7b0-3f1d-4c59-9a4e-0d6f5f3c2a10.1"
    node_names = [f"gb200-r01-n{i:02d}" for i in range(1, nodes + 1)]
    started = time.perf_counter()

    async with await SqliteEventStore.open(path) as store:
        runner = ProjectionRunner(store, lifecycle_projections())
        await runner.start()

        async def record(stream: str, actor: Actor, *events: DomainEvent) -> None:
            await store.append(
                stream, [NewEvent.of(e, actor=actor, correlation_id=domain_uid) for e in events]
            )

        async def act(action: str, kind: str, obj: str) -> None:
            await record(
                domain,
                CONTROLLER,
                DomainActionIntended(domain_uid, action, kind, namespace, obj),
                DomainActionSucceeded(domain_uid, action, kind, namespace, obj),
            )

        observed = ComputeDomainObserved(domain_uid, namespace, name, "1", "ADDED", nodes, f"{name}-channel")
        await record(domain, CONTROLLER, observed)
        await act("create", "ResourceClaimTemplate", f"{name}-channel")
        await act("create", "ResourceClaimTemplate", f"computedomain-daemon-claim-{domain_uid}")
        await act("create", "DaemonSet", f"computedomain-daemon-{domain_uid}")

        for index, node in enumerate(node_names):
            uid = str(uuid.uuid5(uuid.NAMESPACE_URL, f"daemon/{domain_uid}/{node}"))
            device = f"{CDI_VENDOR}/claim={uid}-daemon-0"
            await record(
                claim_stream(uid),
                _plugin(node),
                ClaimPrepareStarted(
                    uid, "nvidia-dra", f"daemon-{node}", node, "daemon", domain_uid, "1", ["daemon-0"]
                ),
                CdiSpecWritten(uid, f"/var/run/cdi/{CDI_VENDOR}-claim_{uid}.json", [device]),
                ClaimPrepareCompleted(uid, [device]),
            )
            await record(domain, CONTROLLER, CliqueIndexAssigned(domain_uid, clique, node, index))

        first_worker = str(uuid.uuid5(uuid.NAMESPACE_URL, f"channel/{domain_uid}/{node_names[0]}"))
        await record(
            claim_stream(first_worker),
            _plugin(node_names[0]),
            ClaimPrepareStarted(
                first_worker,
                namespace,
                "worker-0-channel",
                node_names[0],
                "channel",
                domain_uid,
                "1",
                ["channel-0"],
            ),
            ClaimPrepareFailed(first_worker, f"IMEX daemon on {node_names[0]} not ready yet", retriable=True),
        )
        await record(domain, CONTROLLER, ComputeDomainStatusChanged(domain_uid, "Ready", nodes, nodes))

        for index, node in enumerate(node_names):
            uid = str(uuid.uuid5(uuid.NAMESPACE_URL, f"channel/{domain_uid}/{node}"))
            device = f"{CDI_VENDOR}/claim={uid}-channel-0"
            await store.append_batch(
                [
                    StreamAppend(
                        claim_stream(uid),
                        [
                            NewEvent.of(e, actor=_plugin(node), correlation_id=domain_uid)
                            for e in (
                                ClaimPrepareStarted(
                                    uid,
                                    namespace,
                                    f"worker-{index}-channel",
                                    node,
                                    "channel",
                                    domain_uid,
                                    "1",
                                    ["channel-0"],
                                ),
                                ChannelAllocated(uid, node, 0, domain_uid),
                                CdiSpecWritten(uid, f"/var/run/cdi/{CDI_VENDOR}-claim_{uid}.json", [device]),
                                ClaimPrepareCompleted(uid, [device]),
                            )
                        ],
                    )
                ]
            )
        formed = time.perf_counter() - started
        await runner.catch_up()
        claims = runner.view("claim_lifecycle")
        prepared = sum(1 for row in claims.values() if row["state"] == "PrepareCompleted")
        claim_count = len(claims)

        for index, node in enumerate(node_names):
            channel = str(uuid.uuid5(uuid.NAMESPACE_URL, f"channel/{domain_uid}/{node}"))
            daemon = str(uuid.uuid5(uuid.NAMESPACE_URL, f"daemon/{domain_uid}/{node}"))
            await record(
                claim_stream(channel),
                _plugin(node),
                ChannelReleased(channel, node, 0),
                ClaimUnprepared(channel, "pod deleted"),
            )
            await record(claim_stream(daemon), _plugin(node), ClaimUnprepared(daemon, "domain deleted"))
            await record(domain, CONTROLLER, CliqueEntryRemoved(domain_uid, clique, node, index))
        await act("delete", "DaemonSet", f"computedomain-daemon-{domain_uid}")
        await act("delete", "ResourceClaimTemplate", f"{name}-channel")
        await record(domain, CONTROLLER, ComputeDomainTornDown(domain_uid, namespace, name))
        await runner.catch_up()
        leftover = [r for r in runner.view("claim_lifecycle").values() if r["state"] != "Unprepared"]
        return Summary(store.head(), claim_count, prepared, len(leftover), formed)


def explore_commands(path: Path, position: int) -> list[str]:
    """The commands `cdctl demo` prints, each runnable as printed from where the demo ran."""
    cdctl, db = cdctl_command(), shlex.quote(str(path))
    query = shlex.quote("SELECT name, node, state, requested_at, prepared_at FROM claim_lifecycle")
    return [
        f"{cdctl} events --db {db} --stream 'domain/*'",
        f"{cdctl} events --db {db} --type 'ClaimPrepare*' -o wide",
        f"{cdctl} sql --db {db} {query}",
        f"{cdctl} replay --db {db} --position {position}",
        f"{cdctl} history --db {db} computedomain/team-a/nvl72-job",
        f"{cdctl} verify --db {db}",
    ]


@click.command()
@click.option(
    "--nodes", default=18, show_default=True, type=click.IntRange(1, 1152), help="Nodes in the domain."
)
@click.option(
    "--keep",
    "keep",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Directory for the event log (default: ./demo-<time>).",
)
@click.option("--overwrite", is_flag=True, help="Replace an event log already in the --keep directory.")
@guarded
def demo(nodes: int, keep: Path | None, overwrite: bool) -> None:
    """Run the built-in ComputeDomain scenario against a fresh event log and keep it for exploring."""
    directory = keep or Path(f"demo-{datetime.now(UTC):%Y%m%dT%H%M%S}")
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "events.db"
    if path.exists():
        if not overwrite:
            raise InvalidInput("cdctl demo", "--keep", f"{path} already holds an event log; pass --overwrite")
        for stale in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
            stale.unlink(missing_ok=True)
    click.echo("cdctl demo: a built-in scenario written through the real event store and projections")
    click.echo(
        f"  (no cluster: `make demo` runs the simulated rack). One ComputeDomain on {nodes} GB200 nodes.\n"
    )
    summary = run(write_scenario(path, nodes))
    click.echo(f"  events recorded:          {summary.events}")
    click.echo(f"  claims (daemon+channel):  {summary.claims}, prepared at peak {summary.prepared_at_peak}")
    click.echo(f"  formation (log time):     {summary.formation_s:.3f} s")
    click.echo(f"  claims left prepared:     {summary.left_prepared}")
    click.echo(f"\nevent log: {path.resolve()}\n\nexplore it:")
    for command in explore_commands(path, summary.events // 2):
        click.echo(f"  {command}")
    hint = on_path_hint()
    if hint:
        click.echo(f"  {hint}")
    if summary.left_prepared:
        raise SystemExit(1)
