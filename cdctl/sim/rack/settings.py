"""What a simulated rack is asked to be: its size, IMEX mode, driver namespace and start-up options.

`RackSettings` is built by `cdctl sim rack` (cdctl.sim.rack.rackcommand), the tests and the benchmarks, and
read by cdctl.sim.rack.launch (the rack) and cdctl.sim.rack.components (the components' command lines). With
more than one controller replica the rack turns leader election on, with short durations (a real chart's
are 15 s / 10 s / 2 s) so that a failover takes seconds. `isolation` is the install's IMEX isolation
(cdctl.api.isolation: `domain`, or `channel` with `imex_channel_count` channels per IMEX domain and, where
given, `channel_slots` slot devices per node); under `channel` the worker pods run as containers
(`runs_workers`) that prove their isolation with the fake IMEX export/import check
(cdctl.sim.node.fakeimexmem).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from cdctl.api.isolation import ImexIsolation, parse_channel_count, parse_isolation
from cdctl.sim.node.topology import NODES_PER_RACK
from cdctl.sim.rack.cluster import NodeTimings

DRIVER_MANAGED = "driver-managed"
HOST_MANAGED = "host-managed"
MODES = (DRIVER_MANAGED, HOST_MANAGED)
DRIVER_NAMESPACE = "nvidia-dra-driver"


@dataclass(frozen=True)
class RackSettings:
    work_dir: Path
    racks: int = 1
    nodes_per_rack: int = NODES_PER_RACK
    mode: str = DRIVER_MANAGED
    driver_namespace: str = DRIVER_NAMESPACE
    start_timeout_s: float = 120.0
    probe_period_s: float | None = None  # None: the daemon pods' probe periods (startup 1 s, readiness 10 s)
    fork_server: bool = True  # start cdctl processes from a warm fork server (cdctl.sim.node.forkserver)
    fabric_probe_s: float = 2.0  # how often each plugin probes its fake NVML (device health)
    # The plugins' IMEX handover hold (--imex-handover-hold): a simulated container starts within a second of
    # its Prepare, no image to pull, so a planned IMEX restart need not wait the product's 30 s.
    imex_handover_hold_s: float = 5.0
    rack_domains_namespace: str = ""  # non-empty: `cdctl controller --rack-domains` keeps its domains here
    # How fast the cluster notices a lost node (Lease renewal, node monitor grace, pod GC quarantine, the
    # kubelet's DRA reconcile); a real cluster's defaults unless a test asks for shorter ones.
    node_timings: NodeTimings = field(default_factory=NodeTimings)
    controller_replicas: int = 1  # more than one: leader election on, as the chart's `controller.replicas`
    leader_election_s: tuple[float, float, float] = (4.0, 3.0, 0.5)  # lease, renew deadline, retry period
    otlp_endpoint: str = ""  # the components' --otlp-endpoint (chart: eventLog.otlpEndpoint); "": none
    isolation: str = ImexIsolation.DOMAIN.value  # the install's imex.isolation
    imex_channel_count: int | None = None  # channels per IMEX domain under `channel`; None: the default
    channel_slots: int | None = None  # slot devices per node under `channel`; None: the plugin's default
    # Run the workers as containers: None, under `channel` isolation only; True also under `domain`; False
    # never (a benchmark of the control plane alone).
    worker_containers: bool | None = None
    # The API server keeps DRA consumable capacity (a 1.36 cluster): the plugins publish one multi-allocatable
    # channel device under `channel` isolation instead of slot devices.
    dra_consumable_capacity: bool = False

    def __post_init__(self) -> None:
        parse_isolation(self.isolation, field="isolation")  # a clear error naming the field
        if self.imex_channel_count is not None:
            parse_channel_count(self.imex_channel_count)
        if self.channel_slots is not None and self.channel_slots < 1:
            raise ValueError(f"channel_slots must be at least 1, got {self.channel_slots}")

    @property
    def host_managed(self) -> bool:
        return self.mode == HOST_MANAGED

    @property
    def channel_isolation(self) -> bool:
        return parse_isolation(self.isolation) is ImexIsolation.CHANNEL

    @property
    def runs_workers(self) -> bool:
        """Whether worker pods run as containers (the fake IMEX export/import check in each)."""
        return self.channel_isolation if self.worker_containers is None else self.worker_containers

    @property
    def feature_gates(self) -> str:
        return "HostManagedIMEX=true" if self.host_managed else ""
