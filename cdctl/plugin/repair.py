"""Repair of a completed claim on a repeated Prepare: what the first Prepare wrote must still be there.

Called by cdctl.plugin.prepare (under the claim's lock) when the kubelet prepares a claim this node already
completed for the same allocation, which it does for every running pod after it restarts. The answer comes
from the log, but the container runtime resolves the CDI ids in it from the claim's spec file, and a daemon
mounts its domain directory: a spec or directory removed or changed since (a wiped CDI root, a node clean-up)
would leave the pod unable to start. So the expected spec and directory are rebuilt the way the first Prepare
built them (cdctl.plugin.edits), compared with what is on disk, rewritten where missing or different, and the
repair is recorded as ClaimPrepareRepaired. A daemon claim's authorization is not asked again (the claim and
its owner cannot change), but its domain must still exist.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from cdctl.api.configs import ChannelConfig
from cdctl.api.refs import DomainInfo
from cdctl.domain import claims as c
from cdctl.plugin import cdi
from cdctl.plugin.daemonclaims import domain_dir
from cdctl.plugin.devices import (
    MAX_CHANNELS,
    PUBLISHED_DEVICES,
    AllocatedClaim,
    get_config_results_map,
    get_opaque_device_configs,
)
from cdctl.plugin.edits import (
    DeviceFacts,
    channel_device,
    daemon_device,
    domain_dir_current,
    write_domain_dir,
)

log = structlog.get_logger("cdctl.plugin.repair")

CDI_SPEC = "cdi-spec"
DOMAIN_DIR = "domain-dir"


@dataclass(frozen=True)
class RepairContext:
    plugin_dir: Path
    cdi_root: Path
    clique: str
    facts: DeviceFacts
    fsync: bool
    lookup_domain: Callable[[str], Awaitable[DomainInfo]]  # raises when the domain is gone
    published: Mapping[str, str] = field(default_factory=lambda: dict(PUBLISHED_DEVICES))


async def repair_completed(
    ctx: RepairContext, claim: AllocatedClaim, rec: c.ClaimRecord
) -> c.ClaimPrepareRepaired | None:
    """Rewrite the claim's missing or changed CDI spec and domain directories; the event saying so, or None
    when everything is as the first Prepare left it."""
    uid = claim.ref.uid
    configs = get_opaque_device_configs(claim.configs, strict=False)
    devices: list[cdi.ClaimDevice] = []
    roots: list[Path] = []
    for opaque, results in get_config_results_map(claim, configs, published=ctx.published):
        result = results[0]
        if isinstance(opaque.config, ChannelConfig):
            count = len(rec.channels) or (MAX_CHANNELS if opaque.config.all_channels else 1)
            # Domain isolation records channels [0, count); channel isolation the domain's one.
            channels = rec.channels or range(count)
            device, _ = channel_device(uid, result.device, channels, ctx.clique, ctx.facts)
            if device is not None:
                devices.append(device)
        else:
            domain = await ctx.lookup_domain(opaque.config.domain_id)
            root = domain_dir(ctx.plugin_dir, domain.uid)
            roots.append(root)
            device, _ = daemon_device(uid, result.device, domain, root, ctx.clique, ctx.facts)
            devices.append(device)
    repaired: list[str] = []
    found: list[str] = []
    path = cdi.claim_spec_path(ctx.cdi_root, uid)
    if devices:
        spec = cdi.build_claim_spec(uid, devices)
        on_disk = cdi.read_spec(path)
        if on_disk != spec:
            found.append("CDI spec missing" if on_disk is None else "CDI spec changed")
            cdi.write_spec(path, spec, fsync=ctx.fsync)
            repaired.append(CDI_SPEC)
    for root in roots:
        if not domain_dir_current(root):
            found.append("domain directory missing" if not root.is_dir() else "IMEX config template changed")
            write_domain_dir(root)
            repaired.append(DOMAIN_DIR)
    if not repaired:
        return None
    reason = "; ".join(found)
    log.warning("repaired a prepared claim", claim=str(claim.ref), repaired=repaired, reason=reason)
    return c.ClaimPrepareRepaired(
        uid,
        repaired,
        reason,
        str(path) if CDI_SPEC in repaired else "",
        str(roots[0]) if DOMAIN_DIR in repaired else "",
    )
