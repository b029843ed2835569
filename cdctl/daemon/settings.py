"""The daemon's settings: identity from the CDI edits and the pod spec, paths, and the mode its gates select.

Built by `cdctl daemon run` (cdctl.cli.daemon) from flags and their environment twins and read by every
module of cdctl.daemon. `validate()` gives the Go driver's message when the plugin's CDI edits did not reach
the container (no COMPUTE_DOMAIN_UUID). `shared`: the node's shared IMEX daemon of channel isolation
(cdctl.api.shareddaemon), tied to no ComputeDomain, whose peers are its clique's shared daemon pods; it
writes IP node lists (no controller assigns it DNS slots).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from cdctl.api.gates import COMPUTE_DOMAIN_CLIQUES, IMEX_DAEMONS_WITH_DNS_NAMES, FeatureGates
from cdctl.domain.errors import InvalidInput, PermanentError
from cdctl.domain.imex import (
    CONFIG_NAME,
    DEFAULT_UNUSED_ADDRESS,
    EVENTS_NAME,
    MODE_DNS,
    MODE_IP,
    NODES_NAME,
    TEMPLATE_NAME,
)
from cdctl.domain.retention import RetentionPolicy

CDI_MISSING = "CDI container edits did not apply -- is CDI enabled in your container runtime?"


@dataclass(frozen=True, slots=True)
class DaemonSettings:
    clique_id: str
    domain_uid: str
    domain_name: str
    domain_namespace: str
    node_name: str
    pod_ip: str
    pod_uid: str
    pod_name: str
    pod_namespace: str
    max_nodes: int
    gates: FeatureGates
    imexd_dir: Path = Path("/imexd")
    hosts_file: Path = Path("/etc/hosts")
    db_path: Path | None = None
    log_key_file: Path | None = None  # the event log's HMAC key; None: an unkeyed log
    retention: RetentionPolicy = field(default_factory=RetentionPolicy)
    retention_interval_s: float = 3600.0
    retention_first_delay_s: float = 60.0
    kubeconfig: str | None = None
    imex_binary: str = "nvidia-imex"
    ctl_binary: str = "nvidia-imex-ctl"
    unused_address: str = DEFAULT_UNUSED_ADDRESS
    readiness_period_s: float = 5.0
    restart_backoff_s: float = 1.0
    restart_backoff_max_s: float = 30.0
    shared: bool = False

    @property
    def dns_names(self) -> bool:
        return not self.shared and self.gates.enabled(IMEX_DAEMONS_WITH_DNS_NAMES)

    @property
    def uses_cliques(self) -> bool:
        return self.gates.enabled(COMPUTE_DOMAIN_CLIQUES)

    @property
    def mode(self) -> str:
        return MODE_DNS if self.dns_names else MODE_IP

    @property
    def template_path(self) -> Path:
        return self.imexd_dir / TEMPLATE_NAME

    @property
    def config_path(self) -> Path:
        return self.imexd_dir / CONFIG_NAME

    @property
    def nodes_path(self) -> Path:
        return self.imexd_dir / NODES_NAME

    @property
    def events_path(self) -> Path:
        return self.db_path if self.db_path is not None else self.imexd_dir / EVENTS_NAME

    def validate(self) -> None:
        if not self.domain_uid and not self.shared:
            raise PermanentError(CDI_MISSING)
        if self.max_nodes < 1:
            raise InvalidInput("daemon settings", "max-nodes-per-imex-domain", f"{self.max_nodes} < 1")
        for name, value in (
            ("node-name", self.node_name),
            ("pod-name", self.pod_name),
            ("pod-namespace", self.pod_namespace),
        ):
            if not value:
                raise InvalidInput("daemon settings", name, "is required (set by the pod spec)")
        if self.clique_id and not self.pod_ip:
            raise InvalidInput("daemon settings", "pod-ip", "is required (set by the pod spec)")
