"""`cdctl controller`: flags and environment to ControllerSettings, then the controller until SIGTERM.

Registered on the root group by cdctl.cli.main through `register(root)`. The flags are the Go driver's
(reference section 7), each with its environment twin (POD_NAME, NAMESPACE, IMAGE_NAME,
CD_DAEMON_IMAGE_PULL_SECRET_NAMES, LOG_VERBOSITY_CD_DAEMON, MAX_NODES_PER_IMEX_DOMAIN, HTTP_ENDPOINT,
METRICS_PATH, PPROF_PATH, ADDITIONAL_NAMESPACES, LEADER_ELECTION_*, KUBECONFIG, KUBE_API_QPS, KUBE_API_BURST,
FEATURE_GATES), plus cdctl's own (CDCTL_DB, CDCTL_LOG_KEY_FILE, CDCTL_RETENTION_AGE, CDCTL_RETENTION_SIZE,
RESOURCE_API_VERSION, LOG_FORMAT, LOG_VERBOSITY, RACK_DOMAINS, RACK_LABEL, RACK_DOMAIN_NAMESPACE,
RACK_DOMAIN_NAME), and channel isolation's IMEX_ISOLATION and IMEX_CHANNEL_COUNT (cdctl.cli.isolation, shared
with the kubelet plugin). Durations take Go's forms ("15s", "1m30s", "500ms"); with leader election, the
lease duration must exceed the renew deadline, which must exceed 1.2 x the retry period (client-go's rule).
SIGTERM/SIGINT stop cleanly (exit 0, the lease released); losing the lease exits 1; a typed error ends the
command with a one-line reason and its exit code.
"""

from __future__ import annotations

import asyncio
import gc
import re
import signal
import sys
from collections.abc import Callable
from typing import Any

import click
from click.decorators import FC

from cdctl.api.gates import parse_feature_gates
from cdctl.api.isolation import ImexIsolation
from cdctl.cli.isolation import isolation_options
from cdctl.cli.logs import DEFAULT_VERBOSITY, configure_logging
from cdctl.cli.otlp import otlp_option
from cdctl.cli.retention import interval, policy, retention_options
from cdctl.controller.app import run_controller
from cdctl.controller.leader import LeadershipLost, check_durations
from cdctl.controller.settings import ControllerSettings, LeaderElectionSettings
from cdctl.domain.errors import CdctlError, InvalidInput
from cdctl.domain.racks import (
    DEFAULT_NAME_PATTERN,
    DEFAULT_RACK_LABEL,
    validate_name_pattern,
    validate_rack_label,
)
from cdctl.k8s.tokens import parse_service_account

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_UNIT_S = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str) -> float:
    """A Go duration ("15s", "1m30s", "250ms") or plain seconds, in seconds."""
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        pass
    parts = _DURATION_PART.findall(text)
    if not parts or "".join(number + unit for number, unit in parts) != text:
        raise ValueError(f"invalid duration {text!r}: want e.g. 15s, 1m30s or 500ms")
    return sum(float(number) * _UNIT_S[unit] for number, unit in parts)


class Duration(click.ParamType[float]):
    name = "duration"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> float:
        if isinstance(value, int | float):
            return float(value)
        try:
            return parse_duration(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


def option(*names: str, **kwargs: Any) -> Callable[[FC], FC]:
    """A click option whose help shows its environment twin."""
    return click.option(*names, show_envvar=True, **kwargs)


def split_list(value: str) -> tuple[str, ...]:
    return tuple(item.strip() for item in re.split(r"[,\s]+", value or "") if item.strip())


async def serve(settings: ControllerSettings) -> None:
    """Run the controller until SIGTERM/SIGINT (clean return) or a fatal error (raised)."""
    # What is loaded by now (the kubernetes client's modules: most of the process's objects) lives as long
    # as the process; frozen out of the collector's generations, full collections walk only what runs.
    gc.freeze()
    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(run_controller(settings))
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, task.cancel)
    try:
        await task
    except asyncio.CancelledError:
        return


