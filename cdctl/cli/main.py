"""The `cdctl` console script: one click group whose commands load on first use.

Called by the `cdctl` entry point (pyproject) and by `python -m cdctl`. A command's module is imported only
when that command runs, so `cdctl daemon check` (a probe, every few seconds on every node) and the history
commands do not pay for the Kubernetes client, gRPC and the simulator. Every command maps typed errors to a
one-line message and a non-zero exit code (see cdctl.cli.errors); no traceback reaches the operator.
"""

from __future__ import annotations

import importlib

import click

from cdctl import __version__

# command name -> (module, attribute): the whole command surface, in one place.
COMMANDS: dict[str, tuple[str, str]] = {
    "controller": ("cdctl.cli.controller", "controller"),
    "kubelet-plugin": ("cdctl.cli.plugin", "kubelet_plugin"),
    "daemon": ("cdctl.cli.daemon", "daemon"),
    "probe": ("cdctl.cli.probe", "probe_command"),
    "sim": ("cdctl.cli.sim", "sim"),
    "demo": ("cdctl.cli.demo", "demo"),
    "events": ("cdctl.cli.history", "events"),
    "sql": ("cdctl.cli.history", "sql"),
    "replay": ("cdctl.cli.history", "replay_command"),
    "verify": ("cdctl.cli.history", "verify"),
    "history": ("cdctl.cli.history", "history"),
    "streams": ("cdctl.cli.history", "streams"),
    "timeline": ("cdctl.cli.timeline", "timeline"),
    "explain": ("cdctl.cli.explain", "explain"),
    "collect": ("cdctl.cli.collect", "collect_command"),
    "version": ("cdctl.cli.shell", "version"),
    "completion": ("cdctl.cli.shell", "completion"),
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(COMMANDS) | set(self.commands))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.commands:
            return self.commands[cmd_name]
        target = COMMANDS.get(cmd_name)
        if target is None:
            return None
        command = getattr(importlib.import_module(target[0]), target[1])
        assert isinstance(command, click.Command)
        return command


@click.group(
    cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "auto_envvar_prefix": "CDCTL"}
)
@click.version_option(__version__, prog_name="cdctl")
def cli() -> None:
    """Control plane for NVIDIA IMEX ComputeDomains, with an auditable event log."""


def main() -> None:
    # One program name however it was started (`python -m cdctl` too), so shell completion's variable is
    # always _CDCTL_COMPLETE (cdctl.cli.shell).
    cli(prog_name="cdctl")
