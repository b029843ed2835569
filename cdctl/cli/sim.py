"""`cdctl sim ...`: the local simulated cluster (API server, cluster, rack). Thin: flags -> cdctl.sim.

`cdctl sim rack` (what `make demo` runs) loads the rack modules only when it runs.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from cdctl.sim.apiserver.server import serve_until_stopped
from cdctl.sim.apiserver.settings import ServerSettings
from cdctl.sim.node.topology import NODES_PER_RACK, build_topology
from cdctl.sim.rack.cluster import serve_cluster_until_stopped

F = TypeVar("F", bound=Callable[..., Any])


def api_server_endpoint(command: F) -> F:
    """--port and --kubeconfig-out: where the simulated API server listens and where its kubeconfig goes."""
    command = click.option(
        "--kubeconfig-out",
        type=click.Path(dir_okay=False, path_type=Path),
        envvar="CDCTL_SIM_KUBECONFIG_OUT",
        help="Write a kubeconfig pointing at the server to this file.",
    )(command)
    return click.option(
        "--port",
        type=click.IntRange(0, 65535),
        default=6443,
        show_default=True,
        envvar="CDCTL_SIM_PORT",
        help="TCP port of the API server on 127.0.0.1 (0 picks a free one).",
    )(command)


@click.group()
def sim() -> None:
    """Run the local simulated cluster (no Kubernetes, no GPU needed)."""


@sim.command("apiserver")
@api_server_endpoint
@click.option(
    "--history-window",
    type=click.IntRange(1),
    default=1000,
    show_default=True,
    envvar="CDCTL_SIM_HISTORY_WINDOW",
    help="Watch events retained; older resourceVersions get 410 Gone.",
)
def apiserver(port: int, kubeconfig_out: Path | None, history_window: int) -> None:
    """Serve a simulated Kubernetes API server on loopback until stopped (SIGTERM or Ctrl-C)."""
    settings = ServerSettings(port=port, history_window=history_window)
    try:
        asyncio.run(serve_until_stopped(settings, kubeconfig_out))
    except OSError as error:
        raise click.ClickException(f"cannot serve on 127.0.0.1:{port}: {error.strerror or error}") from error


@sim.command("cluster")
@api_server_endpoint
@click.option(
    "--work-dir",
    type=click.Path(file_okay=False, path_type=Path),
    envvar="CDCTL_SIM_WORK_DIR",
    help="Per-node kubelet directories (default: a new directory under /tmp).",
)
@click.option(
    "--racks",
    type=click.IntRange(1),
    default=1,
    show_default=True,
    envvar="CDCTL_SIM_RACKS",
    help="Racks of GPU nodes, one NVLink clique each.",
)
@click.option(
    "--nodes-per-rack",
    type=click.IntRange(1),
    default=NODES_PER_RACK,
    show_default=True,
    envvar="CDCTL_SIM_NODES_PER_RACK",
    help="Nodes per rack.",
)
def cluster(
    port: int, kubeconfig_out: Path | None, work_dir: Path | None, racks: int, nodes_per_rack: int
) -> None:
    """Serve the API server with the stand-in controllers and one kubelet per simulated node until stopped."""
    directory = work_dir or Path(tempfile.mkdtemp(prefix="cdctl-sim-", dir="/tmp"))
    topology = build_topology(racks=racks, nodes_per_rack=nodes_per_rack)
    try:
        asyncio.run(
            serve_cluster_until_stopped(directory, topology, ServerSettings(port=port), kubeconfig_out)
        )
    except OSError as error:
        raise click.ClickException(f"cannot serve on 127.0.0.1:{port}: {error.strerror or error}") from error


@sim.command("rack")
@click.option(
    "--nodes",
    type=click.IntRange(1, 72),
    default=NODES_PER_RACK,
    show_default=True,
    envvar="CDCTL_SIM_NODES",
    help="GPU nodes per rack (one NVLink clique); the job has one worker per node.",
)
@click.option(
    "--racks",
    type=click.IntRange(1, 16),
    default=1,
    show_default=True,
    envvar="CDCTL_SIM_RACKS",
    help="Racks in the one ComputeDomain; one job per rack.",
)
@click.option(
    "--mode",
    type=click.Choice(["driver-managed", "host-managed"]),
    default="driver-managed",
    show_default=True,
    envvar="CDCTL_SIM_MODE",
    help="driver-managed: an IMEX daemon pod per node and domain; host-managed: HostManagedIMEX, no daemons.",
)
@click.option(
    "--keep",
    "keep",
    type=click.Path(file_okay=False, path_type=Path),
    envvar="CDCTL_SIM_KEEP",
    help="Directory for the rack's files (event logs, process logs, node directories), kept after the run "
    "[default: a new directory under /tmp, also kept].",
)
@click.option(
    "--rack-domains",
    is_flag=True,
    envvar="CDCTL_SIM_RACK_DOMAINS",
    help="The controller creates one ComputeDomain per rack as it joins (cdctl controller --rack-domains); "
    "each rack's job uses its imex-channel-<rack> template, and the domain goes when the rack leaves.",
)
@click.option(
    "--hold",
    "hold_s",
    type=click.FloatRange(min=0),
    default=0,
    envvar="CDCTL_SIM_HOLD",
    metavar="SECONDS",
    help="Keep the formed rack running this long (Ctrl-C ends it early) before the teardown, and print how "
    "to point kubectl and cdctl collect at it (kubeconfig: <keep dir>/kubeconfig).",
)
@click.option(
    "--isolation",
    type=click.Choice(["domain", "channel"]),
    default="domain",
    show_default=True,
    envvar="IMEX_ISOLATION",
    help="domain: an IMEX domain per ComputeDomain; channel: one per NVLink clique, a channel per domain "
    "(docs/channel-isolation.md).",
)
@click.option(
    "--domains",
    type=click.IntRange(1, 64),
    default=1,
    show_default=True,
    help="ComputeDomains sharing the rack (--isolation channel), each in its own namespace, with single-GPU "
    "pods.",
)
@click.option(
    "--pods-per-domain",
    type=click.IntRange(1, 288),
    help="Single-GPU pods of each domain per rack (--isolation channel) [default: the rack's GPUs split "
    "evenly].",
)
@click.option(
    "--imex-channel-count",
    type=click.IntRange(2, 2048),
    help="Channels per IMEX domain (--isolation channel; channel 0 is never handed out) [default: 2048].",
)
@click.option(
    "--fault",
    "faults",
    multiple=True,
    metavar="KIND:NODE[:SECONDS]",
    help="Inject a fault while the domain forms, for cdctl explain to find (repeatable): slow-node (its "
    "kubelet stops SECONDS, default 3), imex-crash (its IMEX is killed once it runs), power-loss (off once "
    "its daemon runs, on SECONDS later, default 2), channels-exhausted (--isolation channel: another "
    "team's domain with a pod on the node holds a channel of its clique, released SECONDS after the rack's "
    "domains are created, default 3; one domain waits for it).",
)
def rack(
    nodes: int,
    racks: int,
    mode: str,
    keep: Path | None,
    rack_domains: bool,
    hold_s: float,
    isolation: str,
    domains: int,
    pods_per_domain: int | None,
    imex_channel_count: int | None,
    faults: tuple[str, ...],
) -> None:
    """A GB200 NVL72 rack end to end: real controller, plugins and daemons; a job forms and is torn down."""
    from cdctl.sim.rack.rackcommand import RackOptions, run_rack_command

    directory = keep.resolve() if keep else Path(tempfile.mkdtemp(prefix="cdctl-rack-", dir="/tmp"))
    options = RackOptions(isolation, domains, pods_per_domain, imex_channel_count, faults)
    raise SystemExit(run_rack_command(directory, nodes, racks, mode, rack_domains, options, hold_s))


def register(root: click.Group) -> None:
    root.add_command(sim)
