"""`cdctl version` and `cdctl completion bash|zsh|fish`: what a shell user expects of a command-line tool.

`version` says which cdctl this is and which file formats it reads and writes (the event log's schema, the
collected file's), as text or, like the reading commands, `-o json|yaml` (cdctl.cli.output). `completion`
prints the script a shell sources to complete cdctl's commands, options and choices: Click's own completion
machinery, which the `cdctl` entry point answers through `_CDCTL_COMPLETE` (cdctl.cli.main).
"""

from __future__ import annotations

import platform
import sqlite3

import click
from click.shell_completion import get_completion_class

from cdctl import __version__
from cdctl.cli.output import output_option, print_document

SHELLS = ("bash", "zsh", "fish")
PROG = "cdctl"
COMPLETE_VAR = "_CDCTL_COMPLETE"


def version_info() -> dict[str, object]:
    """What `cdctl version -o json` prints (docs/cli.md)."""
    from cdctl.store.collected import SCHEMA_VERSION as COLLECTED_SCHEMA
    from cdctl.store.schema import load_migrations

    return {
        "cdctl": __version__,
        "event_log_schema": load_migrations()[-1].number,
        "collected_file_schema": COLLECTED_SCHEMA,
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
    }


@click.command()
@output_option
def version(output: str) -> None:
    """Print cdctl's version and the file formats it reads and writes."""
    info = version_info()
    if output in ("json", "yaml"):
        print_document(output, info)
        return
    click.echo(f"cdctl {info['cdctl']}")
    click.echo(
        f"event log schema {info['event_log_schema']}, collected file schema {info['collected_file_schema']}"
    )
    click.echo(f"python {info['python']}, SQLite {info['sqlite']}")


@click.command()
@click.argument("shell", type=click.Choice(SHELLS))
def completion(shell: str) -> None:
    """Print the shell completion script for SHELL.

    \b
    bash:  source <(cdctl completion bash)      # or add that line to ~/.bashrc
    zsh:   source <(cdctl completion zsh)       # in ~/.zshrc, after compinit
    fish:  cdctl completion fish > ~/.config/fish/completions/cdctl.fish
    """
    from cdctl.cli.main import cli

    completer = get_completion_class(shell)
    assert completer is not None  # every name in SHELLS is one Click ships
    click.echo(completer(cli, {}, PROG, COMPLETE_VAR).source())
