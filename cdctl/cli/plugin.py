"""`cdctl kubelet-plugin`: flags and environment to a PluginConfig, then the plugin process until SIGTERM.

Registered on the root group by cdctl.cli.main through `register(root)`. Every flag has an environment twin;
the Go driver's names are kept (NODE_NAME, CDI_ROOT, NVIDIA_DRIVER_ROOT/HOST_DRIVER_ROOT,
DRIVER_ROOT_CTR_PATH, KUBELET_REGISTRAR_DIRECTORY_PATH, KUBELET_PLUGINS_DIRECTORY_PATH, HEALTHCHECK_PORT,
FEATURE_GATES, ...), with cdctl's own (CDCTL_DB, CDCTL_LOG_KEY_FILE, CDCTL_RETENTION_AGE,
CDCTL_RETENTION_SIZE) and channel isolation's (IMEX_ISOLATION, CHANNEL_SLOTS, IMEX_CHANNEL_COUNT,
CHANNEL_CAPACITY; docs/channel-isolation.md). A typed error ends the command with a one-line reason and its
exit code (cdctl.cli.errors.guarded), any other error with one line and exit 1; SIGTERM/SIGINT stop it
cleanly (0).
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import click

from cdctl.api.gates import parse_feature_gates
from cdctl.api.imexgate import HOLD_S
from cdctl.api.isolation import ImexIsolation
from cdctl.cli.errors import fail, guarded
from cdctl.cli.isolation import checked, isolation_options
from cdctl.cli.logs import DEFAULT_VERBOSITY, configure_logging
from cdctl.cli.otlp import otlp_option
from cdctl.cli.retention import interval, policy, retention_options
from cdctl.domain.errors import CdctlError
from cdctl.k8s.tokens import parse_service_account
from cdctl.plugin.app import PluginProcess
from cdctl.plugin.channels import ChannelCapacity, parse_channel_capacity, slot_count
from cdctl.plugin.nvml import fake_from_spec
from cdctl.plugin.pluginconfig import PluginConfig
from cdctl.projections.retention import FIRST_DELAY_S


def _run(main: Coroutine[Any, Any, None]) -> None:
    """uvloop when the "fast" extra is installed, else the default loop."""
    try:
        import uvloop
    except ImportError:
        asyncio.run(main)
    else:
        uvloop.run(main)


async def _serve(cfg: PluginConfig) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT):
        loop.add_signal_handler(sig, stop.set)
    await PluginProcess(cfg).run(stop)


def _fake_nvml(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    if value is not None and not value.startswith("@"):
        try:
            fake_from_spec(value)
        except CdctlError as exc:
            raise click.BadParameter(str(exc)) from exc
    return value


def _service_account(_ctx: click.Context, _param: click.Parameter, value: str) -> str:
    if value:
        try:
            parse_service_account(value)
        except ValueError as exc:
            raise click.BadParameter(str(exc)) from exc
    return value


def _slots(value: int, *, field: str) -> int:
    slot_count(value, 1)  # refuses a negative count
    return value


@click.command("kubelet-plugin")
@click.option("--node-name", envvar="NODE_NAME", required=True, help="This node's name.")
@click.option(
    "--namespace",
    envvar="NAMESPACE",
    default="default",
    show_default=True,
    help="The driver namespace (where ComputeDomainCliques live).",
)
@click.option(
    "--additional-namespaces",
    envvar="ADDITIONAL_NAMESPACES",
    default="",
    help="Comma list of more namespaces where the controller manages daemon DaemonSets (their claims are "
    "prepared too).",
)
@click.option(
    "--cdi-root",
    envvar="CDI_ROOT",
    default="/etc/cdi",
    show_default=True,
    type=click.Path(path_type=Path),
    help="Directory the CDI specs are written to (the chart uses /var/run/cdi).",
)
@click.option(
    "--http-endpoint",
    envvar="HTTP_ENDPOINT",
    default="",
    help="host:port for Prometheus metrics and /healthz (e.g. :8081); off when empty.",
)
@click.option("--metrics-path", envvar="METRICS_PATH", default="/metrics", show_default=True)
@click.option("--pod-name", envvar="POD_NAME", default="", help="This plugin's pod (the chart sets it).")
@click.option(
    "--event-log-reader",
    envvar="EVENT_LOG_READER",
    default="",
    callback=_service_account,
    help="NAMESPACE/NAME of the service account whose tokens may read the event logs on the HTTP endpoint"
    " (cdctl collect; the chart's <fullname>-collector); not served when empty.",
)
@click.option(
    "--nvidia-driver-root",
    "--host_driver-root",
    "--host-driver-root",
    "nvidia_driver_root",
    envvar=["NVIDIA_DRIVER_ROOT", "HOST_DRIVER_ROOT"],
    default="/",
    show_default=True,
    type=click.Path(path_type=Path),
    help="Driver root on the host (host paths in CDI specs).",
)
@click.option(
    "--container-driver-root",
    envvar="DRIVER_ROOT_CTR_PATH",
    default="/driver-root",
    show_default=True,
    type=click.Path(path_type=Path),
    help="Where the host driver root is mounted in this container.",
)
@click.option(
    "--kubelet-registrar-directory-path",
    envvar="KUBELET_REGISTRAR_DIRECTORY_PATH",
    default="/var/lib/kubelet/plugins_registry",
    show_default=True,
    type=click.Path(path_type=Path),
)
@click.option(
    "--kubelet-plugins-directory-path",
    envvar="KUBELET_PLUGINS_DIRECTORY_PATH",
    default="/var/lib/kubelet/plugins",
    show_default=True,
    type=click.Path(path_type=Path),
)
@click.option(
    "--healthcheck-port",
    envvar="HEALTHCHECK_PORT",
    default=-1,
    show_default=True,
    type=int,
    help="gRPC health port (liveness); -1 disables, 0 picks a free port.",
)
@click.option(
    "--db",
    envvar="CDCTL_DB",
    default=None,
    type=click.Path(path_type=Path),
    help="Event log file [default: <plugins dir>/compute-domain.nvidia.com/events.db].",
)
@click.option(
    "--log-key-file",
    envvar="CDCTL_LOG_KEY_FILE",
    default=None,
    type=click.Path(path_type=Path),
    help="Key of the event log's chain (HMAC-SHA256; the chart's Secret); unkeyed when absent.",
)
@retention_options
@otlp_option
@click.option(
    "--kubeconfig", envvar="KUBECONFIG", default=None, help="Kubeconfig file; in-cluster when absent."
)
@click.option("--kube-api-qps", envvar="KUBE_API_QPS", default=5.0, show_default=True, type=float)
@click.option("--kube-api-burst", envvar="KUBE_API_BURST", default=10, show_default=True, type=int)
@click.option("--feature-gates", envvar="FEATURE_GATES", default="", help="Comma list of Gate=true|false.")
@click.option(
    "--imex-mode", envvar="IMEX_MODE", default="",
    help="driverManaged or hostManaged: the Go driver's spelling of HostManagedIMEX "
    "(docs/upgrade-from-nvidia.md).",
)  # fmt: skip
@click.option(
    "--gpu-clique-label/--no-gpu-clique-label", "--gpu-clique-label-enabled",
    envvar="GPU_CLIQUE_LABEL_ENABLED", default=False, show_default=True,
    help="Set the nvidia.com/gpu.clique label on this node (as GPU Feature Discovery did); keep it current.",
)  # fmt: skip
@click.option(
    "--clique-refresh-interval", envvar="CLIQUE_REFRESH_INTERVAL", default=600.0, show_default=True,
    type=click.FloatRange(min=1.0),
    help="Seconds between re-reads of the NVLink clique; a change republishes the slice (and the label).",
)  # fmt: skip
@click.option(
    "--fake-nvml",
    envvar="FAKE_NVML",
    default=None,
    callback=_fake_nvml,
    help="Use a fake device library: none, no-driver, or <clusterUUID>.<cliqueId>[:FABRIC_STATE]; "
    "@FILE re-reads such a spec from FILE on every probe.",
)
@click.option(
    "--proc-devices",
    envvar=["PROC_DEVICES", "ALT_PROC_DEVICES_PATH"],
    default="/proc/devices",
    show_default=True,
    help="File listing device majors (nvidia-caps-imex-channels, nvidia-caps).",
)
@click.option(
    "--fabric-imex-mgmt-cap",
    envvar="FABRIC_IMEX_MGMT_CAP",
    default="/proc/driver/nvidia/capabilities/fabric-imex-mgmt",
    show_default=True,
)
@click.option(
    "--boot-id-path", envvar="BOOT_ID_PATH", default="/proc/sys/kernel/random/boot_id", show_default=True
)
@click.option(
    "--resource-api-version",
    envvar="RESOURCE_API_VERSION",
    default=None,
    help="resource.k8s.io version to use (default: discover v1, else v1beta2, else v1beta1).",
)
@click.option(
    "--fabric-reprobe-interval",
    envvar="FABRIC_REPROBE_INTERVAL",
    default=15.0,
    show_default=True,
    type=float,
    help="Seconds between NVML probes: device health, and waiting for a fabric that is not COMPLETED.",
)
@click.option(
    "--imex-handover-hold",
    envvar="IMEX_HANDOVER_HOLD",
    default=HOLD_S,
    show_default=True,
    type=click.FloatRange(min=0.0),
    help="Seconds a claim handed an IMEX channel keeps a planned IMEX restart on its node back: the time "
    "its workload has to start (docs/channel-isolation.md, Readiness).",
)
@click.option(
    "--host-imex-config",
    envvar="HOST_IMEX_CONFIG",
    default=None,
    type=click.Path(path_type=Path, dir_okay=False),
    help="HostManagedIMEX: the host's IMEX config file (as mounted in this container). Each channel is then "
    "handed out only while `nvidia-imex-ctl -c FILE -q` answers READY (docs/host-managed-imex.md).",
)
@isolation_options
@click.option(
    "--channel-slots",
    envvar="CHANNEL_SLOTS",
    default=0,
    show_default=True,
    type=int,
    callback=checked(_slots),
    help="Channel isolation: how many claims the node's channel capacity takes; 0: 2 per GPU.",
)
@click.option(
    "--channel-capacity",
    envvar="CHANNEL_CAPACITY",
    default="auto",
    show_default=True,
    callback=checked(parse_channel_capacity),
    help="Channel isolation: consumable (one multi-allocatable device), slots (--channel-slots devices), or "
    "auto (consumable where the API server keeps allowMultipleAllocations, else slots).",
)
@click.option(
    "--log-format",
    envvar="LOG_FORMAT",
    default="console",
    show_default=True,
    type=click.Choice(["console", "json"]),
)
@click.option(
    "-v", "--verbosity", envvar="LOG_VERBOSITY", default=DEFAULT_VERBOSITY, show_default=True,
    type=click.IntRange(min=0), help="0 state changes, 2 decisions, 4 watch events, 6 requests, 7 bodies.",
)  # fmt: skip
@guarded
def kubelet_plugin(
    node_name: str,
    namespace: str,
    additional_namespaces: str,
    cdi_root: Path,
    http_endpoint: str,
    metrics_path: str,
    pod_name: str,
    event_log_reader: str,
    nvidia_driver_root: Path,
    container_driver_root: Path,
    kubelet_registrar_directory_path: Path,
    kubelet_plugins_directory_path: Path,
    healthcheck_port: int,
    db: Path | None,
    log_key_file: Path | None,
    retention_age: str,
    retention_size: str,
    retention_interval: str,
    otlp_endpoint: str,
    kubeconfig: str | None,
    kube_api_qps: float,
    kube_api_burst: int,
    feature_gates: str,
    imex_mode: str,
    gpu_clique_label: bool,
    clique_refresh_interval: float,
    fake_nvml: str | None,
    proc_devices: str,
    fabric_imex_mgmt_cap: str,
    boot_id_path: str,
    resource_api_version: str | None,
    fabric_reprobe_interval: float,
    imex_handover_hold: float,
    host_imex_config: Path | None,
    imex_isolation: ImexIsolation,
    channel_slots: int,
    imex_channel_count: int,
    channel_capacity: ChannelCapacity,
    log_format: str,
    verbosity: int,
) -> None:
    """Serve the kubelet DRA API for ComputeDomain channels and daemons on this node."""
    configure_logging(log_format, verbosity)
    gates = parse_feature_gates(feature_gates, imex_mode)
    cfg = PluginConfig(
        node_name=node_name,
        namespace=namespace,
        additional_namespaces=tuple(n.strip() for n in additional_namespaces.split(",") if n.strip()),
        cdi_root=cdi_root,
        registrar_dir=kubelet_registrar_directory_path,
        plugins_dir=kubelet_plugins_directory_path,
        healthcheck_port=healthcheck_port,
        db=db,
        log_key_file=log_key_file,
        retention=policy(retention_age, retention_size),
        retention_interval_s=interval(retention_interval),
        retention_first_delay_s=min(FIRST_DELAY_S, interval(retention_interval)),
        otlp_endpoint=otlp_endpoint,
        kubeconfig=kubeconfig,
        kube_api_qps=kube_api_qps,
        kube_api_burst=kube_api_burst,
        gates=gates,
        fake_nvml=fake_nvml,
        nvidia_driver_root=nvidia_driver_root,
        container_driver_root=container_driver_root,
        proc_devices=proc_devices,
        fabric_imex_mgmt_cap=fabric_imex_mgmt_cap,
        boot_id_path=boot_id_path,
        resource_api_version=resource_api_version,
        fabric_reprobe_s=fabric_reprobe_interval,
        handover_hold_s=imex_handover_hold,
        host_imex_config=host_imex_config,
        gpu_clique_label=gpu_clique_label,
        clique_refresh_s=clique_refresh_interval,
        http_endpoint=http_endpoint,
        metrics_path=metrics_path,
        pod_name=pod_name,
        event_log_reader=event_log_reader,
        isolation=imex_isolation,
        channel_slots=channel_slots,
        channel_count=imex_channel_count,
        channel_capacity=channel_capacity,
    )
    try:
        _run(_serve(cfg))
    except CdctlError:
        raise  # one line and its exit code, by `guarded`
    except Exception as exc:  # the boundary: one line, never a traceback
        fail(f"unexpected {type(exc).__name__}: {' '.join(str(exc).split())}", 1)