@click.command("controller")
@option("--pod-name", envvar="POD_NAME", required=True, help="This pod's name (leader identity prefix).")
@option(
    "--namespace",
    envvar="NAMESPACE",
    default="default",
    show_default=True,
    help="The driver namespace: daemon DaemonSets, their claim templates and cliques live here.",
)
@option("--image-name", envvar="IMAGE_NAME", required=True, help="Image of the IMEX daemon pods.")
@option(
    "--cd-daemon-image-pull-secret-names",
    envvar="CD_DAEMON_IMAGE_PULL_SECRET_NAMES",
    default="",
    help="Comma list of image pull secrets for the daemon pods.",
)
@option(
    "--log-verbosity-cd-daemon",
    envvar="LOG_VERBOSITY_CD_DAEMON",
    required=True,
    type=int,
    help="Log verbosity handed to the daemon pods.",
)
@option(
    "--max-nodes-per-imex-domain",
    envvar="MAX_NODES_PER_IMEX_DOMAIN",
    default=18,
    show_default=True,
    type=click.IntRange(min=1),
    help="Daemons per clique (indices 0..N-1); 18 = GB200/GB300 NVL limit.",
)
@isolation_options
@option(
    "--http-endpoint",
    envvar="HTTP_ENDPOINT",
    default="",
    help="[host]:port serving metrics, /healthz and /readyz; off when empty.",
)
@option("--metrics-path", envvar="METRICS_PATH", default="/metrics", show_default=True)
@option(
    "--event-log-reader",
    envvar="EVENT_LOG_READER",
    default="",
    help="NAMESPACE/NAME of the service account whose tokens may read the event log on the HTTP endpoint"
    " (cdctl collect; the chart's <fullname>-collector); not served when empty.",
)
@option(
    "--pprof-path",
    envvar="PPROF_PATH",
    default="",
    help="Path prefix serving a dump of the running asyncio tasks; off when empty.",
)
@option(
    "--additional-namespaces",
    envvar="ADDITIONAL_NAMESPACES",
    default="",
    help="Comma list of more namespaces where daemon DaemonSets are managed.",
)
@option(
    "--leader-election-enabled",
    envvar="LEADER_ELECTION_ENABLED",
    is_flag=True,
    default=False,
    help="Run only while holding the Lease; a standby waits.",
)
@option(
    "--leader-election-lease-lock-namespace",
    envvar="LEADER_ELECTION_LEASE_LOCK_NAMESPACE",
    default="default",
    show_default=True,
)
@option(
    "--leader-election-lease-lock-name",
    envvar="LEADER_ELECTION_LEASE_LOCK_NAME",
    default="nvidia-compute-domain-controller",
    show_default=True,
)
@option(
    "--leader-election-lease-duration",
    envvar="LEADER_ELECTION_LEASE_DURATION",
    default="15s",
    show_default=True,
    type=Duration(),
)
@option(
    "--leader-election-renew-deadline",
    envvar="LEADER_ELECTION_RENEW_DEADLINE",
    default="10s",
    show_default=True,
    type=Duration(),
)
@option(
    "--leader-election-retry-period",
    envvar="LEADER_ELECTION_RETRY_PERIOD",
    default="2s",
    show_default=True,
    type=Duration(),
)
@option("--kubeconfig", envvar="KUBECONFIG", default=None, help="Kubeconfig file; in-cluster when absent.")
@option(
    "--kube-api-qps",
    envvar="KUBE_API_QPS",
    default=5.0,
    show_default=True,
    type=float,
    help="Client-side request rate limit (0: none).",
)
@option("--kube-api-burst", envvar="KUBE_API_BURST", default=10, show_default=True, type=int)
@option("--feature-gates", envvar="FEATURE_GATES", default="", help="Comma list of Gate=true|false.")
@option(
    "--imex-mode", envvar="IMEX_MODE", default="",
    help="driverManaged or hostManaged: the Go driver's spelling of HostManagedIMEX "
    "(docs/upgrade-from-nvidia.md).",
)  # fmt: skip
@option(
    "--db",
    envvar="CDCTL_DB",
    default="",
    help="Event log file (SQLite); when empty, events are folded in memory and not kept.",
)
@option(
    "--log-key-file",
    envvar="CDCTL_LOG_KEY_FILE",
    default="",
    help="Key of the event log's chain (HMAC-SHA256; the chart's Secret); when empty, the chain is unkeyed.",
)
@retention_options
@otlp_option
@option(
    "--resource-api-version",
    envvar="RESOURCE_API_VERSION",
    default=None,
    help="resource.k8s.io version to use (default: discover v1, else v1beta2, else v1beta1).",
)
@option(
    "--workers",
    envvar="CONTROLLER_WORKERS",
    default=64,
    show_default=True,
    type=click.IntRange(min=1),
    help="ComputeDomains reconciled in parallel (their event-log writes share commits).",
)
@option(
    "--cleanup-interval",
    envvar="CLEANUP_INTERVAL",
    default="10m",
    show_default=True,
    type=Duration(),
    help="How often every domain is re-checked and orphans are swept.",
)
@option(
    "--batch-window",
    envvar="BATCH_WINDOW",
    default="100ms",
    show_default=True,
    type=Duration(),
    help="Changes to one ComputeDomain within this window are reconciled and written once (0: at once).",
)
@option(
    "--rack-domains",
    envvar="RACK_DOMAINS",
    is_flag=True,
    default=False,
    help="Create one ComputeDomain per rack when its first node appears; delete it when the last is gone.",
)
@option(
    "--rack-label",
    envvar="RACK_LABEL",
    default=DEFAULT_RACK_LABEL,
    show_default=True,
    help="Node label whose value names the rack (e.g. ds.coreweave.com/nvlink.domain).",
)
@option(
    "--rack-domain-namespace",
    envvar="RACK_DOMAIN_NAMESPACE",
    default="default",
    show_default=True,
    help="Namespace of the rack domains, their templates and their workloads' claims.",
)
@option(
    "--rack-domain-name",
    envvar="RACK_DOMAIN_NAME",
    default=DEFAULT_NAME_PATTERN,
    show_default=True,
    help="Rack domain name; {rack}: the label value as a DNS-1123 label. Template: imex-channel-<name>.",
)
@option(
    "--log-format",
    envvar="LOG_FORMAT",
    default="console",
    show_default=True,
    type=click.Choice(["console", "json"]),
)
@option(
    "-v", "--verbosity", envvar="LOG_VERBOSITY", default=DEFAULT_VERBOSITY, show_default=True,
    type=click.IntRange(min=0), help="0 state changes, 2 decisions, 4 watch events, 6 requests, 7 bodies.",
)  # fmt: skip
def controller(**options: object) -> None:
    """Reconcile ComputeDomains: templates, daemon DaemonSets, cliques, status, teardown."""
    configure_logging(str(options["log_format"]), int(str(options["verbosity"])))
    try:
        settings = build_settings(options)
        asyncio.run(serve(settings))
    except LeadershipLost as exc:
        click.echo(f"cdctl controller: {exc}", err=True)
        sys.exit(1)
    except CdctlError as exc:
        click.echo(f"cdctl controller: {exc.message}", err=True)
        sys.exit(exc.exit_code)
    except Exception as exc:  # a fatal start-up error (no cluster, no DRA API): one line, exit 1
        click.echo(f"cdctl controller: {type(exc).__name__}: {' '.join(str(exc).split())}", err=True)
        sys.exit(1)


