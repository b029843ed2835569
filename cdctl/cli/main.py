"""The `cdctl` console script: one click group, each area's commands in a module of its own.

Called by the `cdctl` entry point (pyproject) and by `python -m cdctl`. Every command maps typed errors to a
one-line message and a non-zero exit code (see cdctl.cli.errors); no traceback reaches the operator.
"""

from __future__ import annotations

import click

from cdctl import __version__
from cdctl.cli import controller, demo, history, plugin, sim


@click.group(context_settings={"help_option_names": ["-h", "--help"], "auto_envvar_prefix": "CDCTL"})
@click.version_option(__version__, prog_name="cdctl")
def cli() -> None:
    """Control plane for NVIDIA IMEX ComputeDomains, with an auditable event log."""


history.register(cli)
demo.register(cli)
sim.register(cli)
controller.register(cli)
plugin.register(cli)


def main() -> None:
    cli()
