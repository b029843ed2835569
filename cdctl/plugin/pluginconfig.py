"""The kubelet plugin's configuration and what follows from it alone: its directories, NVML, its devices.

`PluginConfig` is built by cdctl.cli.plugin from flags and environment and read by cdctl.plugin.app's
`PluginProcess`; `make_private_dirs` makes the owner-only state directories, `device_lib` picks NVML (real, or
a fake for the simulated node), `published_devices` says which devices the node's ResourceSlice lists for a
fabric state, and `base_edits` the CDI edits every daemon container gets (the host's nvidia-imex binaries).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from cdctl.api import gates as fg
from cdctl.api.imexgate import HOLD_S
from cdctl.api.isolation import DEFAULT_CHANNEL_COUNT, ImexIsolation
from cdctl.domain.retention import RetentionPolicy
from cdctl.k8s.resourceslices import PublishedDevice
from cdctl.plugin import cdi, nvml
from cdctl.plugin import channels as ch
from cdctl.plugin.checkpoint import BOOT_ID_PATH
from cdctl.plugin.cliquerefresh import DEFAULT_REFRESH_S
from cdctl.plugin.devices import DRIVER_NAME
from cdctl.plugin.preparesettings import FabricStatus
from cdctl.projections.retention import FIRST_DELAY_S, INTERVAL_S

IMEX_BINARIES = ("nvidia-imex", "nvidia-imex-ctl")
BIN_DIRS = ("usr/bin", "usr/sbin", "bin", "sbin", "opt/bin")


@dataclass(frozen=True)
class PluginConfig:
    node_name: str
    namespace: str = "default"
    additional_namespaces: tuple[str, ...] = ()  # the controller's ADDITIONAL_NAMESPACES (daemon claims)
    cdi_root: Path = Path("/etc/cdi")
    registrar_dir: Path = Path("/var/lib/kubelet/plugins_registry")
    plugins_dir: Path = Path("/var/lib/kubelet/plugins")
    healthcheck_port: int = -1
    db: Path | None = None
    log_key_file: Path | None = None  # the event log's HMAC key; None: an unkeyed log
    retention: RetentionPolicy = field(default_factory=RetentionPolicy)  # the log's and imex-history's
    retention_interval_s: float = INTERVAL_S
    retention_first_delay_s: float = FIRST_DELAY_S
    kubeconfig: str | None = None
    kube_api_qps: float = 5.0
    kube_api_burst: int = 10
    gates: fg.FeatureGates = field(default_factory=fg.defaults)
    fake_nvml: str | None = None
    nvidia_driver_root: Path = Path("/")
    container_driver_root: Path = Path("/driver-root")
    proc_devices: str = cdi.DEFAULT_PROC_DEVICES
    fabric_imex_mgmt_cap: str = cdi.FABRIC_IMEX_MGMT_CAP
    boot_id_path: str = BOOT_ID_PATH
    resource_api_version: str | None = None
    # Follow every ResourceClaim so a claim's first Prepare reads none (about 0.5 ms less per Prepare in
    # bench/prepare.py). Off by default: it is a cluster-wide watch from every node (each claim change goes to
    # every plugin) and needs list/watch on resourceclaims, which the chart does not grant; off, Prepare GETs
    # the claim as the Go plugin does. See cdctl.k8s.plugincluster and cdctl.plugin.driver.
    watch_claims: bool = False
    fabric_reprobe_s: float = 15.0  # NVML probe period: device health, and waiting for the fabric
    handover_hold_s: float = HOLD_S  # a claim handed a channel keeps a planned IMEX restart back this long
    # HostManagedIMEX: the host's IMEX config; a channel is handed out only while `nvidia-imex-ctl -q` with it
    # answers READY (cdctl.plugin.hostimex). None: not asked.
    host_imex_config: Path | None = None
    gpu_clique_label: bool = False  # set nvidia.com/gpu.clique on this node (upstream PR 1247)
    clique_refresh_s: float = DEFAULT_REFRESH_S  # how often the clique is re-read
    host_root: Path = Path("/")  # where /proc and /sys of the host are read (single-node NVLink detection)
    resync_s: float = 60.0
    sweep_s: float = 600.0
    projection_batch_s: float = 0.2
    http_endpoint: str = ""
    metrics_path: str = "/metrics"
    pod_name: str = ""  # this plugin's pod: the audience of the tokens its event-log endpoint accepts
    # NAMESPACE/NAME of the service account whose tokens may read the event logs over the HTTP endpoint
    # (`cdctl collect`); empty: the logs are not served.
    event_log_reader: str = ""
    otlp_endpoint: str = ""  # every committed event also as an OTLP log record (cdctl.store.otlp); "": none
    isolation: ImexIsolation = ImexIsolation.DOMAIN  # IMEX_ISOLATION (docs/channel-isolation.md)
    channel_slots: int = 0  # channel isolation: claims the node's channel capacity takes; 0: 2 per GPU
    channel_count: int = DEFAULT_CHANNEL_COUNT  # channel isolation: channels per IMEX domain
    channel_capacity: ch.ChannelCapacity = ch.ChannelCapacity.AUTO

    @property
    def plugin_dir(self) -> Path:
        return self.plugins_dir / DRIVER_NAME

    @property
    def db_path(self) -> Path:
        return self.db or self.plugin_dir / "events.db"


PRIVATE_DIR_MODE = 0o700
PRIVATE_SUBDIRS = ("domains", "imex-history")  # IMEX configs and daemon logs; kept daemon logs


def make_private_dirs(plugin_dir: Path) -> None:
    """The plugin's state directory and the ones it keeps daemons' files in: owner-only, whatever the umask.

    The event log and the daemons' logs below name every tenant's claims and domains. Directories left
    0755 by an older cdctl are tightened; the per-domain directories inside stay as prepare makes them,
    unreachable by others through their 0700 parent. The CDI root is not one of them.
    """
    for directory in (plugin_dir, *(plugin_dir / name for name in PRIVATE_SUBDIRS)):
        directory.mkdir(mode=PRIVATE_DIR_MODE, parents=True, exist_ok=True)
        if directory.stat().st_mode & 0o777 != PRIVATE_DIR_MODE:
            directory.chmod(PRIVATE_DIR_MODE)


def device_lib(cfg: PluginConfig) -> nvml.DeviceLib:
    if cfg.fake_nvml is not None:
        if cfg.fake_nvml.startswith("@"):
            return nvml.FileDeviceLib(cfg.fake_nvml[1:])
        return nvml.fake_from_spec(cfg.fake_nvml)
    return nvml.PynvmlDeviceLib(str(cfg.container_driver_root), str(cfg.host_root))


def published_devices(
    fabric: FabricStatus, host_managed: bool, shared: ch.SharedChannels | None = None
) -> list[PublishedDevice]:
    """channel-0 only once the fabric is COMPLETED; daemon-0 unless IMEX is host-managed. Under channel
    isolation (`shared`): the shared channel devices once the fabric is COMPLETED, and nothing else."""
    if shared is not None:
        return [] if fabric.pending is not None else shared.devices()
    out = [] if fabric.pending is not None else [PublishedDevice("channel-0", "channel", 0)]
    if not host_managed:
        out.append(PublishedDevice("daemon-0", "daemon", 0))
    return out


def base_edits(cfg: PluginConfig) -> cdi.ContainerEdits:
    """Env for every daemon container plus the host's nvidia-imex binaries, where the driver root has them."""
    mounts = []
    for name in IMEX_BINARIES:
        for rel in BIN_DIRS:
            if (cfg.container_driver_root / rel / name).is_file():
                host = str(cfg.nvidia_driver_root / rel / name)
                mounts.append(cdi.Mount(host, f"/usr/bin/{name}", ("ro", "nosuid", "nodev", "bind")))
                break
    return cdi.ContainerEdits(env=("NVIDIA_VISIBLE_DEVICES=void",), mounts=tuple(mounts))
