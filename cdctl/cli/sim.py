"""`cdctl sim ...`: the local simulated cluster (API server, rack). Thin: flags -> cdctl.sim entry points."""

from __future__ import annotations

import asyncio
from pathlib import Path

import click

from cdctl.sim.server import serve_until_stopped
from cdctl.sim.settings import ServerSettings


@click.group()
def sim() -> None:
    """Run the local simulated cluster (no Kubernetes, no GPU needed)."""


@sim.command("apiserver")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=6443,
    show_default=True,
    envvar="CDCTL_SIM_PORT",
    help="TCP port on 127.0.0.1 (0 picks a free one).",
)
@click.option(
    "--kubeconfig-out",
    type=click.Path(dir_okay=False, path_type=Path),
    envvar="CDCTL_SIM_KUBECONFIG_OUT",
    help="Write a kubeconfig pointing at the server to this file.",
)
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


def register(root: click.Group) -> None:
    root.add_command(sim)
