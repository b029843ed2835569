"""`--imex-isolation` and `--imex-channel-count` (cdctl.cli.isolation) on both commands that take them,
`cdctl controller` and `cdctl kubelet-plugin`: the default, the flag, the environment twin the chart sets, and
a bad value from either refused before the command starts, in one error line naming the flag and the value.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import click
import pytest
from click.testing import CliRunner, Result

from cdctl.api.isolation import ImexIsolation
from cdctl.cli import controller as controller_cli
from cdctl.cli import plugin as plugin_cli
from cdctl.controller.settings import ControllerSettings
from cdctl.plugin.pluginconfig import PluginConfig

# What each command needs besides the two flags, given through the environment.
REQUIRED = {
    "controller": {"POD_NAME": "p", "IMAGE_NAME": "img", "LOG_VERBOSITY_CD_DAEMON": "1"},
    "kubelet-plugin": {"NODE_NAME": "n1"},
}


@dataclass
class Started:
    """One command, run with given flags and environment; what it would have started with lands in `seen`."""

    command: click.Command
    required: dict[str, str]
    seen: list[tuple[ImexIsolation, int]] = field(default_factory=list)

    def __call__(self, args: list[str], env: dict[str, str] | None = None) -> Result:
        clean = {"IMEX_ISOLATION": None, "IMEX_CHANNEL_COUNT": None}  # none leaks from the test's environment
        return CliRunner().invoke(self.command, args, env={**clean, **self.required, **(env or {})})


@pytest.fixture(params=["controller", "kubelet-plugin"])
def started(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Started:
    if request.param == "controller":
        run = Started(controller_cli.controller, REQUIRED["controller"])
    else:
        run = Started(plugin_cli.kubelet_plugin, REQUIRED["kubelet-plugin"])

    async def controller_serve(settings: ControllerSettings) -> None:
        run.seen.append((settings.imex_isolation, settings.imex_channel_count))

    async def plugin_serve(cfg: PluginConfig) -> None:
        run.seen.append((cfg.isolation, cfg.channel_count))

    monkeypatch.setattr(controller_cli, "serve", controller_serve)
    monkeypatch.setattr(plugin_cli, "_serve", plugin_serve)
    return run


def test_the_default_is_domain_isolation_with_2048_channels(started: Started) -> None:
    result = started([])
    assert result.exit_code == 0, result.output
    assert started.seen == [(ImexIsolation.DOMAIN, 2048)]


def test_the_flags_set_both(started: Started) -> None:
    result = started(["--imex-isolation", "channel", "--imex-channel-count", "4"])
    assert result.exit_code == 0, result.output
    assert started.seen == [(ImexIsolation.CHANNEL, 4)]


def test_the_charts_environment_sets_both_and_a_flag_wins(started: Started) -> None:
    env = {"IMEX_ISOLATION": "channel", "IMEX_CHANNEL_COUNT": "64"}
    assert started([], env).exit_code == 0
    assert started(["--imex-channel-count", "8"], env).exit_code == 0
    assert started.seen == [(ImexIsolation.CHANNEL, 64), (ImexIsolation.CHANNEL, 8)]


BAD = [
    ("--imex-isolation", "IMEX_ISOLATION", "bogus", "must be 'domain' or 'channel', got 'bogus'"),
    ("--imex-isolation", "IMEX_ISOLATION", "channels", "must be 'domain' or 'channel', got 'channels'"),
    ("--imex-channel-count", "IMEX_CHANNEL_COUNT", "0", "must be between 2 and 2048, got 0"),
    ("--imex-channel-count", "IMEX_CHANNEL_COUNT", "4096", "must be between 2 and 2048, got 4096"),
    ("--imex-channel-count", "IMEX_CHANNEL_COUNT", "abc", "must be an integer, got 'abc'"),
]


@pytest.mark.parametrize("source", ["flag", "environment"])
@pytest.mark.parametrize(("flag", "env", "value", "problem"), BAD)
def test_a_bad_value_is_one_line_naming_the_flag_before_the_command_starts(
    started: Started, source: str, flag: str, env: str, value: str, problem: str
) -> None:
    result = started([flag, value]) if source == "flag" else started([], {env: value})
    assert result.exit_code == 2, result.output
    assert started.seen == []
    errors = [line for line in result.stderr.splitlines() if "rror" in line]
    assert errors == [
        f"Error: Invalid value for '{flag}' (env var: '{env}'): IMEX isolation settings: {problem}"
    ]
    assert "Traceback" not in result.output


@pytest.mark.parametrize("command", [controller_cli.controller, plugin_cli.kubelet_plugin])
def test_help_shows_each_flag_with_its_environment_twin(command: click.Command) -> None:
    result = CliRunner().invoke(command, ["--help"])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())  # the help as one line, whatever the wrapping
    isolation = (
        r"--imex-isolation \[domain\|channel\] domain: [^\[]*\[env var: IMEX_ISOLATION; default: domain\]"
    )
    assert re.search(isolation, text)
    count = r"--imex-channel-count INTEGER Channels [^\[]*\[env var: IMEX_CHANNEL_COUNT; default: 2048\]"
    assert re.search(count, text)
