"""The command surface: every name loads its command, and loading the root pulls in no component."""

from __future__ import annotations

import subprocess
import sys

import click
import pytest

from cdctl.cli.main import COMMANDS, cli


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_command_name_loads_its_command(name: str) -> None:
    command = cli.get_command(click.Context(cli), name)
    assert isinstance(command, click.Command) and command.name == name


def test_unknown_commands_are_refused() -> None:
    assert cli.get_command(click.Context(cli), "frobnicate") is None


def test_the_root_and_the_history_commands_do_not_import_the_cluster_stack() -> None:
    heavy = ("kubernetes_asyncio", "grpclib", "cdctl.sim", "cdctl.controller")
    probe = (
        "import sys; from cdctl.cli.main import cli; import cdctl.cli.history; "
        f"print(sorted(m for m in {heavy!r} if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert result.stdout.strip() == "[]"
