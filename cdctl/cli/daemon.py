"""`cdctl daemon run | check`: the IMEX daemon of a ComputeDomain's DaemonSet pod, and its probe.

Registered on the root group by cdctl.cli.main through `register(root)`. The Go driver's flag and environment
names are kept (CLIQUE_ID, COMPUTE_DOMAIN_UUID/NAME/NAMESPACE from the plugin's CDI edits; NODE_NAME, POD_IP,
POD_UID, POD_NAME, POD_NAMESPACE, MAX_NODES_PER_IMEX_DOMAIN, FEATURE_GATES, LOG_VERBOSITY, LOG_FORMAT from the
pod spec); the paths the tests and the simulated cluster move have twins
too (IMEXD_DIR, HOSTS_FILE, CDCTL_DB), the event log's key CDCTL_LOG_KEY_FILE, and its retention
(CDCTL_RETENTION_AGE, CDCTL_RETENTION_SIZE, CDCTL_RETENTION_INTERVAL: the controller passes its own when not
the default).
`check` runs on every probe, every few seconds on every node: this module imports only click and the
stdlib-only cdctl.daemon.check at the top; `run` imports the daemon when it is called. Exit codes: 0 on a
clean stop or a passing check, 1 not ready or a fatal error, 2 bad input, 3 event-log trouble; always one
line, never a traceback.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from cdctl.api.verbosity import DEFAULT_VERBOSITY
from cdctl.daemon.check import CheckSettings, NotReady, check, shared_clique

DEFAULT_IMEXD_DIR = "/imexd"
FC = TypeVar("FC", bound=Callable[..., Any] | click.Command)


def _option(*names: str, **kwargs: Any) -> Callable[[FC], FC]:
    """A click option whose help names its environment twin."""
    return click.option(*names, show_envvar=True, **kwargs)


imexd_option = _option(
    "--imexd-dir", envvar="IMEXD_DIR", default=DEFAULT_IMEXD_DIR, show_default=True,
    type=click.Path(path_type=Path), help="Directory of the IMEX config template, config and node list.",
)  # fmt: skip
clique_option = _option(
    "--cliqueid",
    "clique_id",
    envvar="CLIQUE_ID",
    default="",
    help="NVLink clique ID (from CDI); empty: none.",
)
shared_option = _option(
    "--shared", envvar="IMEX_SHARED_DAEMON", is_flag=True, default=False,
    help="The node's shared IMEX daemon of channel isolation (the chart's DaemonSet), tied to no "
    "ComputeDomain; without --cliqueid, the clique is the one the kubelet plugin wrote into "
    "<imexd-dir>/clique.",
)  # fmt: skip
ctl_option = _option(
    "--imex-ctl-binary", envvar="IMEX_CTL_BINARY", default="nvidia-imex-ctl", show_default=True,
    help="The IMEX control command (looked up on PATH).",
)  # fmt: skip


@click.group("daemon")
def daemon() -> None:
    """The per-ComputeDomain IMEX daemon (driver-managed mode)."""


@daemon.command("check")
@clique_option
@imexd_option
@ctl_option
@shared_option
@_option("--timeout", "timeout_s", envvar="CHECK_TIMEOUT", default=10.0, show_default=True, type=float)
def check_command(
    clique_id: str, imexd_dir: Path, imex_ctl_binary: str, shared: bool, timeout_s: float
) -> None:
    """Succeed when the local IMEX daemon answers READY (or when there is no clique to serve)."""
    if shared and not clique_id:
        found = shared_clique(imexd_dir)
        if found is None:
            click.echo(f"cdctl: error: IMEX daemon not ready: no clique ID in {imexd_dir} yet", err=True)
            sys.exit(NotReady.exit_code)
        clique_id = found
    try:
        click.echo(check(CheckSettings(clique_id, imexd_dir, imex_ctl_binary, timeout_s)))
    except NotReady as exc:
        click.echo(f"cdctl: error: {exc}", err=True)
        sys.exit(exc.exit_code)


@daemon.command("run")
@clique_option
@_option("--compute-domain-uuid", envvar="COMPUTE_DOMAIN_UUID", default="", help="Domain UID (from CDI).")
@_option("--compute-domain-name", envvar="COMPUTE_DOMAIN_NAME", default="", help="Domain name (from CDI).")
@_option(
    "--compute-domain-namespace", envvar="COMPUTE_DOMAIN_NAMESPACE", default="default", show_default=True,
    help="Domain namespace (from CDI).",
)  # fmt: skip
@_option("--node-name", envvar="NODE_NAME", default="", help="This node (pod spec).")
@_option("--pod-ip", envvar="POD_IP", default="", help="This pod's IP: IMEX binds to it (pod spec).")
@_option("--pod-uid", envvar="POD_UID", default="", help="This pod's UID (pod spec).")
@_option("--pod-name", envvar="POD_NAME", default="", help="This pod's name (pod spec).")
@_option("--pod-namespace", envvar="POD_NAMESPACE", default="", help="This pod's namespace (pod spec).")
@_option(
    "--max-nodes-per-imex-domain", "max_nodes", envvar="MAX_NODES_PER_IMEX_DOMAIN", default=18,
    show_default=True, type=int, help="Slots in the node list; the controller's limit on indices.",
)  # fmt: skip
@_option("--feature-gates", envvar="FEATURE_GATES", default="", help="Name=bool,... (as the chart sets).")
@imexd_option
@_option(
    "--hosts-file", envvar="HOSTS_FILE", default="/etc/hosts", show_default=True,
    type=click.Path(path_type=Path), help="Hosts file holding the slot name mappings (DNS-names mode).",
)  # fmt: skip
@_option(
    "--db", envvar="CDCTL_DB", default=None, type=click.Path(path_type=Path),
    help="The daemon's event log [default: <imexd-dir>/events.db].",
)  # fmt: skip
@_option(
    "--log-key-file", envvar="CDCTL_LOG_KEY_FILE", default=None, type=click.Path(path_type=Path),
    help="Key of the event log's chain (HMAC-SHA256); unkeyed when absent.",
)  # fmt: skip
@_option(
    "--retention-age", envvar="CDCTL_RETENTION_AGE", default="30d", show_default=True,
    help="Events older than this are compacted away (s, m, h, d, w; 0: no age bound).",
)  # fmt: skip
@_option(
    "--retention-size", envvar="CDCTL_RETENTION_SIZE", default="1GiB", show_default=True,
    help="The event log is compacted, oldest first, to stay under this (e.g. 512MiB, 1GiB; 0: no bound).",
)  # fmt: skip
@_option(
    "--retention-interval", envvar="CDCTL_RETENTION_INTERVAL", default="1h", show_default=True,
    help="How often the log is checked against the age and size bounds (s, m, h; at least 1s).",
)  # fmt: skip
@_option("--kubeconfig", envvar="KUBECONFIG", default=None, help="Kubeconfig file; in-cluster when absent.")
@_option("--imex-binary", envvar="IMEX_BINARY", default="nvidia-imex", show_default=True)
@ctl_option
@shared_option
@_option(
    "--unused-slot-address", envvar="UNUSED_SLOT_ADDRESS", default=None,
    help="Address for slots without a daemon; must reach no one [default: 192.0.2.1].",
)  # fmt: skip
@_option(
    "--readiness-period", "readiness_period_s", envvar="READINESS_PERIOD", default=5.0, show_default=True,
    type=float, help="Seconds between the daemon's own readiness checks (recorded on change).",
)  # fmt: skip
@_option(
    "--restart-backoff", "restart_backoff_s", envvar="IMEX_RESTART_BACKOFF", default=1.0, show_default=True,
    type=float, help="First delay before restarting a crashed IMEX (doubles, up to 30 s).",
)  # fmt: skip
@_option(
    "--log-format", envvar="LOG_FORMAT", default="console", show_default=True,
    type=click.Choice(["console", "json", "text"]),
)  # fmt: skip
@_option(
    "-v", "--log-verbosity", "verbosity", envvar="LOG_VERBOSITY", default=DEFAULT_VERBOSITY,
    show_default=True,
    type=click.IntRange(min=0), help="0 state changes, 2 decisions, 4 watch events, 6 requests, 7 bodies.",
)  # fmt: skip
def run_command(**options: Any) -> None:
    """Label the pod, render the IMEX files and supervise nvidia-imex until SIGTERM."""
    from cdctl.cli.errors import fail
    from cdctl.domain.errors import CdctlError

    try:
        _run_daemon(options)
    except CdctlError as exc:
        fail(exc.message, exc.exit_code)
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as exc:  # the boundary: one line, never a traceback
        fail(f"unexpected {type(exc).__name__}: {exc}", 1)


def _run_daemon(options: dict[str, Any]) -> None:
    import asyncio
    import signal

    from cdctl.api.gates import parse_feature_gates
    from cdctl.cli.logs import configure_logging
    from cdctl.cli.retention import interval, policy
    from cdctl.daemon.app import DaemonApp
    from cdctl.daemon.settings import DaemonSettings
    from cdctl.domain.imex import DEFAULT_UNUSED_ADDRESS

    configure_logging(options["log_format"], options["verbosity"])
    settings = DaemonSettings(
        clique_id=options["clique_id"],
        domain_uid=options["compute_domain_uuid"],
        domain_name=options["compute_domain_name"],
        domain_namespace=options["compute_domain_namespace"],
        node_name=options["node_name"],
        pod_ip=options["pod_ip"],
        pod_uid=options["pod_uid"],
        pod_name=options["pod_name"],
        pod_namespace=options["pod_namespace"],
        max_nodes=options["max_nodes"],
        gates=parse_feature_gates(options["feature_gates"]),
        imexd_dir=options["imexd_dir"],
        hosts_file=options["hosts_file"],
        db_path=options["db"],
        log_key_file=options["log_key_file"],
        retention=policy(options["retention_age"], options["retention_size"]),
        retention_interval_s=interval(options["retention_interval"]),
        retention_first_delay_s=min(60.0, interval(options["retention_interval"])),
        kubeconfig=options["kubeconfig"],
        imex_binary=options["imex_binary"],
        ctl_binary=options["imex_ctl_binary"],
        unused_address=options["unused_slot_address"] or DEFAULT_UNUSED_ADDRESS,
        readiness_period_s=options["readiness_period_s"],
        restart_backoff_s=options["restart_backoff_s"],
        shared=options["shared"],
    )

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        await DaemonApp(settings).run(stop)

    asyncio.run(main())
