"""The controller's settings: one frozen dataclass built by `cdctl controller` from flags and environment.

Field names follow the flags of reference section 7 (cdctl.cli.controller maps each flag to one field).
Read by every controller module; never mutated after start.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cdctl.api.gates import FeatureGates, defaults
from cdctl.api.isolation import DEFAULT_CHANNEL_COUNT, ImexIsolation
from cdctl.domain.retention import RetentionPolicy


@dataclass(frozen=True)
class LeaderElectionSettings:
    enabled: bool = False
    lease_lock_namespace: str = "default"
    lease_lock_name: str = "nvidia-compute-domain-controller"
    lease_duration_s: float = 15.0
    renew_deadline_s: float = 10.0
    retry_period_s: float = 2.0


@dataclass(frozen=True)
class ControllerSettings:
    pod_name: str
    image_name: str
    log_verbosity_cd_daemon: int
    namespace: str = "default"
    log_format: str = "console"  # the controller's own --log-format, handed on to the daemon pods
    daemon_image_pull_secret_names: tuple[str, ...] = ()
    max_nodes_per_imex_domain: int = 18
    additional_namespaces: tuple[str, ...] = ()
    feature_gates: FeatureGates = field(default_factory=defaults)
    leader_election: LeaderElectionSettings = field(default_factory=LeaderElectionSettings)
    http_endpoint: str = ""
    metrics_path: str = "/metrics"
    pprof_path: str = ""
    # NAMESPACE/NAME of the service account whose tokens may read the event log over the HTTP endpoint
    # (`cdctl collect`); empty: the log is not served.
    event_log_reader: str = ""
    otlp_endpoint: str = ""  # every committed event also as an OTLP log record (cdctl.store.otlp); "": none
    kubeconfig: str | None = None
    kube_api_qps: float = 5.0
    kube_api_burst: int = 10
    resource_api_version: str | None = None
    db_path: str = ""
    log_key_file: str = ""  # the event log's HMAC key (a file); empty: an unkeyed log
    retention: RetentionPolicy = field(default_factory=RetentionPolicy)  # its log's, and the daemons'
    retention_interval_s: float = 3600.0
    workers: int = 64  # reconciles in flight: more share each event-log commit (bench/controller)
    cleanup_interval_s: float = 600.0
    # A domain whose reconcile failed permanently (a 422 or 403: an admission policy, RBAC) runs again on its
    # next change or after this long, as what refused it may be fixed where the controller does not watch.
    recheck_failed_s: float = 60.0
    watch_timeout_s: int = 300
    batch_window_s: float = 0.1  # changes to one domain within this window are reconciled (and written) once
    rack_domains: bool = False  # one ComputeDomain per rack, created when its first node appears
    rack_label: str = "nvidia.com/gpu.clique"  # the node label whose value names the rack
    rack_domain_namespace: str = "default"  # where rack domains (and their workloads' claims) live
    rack_domain_name_pattern: str = "{rack}"  # the domain name; {rack}: the label value made a DNS-1123 label
    # `channel`: one IMEX domain per clique shared by many domains, each with its own channel
    # (docs/channel-isolation.md); `domain`: one IMEX domain per ComputeDomain, as the Go driver.
    imex_isolation: ImexIsolation = ImexIsolation.DOMAIN
    imex_channel_count: int = DEFAULT_CHANNEL_COUNT  # channels per IMEX domain under `channel` (0 never used)

    @property
    def managed_namespaces(self) -> tuple[str, ...]:
        """The driver namespace, then each additional namespace once (order kept)."""
        seen: dict[str, None] = {self.namespace: None}
        for namespace in self.additional_namespaces:
            if namespace:
                seen.setdefault(namespace, None)
        return tuple(seen)

    @property
    def driver_managed_daemons(self) -> bool:
        """Whether the controller runs per-domain IMEX daemons (not so under HostManagedIMEX)."""
        return not self.feature_gates.enabled("HostManagedIMEX")

    @property
    def channel_isolation(self) -> bool:
        return self.imex_isolation is ImexIsolation.CHANNEL

    @property
    def per_domain_daemons(self) -> bool:
        """Whether each ComputeDomain gets an IMEX DaemonSet, daemon template and node labels of its own:
        driver-managed `domain` isolation only (under `channel` the chart's shared daemons serve all)."""
        return self.driver_managed_daemons and not self.channel_isolation

    @property
    def controller_keeps_cliques(self) -> bool:
        return self.feature_gates.enabled("ComputeDomainCliques")
