"""`cdctl sim ...`: the local simulated cluster (API server, rack). Thin: flags -> cdctl.sim entry points."""

from __future__ import annotations

import click


@click.group()
def sim() -> None:
    """Run the local simulated cluster (no Kubernetes, no GPU needed)."""


def register(root: click.Group) -> None:
    root.add_command(sim)
