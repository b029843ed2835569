"""The IMEX daemon's decisions, purely: slot names, peer maps, the hosts block, the config, and its events.

`cdctl daemon run` (cdctl.daemon) follows the ComputeDomainClique the controller keeps (or, with the
ComputeDomainCliques gate off, the domain's `status.nodes`) and turns the entries of its own clique into what
`nvidia-imex` reads:

* DNS-names mode: the node list is the fixed `compute-domain-daemon-0000 ..` slot names, and the pod's hosts
  file maps every slot to an address. A slot whose daemon is not in the clique maps to `unused_address`, an
  address that reaches no one, never to a stale pod IP. That is the fix of the Go driver's issue 1447: a
  stale mapping made IMEX keep dialling a pod IP that another domain's daemon had been given since.
* IP mode: the node list is the peers' IPs in index order, written once the expected number registered.

The managed block of the hosts file is one header line followed by one line per slot; every other line of the
file is kept byte for byte, and re-rendering never adds a second header. The events of stream `node/<name>` in
the daemon's own log (default /imexd/events.db) are defined at the end. No I/O here.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from cdctl.domain.computedomains import DaemonEntry
from cdctl.domain.errors import InvalidInput, PermanentError
from cdctl.domain.events import DomainEvent, event_type

SLOT_NAME_PREFIX = "compute-domain-daemon-"
HOSTS_HEADER = "# Compute Domain Daemon mappings"
DEFAULT_UNUSED_ADDRESS = "192.0.2.1"  # RFC 5737 TEST-NET-1: documentation only, routed to no host
CONFIG_NAME = "imexd.cfg"
TEMPLATE_NAME = "imexd.cfg.tmpl"
NODES_NAME = "nodes.cfg"
EVENTS_NAME = "events.db"
MODE_DNS = "dns-names"
MODE_IP = "ip"
_PLACEHOLDER = re.compile(r"\{\{\s*\.(\w+)\s*\}\}")


def imex_stream(node: str) -> str:
    """The daemon's stream in its own log; `cdctl history --db /imexd/events.db <node>` finds it."""
    return f"node/{node}"


def slot_name(index: int) -> str:
    return f"{SLOT_NAME_PREFIX}{index:04d}"


def dns_node_list(max_nodes: int) -> list[str]:
    """The DNS-names mode node list: one fixed name per slot, 0 .. max_nodes-1."""
    if max_nodes < 1:
        raise InvalidInput("daemon settings", "max-nodes-per-imex-domain", f"{max_nodes} is not positive")
    return [slot_name(index) for index in range(max_nodes)]


