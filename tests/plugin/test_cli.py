"""`cdctl kubelet-plugin` flag and environment handling (the parts that run before any I/O)."""

from __future__ import annotations

import click
from click.testing import CliRunner

from cdctl.cli.main import cli


def root() -> click.Group:
    return cli


def test_help_lists_the_go_driver_flags() -> None:
    out = CliRunner().invoke(root(), ["kubelet-plugin", "--help"])
    assert out.exit_code == 0
    for flag in (
        "--node-name", "--cdi-root", "--nvidia-driver-root", "--host-driver-root", "--container-driver-root",
        "--kubelet-registrar-directory-path", "--kubelet-plugins-directory-path", "--healthcheck-port",
        "--feature-gates", "--fake-nvml", "--proc-devices", "--db", "--kubeconfig", "--imex-mode",
        "--gpu-clique-label-enabled", "--gpu-clique-label", "--clique-refresh-interval",
    ):  # fmt: skip
        assert flag in out.output


def test_node_name_is_required() -> None:
    out = CliRunner().invoke(root(), ["kubelet-plugin"], env={"NODE_NAME": None})
    assert out.exit_code == 2
    assert "--node-name" in out.output


def test_feature_gates_from_the_environment_are_checked_with_a_one_line_error() -> None:
    out = CliRunner().invoke(
        root(), ["kubelet-plugin"], env={"NODE_NAME": "n1", "FEATURE_GATES": "Bogus=true"}
    )
    assert out.exit_code == 2
    assert "unrecognized feature gate" in out.output
    assert "Traceback" not in out.output


def test_bad_fake_nvml_spec_is_a_usage_error() -> None:
    out = CliRunner().invoke(root(), ["kubelet-plugin", "--node-name", "n1", "--fake-nvml", "garbage"])
    assert out.exit_code == 2
    assert "--fake-nvml" in out.output


def test_an_imex_mode_that_contradicts_the_gate_is_refused_before_start() -> None:
    env = {"NODE_NAME": "n1", "FEATURE_GATES": "HostManagedIMEX=true", "IMEX_MODE": "driverManaged"}
    out = CliRunner().invoke(root(), ["kubelet-plugin"], env=env)
    assert out.exit_code == 2
    assert "IMEX mode: driverManaged: conflicts with feature gate HostManagedIMEX=true" in out.output
    assert "Traceback" not in out.output
