"""IMEX isolation settings: `domain` (one IMEX domain per ComputeDomain) or `channel` (one per NVLink clique).

The install-wide choice of docs/channel-isolation.md: Helm `resources.computeDomains.imex.isolation`, env
`IMEX_ISOLATION`, flag `--imex-isolation`; the channel limit per IMEX domain `--imex-channel-count`. Called by
the controller (the channel allocator and the workload templates it renders), the kubelet plugin (channel
devices and Prepare) and the simulated rack, so all of them read the same names. Pure: no I/O.
"""

from __future__ import annotations

from enum import Enum

from cdctl.domain.errors import InvalidInput, echo

OBJECT = "IMEX isolation settings"

# The device class a ComputeDomain's workload claims request under `channel` isolation. Upstream names it and
# never ships it; our chart does.
CHANNEL_ISOLATION_DEVICE_CLASS = "compute-domain-channel.nvidia.com"

# The ComputeDomainClique field that carries the domain's IMEX channel in that clique. Set by the controller's
# leader before any plugin may use the number; plugins read it from the clique objects they watch. Upstream's
# CRD would prune it, so `channel` isolation needs our CRDs.
CLIQUE_CHANNEL_FIELD = "imexChannel"

# The Node label that names a node's NVLink clique (GPU Feature Discovery sets it to NVML's
# `<cluster uuid>.<clique id>`, the id the kubelet plugin reads itself): the controller assigns a domain's
# channel in the clique of the node each of its claims is allocated to, before any Prepare (a ResourceSlice
# carries no clique: the Go driver's channel devices have only `type` and `id`).
CLIQUE_NODE_LABEL = "nvidia.com/gpu.clique"

# Slurm's switch/nvidia_imex limit; channel 0 is never handed out under `channel` isolation.
DEFAULT_CHANNEL_COUNT = 2048
MIN_CHANNEL_COUNT = 2
# The kernel's nvidia-caps-imex-channels minors: 0..2047.
MAX_CHANNEL_COUNT = 2048


class ImexIsolation(Enum):
    DOMAIN = "domain"
    CHANNEL = "channel"


def parse_isolation(text: str, *, field: str = "imex.isolation") -> ImexIsolation:
    """`domain` or `channel` (empty means the default, `domain`); anything else names the field."""
    value = text.strip()
    if not value:
        return ImexIsolation.DOMAIN
    for isolation in ImexIsolation:
        if value == isolation.value:
            return isolation
    raise InvalidInput(OBJECT, field, f"must be 'domain' or 'channel', got {echo(value)}")


def parse_channel_count(value: int | str, *, field: str = "--imex-channel-count") -> int:
    """Channels per IMEX domain, MIN_CHANNEL_COUNT..MAX_CHANNEL_COUNT (channel 0 counted, never used)."""
    try:
        count = int(value)
    except (TypeError, ValueError):
        raise InvalidInput(OBJECT, field, f"must be an integer, got {echo(str(value))}") from None
    if not MIN_CHANNEL_COUNT <= count <= MAX_CHANNEL_COUNT:
        raise InvalidInput(
            OBJECT, field, f"must be between {MIN_CHANNEL_COUNT} and {MAX_CHANNEL_COUNT}, got {count}"
        )
    return count


def channel_stream(clique_id: str) -> str:
    """The controller log's stream of one clique's channel assignments and releases."""
    return f"channels/{clique_id}"
