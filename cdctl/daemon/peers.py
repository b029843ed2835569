"""From the clique the controller keeps to what `nvidia-imex` sees: hosts file, node list, start, reload.

cdctl.daemon.app feeds every new `PeerListing` (the entries of the followed ComputeDomainClique, or of the
domain's `status.nodes` without the ComputeDomainCliques gate) to `PeerUpdater.apply`:

* DNS-names mode: every slot name is mapped in the hosts file, unused slots to an address that reaches no one
  (cdctl.domain.imex.slot_addresses). IMEX starts once this daemon's own entry is listed; after that a change
  of the map is followed by SIGUSR1 so IMEX re-resolves the names. IMEX takes its node id from its own slot
  when it starts and keeps it through a SIGUSR1 (the Go driver's issue 1418), so a change that moves this
  daemon's own slot restarts IMEX instead (a change that drops its entry only signals: there is no slot to
  restart into until it is listed again). An unchanged map does nothing.
* IP mode: as the Go driver, wait until as many daemons are registered as the domain's `numNodes`, then write
  the peers' IPs as the node list and restart IMEX (it reads the list only at start); an unchanged list does
  nothing.

Every change is recorded as `ImexPeersChanged` with what was done about it.
"""

from __future__ import annotations

import structlog

from cdctl.daemon.files import update_hosts, write_node_list
from cdctl.daemon.journal import Journal
from cdctl.daemon.settings import DaemonSettings
from cdctl.daemon.supervisor import ImexSupervisor
from cdctl.domain.computedomains import DaemonEntry
from cdctl.domain.imex import (
    ImexPeersChanged,
    PeerListing,
    ip_node_list,
    own_clique,
    own_slot,
    peer_change,
    slot_addresses,
)

log = structlog.get_logger(__name__)


class PeerUpdater:
    def __init__(self, settings: DaemonSettings, supervisor: ImexSupervisor, journal: Journal) -> None:
        self.settings = settings
        self.supervisor = supervisor
        self.journal = journal
        self.applied: dict[str, str] | None = None  # DNS mode: slot -> address last written
        self.applied_nodes: list[str] | None = None  # IP mode: node list last written
        self.imex_slot: str | None = None  # DNS mode: the slot the running IMEX took its node id from
        supervisor.on_spawn = self._imex_starting

    def _imex_starting(self) -> None:
        """An IMEX is about to start (first start, restart, recovery from a crash): it reads the hosts file
        as last written, so its node id will be the index of the slot `applied` gives this pod."""
        if self.settings.dns_names and self.applied is not None:
            self.imex_slot = own_slot(self.applied, self.settings.pod_ip)

    async def apply(self, listing: PeerListing) -> None:
        if self.settings.dns_names:
            await self._apply_dns(listing)
        else:
            await self._apply_ip(listing)

    def _listed_self(self, entries: tuple[DaemonEntry, ...]) -> bool:
        s = self.settings
        return any(
            e.node_name == s.node_name and e.ip_address == s.pod_ip for e in own_clique(entries, s.clique_id)
        )

    async def _apply_dns(self, listing: PeerListing) -> None:
        s = self.settings
        mapping = slot_addresses(listing.entries, s.clique_id, s.max_nodes, s.unused_address)
        if mapping == self.applied:
            return
        if self.applied is None and not self._listed_self(listing.entries):
            log.info("waiting for this daemon's entry in the clique", node=s.node_name, pod_ip=s.pod_ip)
            return
        change = peer_change(self.applied or {}, mapping, s.unused_address)
        update_hosts(s.hosts_file, mapping)
        self.applied = mapping
        slot, was = own_slot(mapping, s.pod_ip), self.imex_slot
        if await self.supervisor.ensure_started("first start"):
            action = "started IMEX"
        elif not self.supervisor.running:
            action = "hosts updated; IMEX restart pending"  # the pending restart reads the new hosts file
        elif slot is not None and slot != was:
            action = f"restarted IMEX: own slot moved from {was} to {slot}"
            await self.supervisor.restart(f"own slot moved from {was} to {slot}")
        elif self.supervisor.reload():
            action = "sent SIGUSR1"
        else:
            action = "hosts updated; IMEX restart pending"
        log.info(
            "peers changed", added=change.added, removed=change.removed, moved=change.moved, action=action
        )
        await self.journal.record(
            ImexPeersChanged(
                s.node_name, s.mode, list(change.added), list(change.removed), list(change.moved), action
            )
        )

    async def _apply_ip(self, listing: PeerListing) -> None:
        s = self.settings
        registered = len(listing.entries)
        if listing.expected and registered != listing.expected:
            log.info("waiting for the expected daemons", numNodes=listing.expected, nodes_seen=registered)
            return
        nodes = ip_node_list(listing.entries, s.clique_id)
        if not nodes or nodes == self.applied_nodes or s.pod_ip not in nodes:
            return
        before = set(self.applied_nodes or [])
        write_node_list(s.nodes_path, nodes)
        first = self.applied_nodes is None
        self.applied_nodes = nodes
        log.info("node list written", nodes=nodes)
        if first and await self.supervisor.ensure_started("first start"):
            action = "started IMEX"
        else:
            await self.supervisor.restart("peers changed (IP mode)")
            action = "restarted IMEX"
        await self.journal.record(
            ImexPeersChanged(
                s.node_name,
                s.mode,
                sorted(set(nodes) - before),
                sorted(before - set(nodes)),
                [],
                action,
            )
        )