def validate_reader(value: str) -> str:
    """--event-log-reader: empty, or NAMESPACE/NAME of a service account."""
    if value:
        try:
            parse_service_account(value)
        except ValueError as exc:
            raise InvalidInput("command line", "--event-log-reader", str(exc)) from None
    return value


def build_settings(options: dict[str, object]) -> ControllerSettings:
    """The settings for parsed options (feature gates validated here: a bad gate stops the command)."""
    gates = parse_feature_gates(str(options["feature_gates"] or ""), str(options["imex_mode"] or ""))
    election = LeaderElectionSettings(
        enabled=bool(options["leader_election_enabled"]),
        lease_lock_namespace=str(options["leader_election_lease_lock_namespace"]),
        lease_lock_name=str(options["leader_election_lease_lock_name"]),
        lease_duration_s=float(str(options["leader_election_lease_duration"])),
        renew_deadline_s=float(str(options["leader_election_renew_deadline"])),
        retry_period_s=float(str(options["leader_election_retry_period"])),
    )
    if election.enabled:
        check_durations(election)
    return ControllerSettings(
        pod_name=str(options["pod_name"]),
        image_name=str(options["image_name"]),
        log_verbosity_cd_daemon=int(str(options["log_verbosity_cd_daemon"])),
        log_format=str(options["log_format"]),
        namespace=str(options["namespace"]),
        daemon_image_pull_secret_names=split_list(str(options["cd_daemon_image_pull_secret_names"])),
        max_nodes_per_imex_domain=int(str(options["max_nodes_per_imex_domain"])),
        additional_namespaces=split_list(str(options["additional_namespaces"])),
        feature_gates=gates,
        leader_election=election,
        http_endpoint=str(options["http_endpoint"] or ""),
        metrics_path=str(options["metrics_path"]),
        pprof_path=str(options["pprof_path"] or ""),
        event_log_reader=validate_reader(str(options.get("event_log_reader") or "")),
        kubeconfig=str(options["kubeconfig"]) if options["kubeconfig"] else None,
        kube_api_qps=float(str(options["kube_api_qps"])),
        kube_api_burst=int(str(options["kube_api_burst"])),
        resource_api_version=str(options["resource_api_version"])
        if options["resource_api_version"]
        else None,
        db_path=str(options["db"] or ""),
        log_key_file=str(options["log_key_file"] or ""),
        retention=policy(str(options["retention_age"]), str(options["retention_size"])),
        retention_interval_s=interval(str(options["retention_interval"])),
        otlp_endpoint=str(options.get("otlp_endpoint") or ""),
        workers=int(str(options["workers"])),
        cleanup_interval_s=float(str(options["cleanup_interval"])),
        batch_window_s=float(str(options["batch_window"])),
        rack_domains=bool(options["rack_domains"]),
        rack_label=validate_rack_label(str(options["rack_label"])),
        rack_domain_namespace=str(options["rack_domain_namespace"]),
        rack_domain_name_pattern=validate_name_pattern(str(options["rack_domain_name"])),
        imex_isolation=ImexIsolation(options["imex_isolation"]),  # parsed by its option (cdctl.cli.isolation)
        imex_channel_count=int(str(options["imex_channel_count"])),
    )
