"""What the command-line tests share: the demo's log (`log`: the controller's and the plugins' events of a
4-node domain, written once per module) and `invoke`, which runs a command and refuses a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from cdctl.cli.demo import write_scenario
from cdctl.cli.errors import run
from cdctl.cli.main import cli


@pytest.fixture(scope="module")
def log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("log") / "events.db"
    run(write_scenario(path, nodes=4))
    return path


def invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    assert "Traceback" not in result.output + result.stderr
    return result.exit_code, result.stdout, result.stderr
