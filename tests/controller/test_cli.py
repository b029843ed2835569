"""`cdctl controller`: every flag of reference section 7 with its environment twin, gates, durations."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from cdctl.api.isolation import ImexIsolation
from cdctl.cli import controller as cli
from cdctl.controller.leader import LeadershipLost
from cdctl.controller.settings import ControllerSettings

REFERENCE_FLAGS = {
    "--pod-name": "POD_NAME",
    "--namespace": "NAMESPACE",
    "--image-name": "IMAGE_NAME",
    "--cd-daemon-image-pull-secret-names": "CD_DAEMON_IMAGE_PULL_SECRET_NAMES",
    "--log-verbosity-cd-daemon": "LOG_VERBOSITY_CD_DAEMON",
    "--max-nodes-per-imex-domain": "MAX_NODES_PER_IMEX_DOMAIN",
    "--http-endpoint": "HTTP_ENDPOINT",
    "--metrics-path": "METRICS_PATH",
    "--pprof-path": "PPROF_PATH",
    "--additional-namespaces": "ADDITIONAL_NAMESPACES",
    "--leader-election-enabled": "LEADER_ELECTION_ENABLED",
    "--leader-election-lease-lock-namespace": "LEADER_ELECTION_LEASE_LOCK_NAMESPACE",
    "--leader-election-lease-lock-name": "LEADER_ELECTION_LEASE_LOCK_NAME",
    "--leader-election-lease-duration": "LEADER_ELECTION_LEASE_DURATION",
    "--leader-election-renew-deadline": "LEADER_ELECTION_RENEW_DEADLINE",
    "--leader-election-retry-period": "LEADER_ELECTION_RETRY_PERIOD",
    "--kubeconfig": "KUBECONFIG",
    "--kube-api-qps": "KUBE_API_QPS",
    "--kube-api-burst": "KUBE_API_BURST",
    "--feature-gates": "FEATURE_GATES",
    "--imex-mode": "IMEX_MODE",
}


def test_every_reference_flag_exists_with_its_environment_twin() -> None:
    options = {opt: param for param in cli.controller.params for opt in param.opts}
    for flag, env in REFERENCE_FLAGS.items():
        assert flag in options, flag
        assert options[flag].envvar == env, flag


def test_defaults_are_the_go_drivers(captured: list[ControllerSettings]) -> None:
    result = CliRunner().invoke(
        cli.controller, ["--pod-name", "p", "--image-name", "img", "--log-verbosity-cd-daemon", "4"], env={}
    )
    assert result.exit_code == 0, result.output
    (settings,) = captured
    assert settings.namespace == "default"
    assert settings.max_nodes_per_imex_domain == 18
    assert settings.metrics_path == "/metrics"
    assert (settings.kube_api_qps, settings.kube_api_burst) == (5.0, 10)
    election = settings.leader_election
    assert not election.enabled
    assert (election.lease_lock_namespace, election.lease_lock_name) == (
        "default",
        "nvidia-compute-domain-controller",
    )
    assert (election.lease_duration_s, election.renew_deadline_s, election.retry_period_s) == (
        15.0,
        10.0,
        2.0,
    )
    assert settings.feature_gates.enabled("ComputeDomainCliques")
    assert settings.feature_gates.enabled("IMEXDaemonsWithDNSNames")


def test_the_environment_alone_configures_everything(captured: list[ControllerSettings]) -> None:
    env = {
        "POD_NAME": "ctrl-1",
        "NAMESPACE": "nvidia-dra",
        "IMAGE_NAME": "example/cdctl:2",
        "CD_DAEMON_IMAGE_PULL_SECRET_NAMES": "a, b",
        "LOG_VERBOSITY_CD_DAEMON": "6",
        "LOG_FORMAT": "json",
        "MAX_NODES_PER_IMEX_DOMAIN": "9",
        "HTTP_ENDPOINT": ":8080",
        "METRICS_PATH": "/m",
        "PPROF_PATH": "/debug",
        "ADDITIONAL_NAMESPACES": "x,y",
        "LEADER_ELECTION_ENABLED": "true",
        "LEADER_ELECTION_LEASE_LOCK_NAMESPACE": "nvidia-dra",
        "LEADER_ELECTION_LEASE_LOCK_NAME": "lock",
        "LEADER_ELECTION_LEASE_DURATION": "1m30s",
        "LEADER_ELECTION_RENEW_DEADLINE": "20s",
        "LEADER_ELECTION_RETRY_PERIOD": "500ms",
        "KUBECONFIG": "/tmp/kc",
        "KUBE_API_QPS": "50",
        "KUBE_API_BURST": "100",
        "FEATURE_GATES": "ComputeDomainCliques=false,",
        "CDCTL_DB": "/var/lib/cdctl/controller.db",
        "BATCH_WINDOW": "250ms",
    }
    result = CliRunner().invoke(cli.controller, [], env=env)
    assert result.exit_code == 0, result.output
    (s,) = captured
    assert (s.pod_name, s.namespace, s.image_name) == ("ctrl-1", "nvidia-dra", "example/cdctl:2")
    assert s.daemon_image_pull_secret_names == ("a", "b")
    assert (s.log_verbosity_cd_daemon, s.max_nodes_per_imex_domain) == (6, 9)
    assert s.log_format == "json"  # handed on to the daemon pods
    assert (s.http_endpoint, s.metrics_path, s.pprof_path) == (":8080", "/m", "/debug")
    assert s.managed_namespaces == ("nvidia-dra", "x", "y")
    election = s.leader_election
    assert election.enabled and (election.lease_lock_namespace, election.lease_lock_name) == (
        "nvidia-dra",
        "lock",
    )
    assert (election.lease_duration_s, election.renew_deadline_s, election.retry_period_s) == (
        90.0,
        20.0,
        0.5,
    )
    assert (s.kubeconfig, s.kube_api_qps, s.kube_api_burst) == ("/tmp/kc", 50.0, 100)
    assert not s.feature_gates.enabled("ComputeDomainCliques")
    assert s.db_path == "/var/lib/cdctl/controller.db"
    assert s.batch_window_s == 0.25


def test_required_flags_unknown_gates_invalid_combinations_and_arguments_are_rejected(
    captured: list[ControllerSettings],
) -> None:
    base = ["--pod-name", "p", "--image-name", "img", "--log-verbosity-cd-daemon", "4"]
    runner = CliRunner()
    missing = runner.invoke(cli.controller, ["--pod-name", "p"], env={})
    assert missing.exit_code == 2 and "--image-name" in missing.output
    unknown = runner.invoke(cli.controller, [*base, "--feature-gates", "NoSuchGate=true"], env={})
    assert unknown.exit_code == 2 and "NoSuchGate" in unknown.output
    invalid = runner.invoke(
        cli.controller,
        [*base, "--feature-gates", "IMEXDaemonsWithDNSNames=false,ComputeDomainCliques=true"],
        env={},
    )
    assert invalid.exit_code == 2
    assert (
        "feature gate ComputeDomainCliques requires IMEXDaemonsWithDNSNames to also be enabled"
        in invalid.output
    )
    positional = runner.invoke(cli.controller, [*base, "extra"], env={})
    assert positional.exit_code == 2
    bad_duration = runner.invoke(cli.controller, [*base, "--leader-election-retry-period", "soon"], env={})
    assert bad_duration.exit_code == 2 and "invalid duration" in bad_duration.output
    elected = [*base, "--leader-election-enabled"]
    for flags, named in (
        (
            [
                "--leader-election-lease-duration",
                "2s",
                "--leader-election-renew-deadline",
                "2s",
                "--leader-election-retry-period",
                "1s",
            ],
            "lease-duration",
        ),
        (
            ["--leader-election-renew-deadline", "2s", "--leader-election-retry-period", "2s"],
            "renew-deadline",
        ),
        (["--leader-election-retry-period", "0s"], "retry-period"),
    ):
        refused = runner.invoke(cli.controller, [*elected, *flags], env={})
        assert refused.exit_code == 2 and f"--leader-election-{named}" in refused.output, refused.output
    unchecked = runner.invoke(cli.controller, [*base, "--leader-election-lease-duration", "1s"], env={})
    assert unchecked.exit_code == 0  # without leader election the durations are not used
    assert len(captured) == 1
    captured.clear()
    assert captured == []


@pytest.mark.parametrize(
    ("text", "seconds"), [("15s", 15.0), ("1m30s", 90.0), ("250ms", 0.25), ("2", 2.0), ("1h", 3600.0)]
)
def test_go_durations(text: str, seconds: float) -> None:
    assert cli.parse_duration(text) == seconds


def test_losing_the_lease_exits_non_zero_with_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    async def losing(settings: ControllerSettings) -> None:
        raise LeadershipLost("lease lock lost by p-1234")

    monkeypatch.setattr(cli, "serve", losing)
    result = CliRunner().invoke(
        cli.controller, ["--pod-name", "p", "--image-name", "img", "--log-verbosity-cd-daemon", "4"], env={}
    )
    assert result.exit_code == 1
    assert result.output.strip().splitlines()[-1] == "cdctl controller: lease lock lost by p-1234"


def test_a_fatal_start_up_error_is_one_line_without_a_traceback(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
        "clusters: [{name: k, cluster: {server: 'http://127.0.0.1:9'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
    )
    args = [
        "--pod-name",
        "p",
        "--image-name",
        "img",
        "--log-verbosity-cd-daemon",
        "4",
        "--kubeconfig",
        str(kubeconfig),
    ]
    result = CliRunner().invoke(cli.controller, args, env={})
    assert result.exit_code == 1
    last = result.output.strip().splitlines()[-1]
    assert last.startswith("cdctl controller: TransportError: 0 Transport: GET /apis/resource.k8s.io")
    assert "Traceback" not in result.output


def test_the_go_drivers_host_managed_spelling_configures_host_managed_mode(
    captured: list[ControllerSettings],
) -> None:
    env = {
        "POD_NAME": "c", "IMAGE_NAME": "i", "LOG_VERBOSITY_CD_DAEMON": "2",
        "FEATURE_GATES": "HostManagedIMEXDaemon=true,ConsumableShares=true,", "IMEX_MODE": "hostManaged",
    }  # fmt: skip
    result = CliRunner().invoke(cli.controller, [], env=env)
    assert result.exit_code == 0, result.output
    (s,) = captured
    assert s.feature_gates.enabled("HostManagedIMEX")
    assert not s.driver_managed_daemons


def test_channel_isolation_from_the_environment_shares_the_cliques_daemon(
    captured: list[ControllerSettings],
) -> None:
    """The flags themselves (default, flag, environment, refusals): tests/cli/test_isolation_options.py."""
    base = ["--pod-name", "p", "--image-name", "i", "--log-verbosity-cd-daemon", "1"]
    env = {"IMEX_ISOLATION": "channel", "IMEX_CHANNEL_COUNT": "4"}
    assert CliRunner().invoke(cli.controller, base, env=env).exit_code == 0
    assert (captured[-1].imex_isolation, captured[-1].imex_channel_count) == (ImexIsolation.CHANNEL, 4)
    assert captured[-1].channel_isolation and not captured[-1].per_domain_daemons