def render_config(template: str, values: Mapping[str, str]) -> str:
    """Fill `{{ .Name }}` placeholders; a placeholder without a value is an error naming it."""

    def fill(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in values:
            raise InvalidInput("IMEX config template", name, "no value for this placeholder")
        return values[name]

    return _PLACEHOLDER.sub(fill, template)


def own_clique(entries: Iterable[DaemonEntry], clique_id: str) -> list[DaemonEntry]:
    """The entries of `clique_id` that name a daemon with an address, in index order."""
    return sorted(
        (e for e in entries if e.clique_id == clique_id and e.ip_address),
        key=lambda e: (e.index, e.node_name),
    )


def slot_addresses(
    entries: Iterable[DaemonEntry], clique_id: str, max_nodes: int, unused_address: str
) -> dict[str, str]:
    """Slot name -> address for every slot: the daemon holding it, else `unused_address`.

    An index outside [0, max_nodes) cannot be named and is a permanent error (the controller assigns indices
    below the same limit it gives this daemon).
    """
    mapping = {name: unused_address for name in dns_node_list(max_nodes)}
    for entry in own_clique(entries, clique_id):
        if not 0 <= entry.index < max_nodes:
            raise PermanentError(
                f"daemon {entry.node_name} has index {entry.index}, outside [0, {max_nodes}) "
                "(maxNodesPerIMEXDomain differs between controller and daemon?)"
            )
        mapping[slot_name(entry.index)] = entry.ip_address
    return mapping


def own_slot(mapping: Mapping[str, str], address: str) -> str | None:
    """The slot `mapping` gives the daemon at `address` (its IMEX node id is that slot's index), or None."""
    return next((name for name, mapped in sorted(mapping.items()) if mapped == address), None)


def ip_node_list(entries: Iterable[DaemonEntry], clique_id: str) -> list[str]:
    """The IP mode node list: the clique's daemon addresses in index order."""
    return [e.ip_address for e in own_clique(entries, clique_id)]


def _is_managed(line: str) -> bool:
    stripped = line.strip()
    if stripped == HOSTS_HEADER:
        return True
    fields = stripped.split("#", 1)[0].split()
    return any(name.startswith(SLOT_NAME_PREFIX) for name in fields[1:])


def render_hosts(current: str, mapping: Mapping[str, str]) -> str:
    """The hosts file with its managed block replaced by `mapping` (one header, then `<ip>\\t<name>` lines).

    Lines outside the block are kept exactly as they are, in order; an empty mapping removes the block.
    """
    kept = [line for line in current.splitlines(keepends=True) if not _is_managed(line)]
    if kept and not kept[-1].endswith("\n"):
        kept[-1] += "\n"
    if not mapping:
        return "".join(kept)
    block = [f"{HOSTS_HEADER}\n"] + [f"{address}\t{name}\n" for name, address in sorted(mapping.items())]
    return "".join(kept + block)


def hosts_mapping(text: str) -> dict[str, str]:
    """The managed slot names and their addresses as a hosts file currently has them."""
    mapping: dict[str, str] = {}
    for line in text.splitlines():
        fields = line.split("#", 1)[0].split()
        for name in fields[1:]:
            if name.startswith(SLOT_NAME_PREFIX):
                mapping[name] = fields[0]
    return mapping


@dataclass(frozen=True, slots=True)
class PeerListing:
    """The daemons the controller lists for this domain now; `expected`: the domain's numNodes (IP mode)."""

    entries: tuple[DaemonEntry, ...]
    expected: int = 0


@dataclass(frozen=True, slots=True)
class PeerChange:
    """What changed between two peer maps: names (DNS mode) or addresses (IP mode)."""

    added: tuple[str, ...]
    removed: tuple[str, ...]
    moved: tuple[str, ...]

    @property
    def empty(self) -> bool:
        return not (self.added or self.removed or self.moved)


def peer_change(before: Mapping[str, str], after: Mapping[str, str], unused_address: str) -> PeerChange:
    """Peers that joined, left, or kept their slot under a new address (unused slots are no peers)."""

    def live(mapping: Mapping[str, str]) -> dict[str, str]:
        return {name: address for name, address in mapping.items() if address != unused_address}

    old, new = live(before), live(after)
    return PeerChange(
        added=tuple(sorted(f"{n}={new[n]}" for n in new.keys() - old.keys())),
        removed=tuple(sorted(f"{n}={old[n]}" for n in old.keys() - new.keys())),
        moved=tuple(sorted(f"{n}={new[n]}" for n in new.keys() & old.keys() if new[n] != old[n])),
    )


def exit_description(returncode: int) -> tuple[int | None, str | None]:
    """(exit code, signal name) of a child's return code (negative: killed by that signal)."""
    if returncode >= 0:
        return returncode, None
    try:
        return None, signal.Signals(-returncode).name
    except ValueError:
        return None, f"signal {-returncode}"


# --- Events of stream node/<name> in the daemon's log ------------------------------------------------------


@event_type("ImexDaemonStarted")
@dataclass(frozen=True, slots=True)
class ImexDaemonStarted(DomainEvent):
    """`cdctl daemon run` began on this node for this domain and clique."""

    node: str
    domain_uid: str
    clique_id: str
    pod_name: str
    pod_ip: str
    mode: str
    max_nodes: int


@event_type("ImexStarted")
@dataclass(frozen=True, slots=True)
class ImexStarted(DomainEvent):
    """`nvidia-imex` was started (`reason`: first start, restart after a crash, peers changed in IP mode)."""

    node: str
    pid: int
    reason: str
    attempt: int = 0


@event_type("ImexExited")
@dataclass(frozen=True, slots=True)
class ImexExited(DomainEvent):
    """`nvidia-imex` ended: `exit_code`, or `signal` when one killed it; `expected` when we stopped it."""

    node: str
    pid: int
    exit_code: int | None
    signal: str | None
    expected: bool
    reason: str
    restart_in_s: float | None = None


@event_type("ImexPeersChanged")
@dataclass(frozen=True, slots=True)
class ImexPeersChanged(DomainEvent):
    """This daemon's peers changed (`name=ip` in DNS mode, `ip` in IP mode) and what was done about it."""

    node: str
    mode: str
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    moved: list[str] = field(default_factory=list)
    action: str = ""


@event_type("ImexReadinessChanged")
@dataclass(frozen=True, slots=True)
class ImexReadinessChanged(DomainEvent):
    """`nvidia-imex-ctl -q` began or stopped answering READY (`output`: what it said)."""

    node: str
    ready: bool
    output: str


@event_type("ImexDaemonStopped")
@dataclass(frozen=True, slots=True)
class ImexDaemonStopped(DomainEvent):
    """`cdctl daemon run` ended (`reason`: SIGTERM, or the error that ended it)."""

    node: str
    reason: str
    error: bool = False
