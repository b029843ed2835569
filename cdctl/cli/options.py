"""Options the reading commands share: `db_option`, the `--db` of an event log or a collected file.

Used by cdctl.cli.history, cdctl.cli.timeline and cdctl.cli.explain.
"""

from __future__ import annotations

from pathlib import Path

import click

db_option = click.option(
    "--db", "db", required=True, envvar="CDCTL_DB", type=click.Path(path_type=Path),
    help="Event log file, or a collected file (env CDCTL_DB).",
)  # fmt: skip
