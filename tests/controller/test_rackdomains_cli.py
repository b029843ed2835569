"""`cdctl controller` rack-domain flags: off by default, each with an environment twin, bad values refused."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from cdctl.cli import controller as cli
from cdctl.controller.settings import ControllerSettings

BASE = ["--pod-name", "p", "--image-name", "img", "--log-verbosity-cd-daemon", "4"]
RACK_FLAGS = {
    "--rack-domains": "RACK_DOMAINS",
    "--rack-label": "RACK_LABEL",
    "--rack-domain-namespace": "RACK_DOMAIN_NAMESPACE",
    "--rack-domain-name": "RACK_DOMAIN_NAME",
}


def test_every_rack_flag_has_its_environment_twin() -> None:
    options = {opt: param for param in cli.controller.params for opt in param.opts}
    for flag, env in RACK_FLAGS.items():
        assert options[flag].envvar == env, flag


def test_rack_domains_are_off_by_default(captured: list[ControllerSettings]) -> None:
    result = CliRunner().invoke(cli.controller, BASE, env={})
    assert result.exit_code == 0, result.output
    settings = captured[0]
    assert (settings.rack_domains, settings.rack_label, settings.rack_domain_namespace) == (
        False,
        "nvidia.com/gpu.clique",
        "default",
    )
    assert settings.rack_domain_name_pattern == "{rack}"


def test_the_environment_alone_turns_rack_domains_on(captured: list[ControllerSettings]) -> None:
    env = {
        "POD_NAME": "p",
        "IMAGE_NAME": "img",
        "LOG_VERBOSITY_CD_DAEMON": "4",
        "RACK_DOMAINS": "true",
        "RACK_LABEL": "ds.coreweave.com/nvlink.domain",
        "RACK_DOMAIN_NAMESPACE": "training",
        "RACK_DOMAIN_NAME": "rack-{rack}",
    }
    result = CliRunner().invoke(cli.controller, [], env=env)
    assert result.exit_code == 0, result.output
    settings = captured[0]
    assert settings.rack_domains is True
    assert settings.rack_label == "ds.coreweave.com/nvlink.domain"
    assert settings.rack_domain_namespace == "training"
    assert settings.rack_domain_name_pattern == "rack-{rack}"


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--rack-domain-name", "rack", "must contain {rack} once"),
        ("--rack-label", "/x", "not a Kubernetes label"),
    ],
)
def test_invalid_rack_settings_stop_the_command_with_one_line(
    captured: list[ControllerSettings], flag: str, value: str, message: str
) -> None:
    result = CliRunner().invoke(cli.controller, [*BASE, "--rack-domains", flag, value], env={})
    assert result.exit_code != 0
    assert message in result.output and "Traceback" not in result.output
    assert captured == []
