"""Rack domains, purely: one ComputeDomain per rack, its name, its body, and what to do when a rack changes.

With `cdctl controller --rack-domains`, every distinct value of the rack label on the nodes (a clique ID such
as `nvidia.com/gpu.clique`, or a provider's label such as `ds.coreweave.com/nvlink.domain`) gets one
ComputeDomain (numNodes 0, allocationMode Single) whose workload template is `imex-channel-<name>`.

Naming (`rack_domain_name`) is deterministic, so a restart, a re-list or a second replica always arrive at
the same name and the API server's create-if-absent does the rest. The rack value is lowercased, every run of
characters outside [a-z0-9] becomes one "-", and "-" is trimmed from both ends; the name pattern (default
`{rack}`) places the result. When lowercasing was all the cleaning did (the value was a DNS-1123 label but
for its case) the lowercased value is the name, e.g. `S0-011-US-WEST-01A` -> `s0-011-us-west-01a`; otherwise,
and whenever the result would be too long, the first 8 hex digits of the value's SHA-256 are appended
(`6a130f54-...-32766-1f0c2a9b`). Collisions: values that differ only in case share a name; any other two
values share one only by a 32-bit hash collision. Either way the controller labels each domain with its rack
value and never adopts or deletes a domain of that name that carries another rack: the rack that came
second gets no domain, and a `RackDomainConflict` event and a Warning Event say so (`Decision.CONFLICT`).

`decide` turns what is known about one rack (its nodes, its domain, the claims of that domain still
allocated) into one decision; the events of stream `rack/<name>` recording each decision are at the end.
No I/O here; used by cdctl.controller.rackdomains.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from cdctl.domain.errors import InvalidInput
from cdctl.domain.events import DomainEvent, event_type

DEFAULT_RACK_LABEL = "nvidia.com/gpu.clique"
DEFAULT_NAME_PATTERN = "{rack}"
PLACEHOLDER = "{rack}"
TEMPLATE_PREFIX = "imex-channel-"
# The rack value a domain was created for (a node label value is always a valid label value).
LABEL_RACK = "cdctl.io/rack"
# The node label the rack value was read from.
ANNOTATION_RACK_LABEL = "cdctl.io/rack-label"
DNS1123_LABEL_MAX = 63
HASH_DIGITS = 8
CHANNEL_CONFIG_KIND = "ComputeDomainChannelConfig"

_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_NOT_NAME_CHARS = re.compile(r"[^a-z0-9]+")
_LITERAL = re.compile(r"^[-a-z0-9]*$")
_LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


def is_dns1123_label(name: str) -> bool:
    return len(name) <= DNS1123_LABEL_MAX and bool(_DNS1123_LABEL.match(name))


def validate_rack_label(key: str) -> str:
    """A label key (`[prefix/]name`, prefix a DNS subdomain, name at most 63 characters); returned as is."""
    prefix, slash, name = key.rpartition("/")
    valid_name = 0 < len(name) <= DNS1123_LABEL_MAX and bool(_LABEL_NAME.match(name))
    valid_prefix = not slash or (
        len(prefix) <= 253 and all(is_dns1123_label(part) for part in prefix.split("."))
    )
    if not key or not valid_name or not valid_prefix:
        raise InvalidInput("--rack-label", "key", f"{key!r} is not a Kubernetes label key")
    return key


def validate_name_pattern(pattern: str) -> str:
    """A pattern with `{rack}` once and lowercase letters, digits or "-" around it; returned as is."""
    before, found, after = pattern.partition(PLACEHOLDER)
    if not found or PLACEHOLDER in after:
        raise InvalidInput("--rack-domain-name", "pattern", f"{pattern!r} must contain {PLACEHOLDER} once")
    if not _LITERAL.match(before + after):
        raise InvalidInput(
            "--rack-domain-name", "pattern", f"{pattern!r}: only a-z, 0-9 and '-' around {PLACEHOLDER}"
        )
    if before.startswith("-") or after.endswith("-"):
        raise InvalidInput("--rack-domain-name", "pattern", f"{pattern!r} must not start or end with '-'")
    if len(before + after) > DNS1123_LABEL_MAX - HASH_DIGITS - 2:
        raise InvalidInput("--rack-domain-name", "pattern", f"{pattern!r} leaves no room for the rack")
    return pattern


def _hash(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()[:HASH_DIGITS]


def clean(value: str) -> str:
    """The value lowercased, each run of other characters than [a-z0-9] one "-", "-" trimmed at both ends."""
    return _NOT_NAME_CHARS.sub("-", value.lower()).strip("-")


def rack_domain_name(value: str, pattern: str = DEFAULT_NAME_PATTERN) -> str:
    """The ComputeDomain name of the rack whose label value is `value` (see the module docstring)."""
    before, _, after = validate_name_pattern(pattern).partition(PLACEHOLDER)
    room = DNS1123_LABEL_MAX - len(before) - len(after)
    cleaned = clean(value)
    if cleaned and cleaned == value.lower() and len(cleaned) <= room:
        return before + cleaned + after
    readable = cleaned[: room - HASH_DIGITS - 1].strip("-")
    return before + (f"{readable}-{_hash(value)}" if readable else _hash(value)) + after


def channel_template_name(domain_name: str) -> str:
    return f"{TEMPLATE_PREFIX}{domain_name}"


def rack_stream(domain_name: str) -> str:
    return f"rack/{domain_name}"


def rack_domain_body(rack: str, rack_label: str, namespace: str, name: str) -> dict[str, Any]:
    """The ComputeDomain created for a rack: any number of nodes, one channel per node."""
    return {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomain",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {LABEL_RACK: rack},
            "annotations": {ANNOTATION_RACK_LABEL: rack_label},
        },
        "spec": {
            "numNodes": 0,
            "channel": {
                "resourceClaimTemplate": {"name": channel_template_name(name)},
                "allocationMode": "Single",
            },
        },
    }


def racks_of(nodes: Iterable[tuple[str, str]]) -> dict[str, tuple[str, ...]]:
    """(node name, rack value) pairs grouped per rack, node names sorted; empty values are no rack."""
    grouped: dict[str, list[str]] = {}
    for node, rack in nodes:
        if rack:
            grouped.setdefault(rack, []).append(node)
    return {rack: tuple(sorted(members)) for rack, members in grouped.items()}


def _channel_domain_ids(configs: Any) -> set[str]:
    found: set[str] = set()
    for config in configs or []:
        parameters = ((config or {}).get("opaque") or {}).get("parameters") or {}
        if parameters.get("kind") == CHANNEL_CONFIG_KIND and parameters.get("domainID"):
            found.add(str(parameters["domainID"]))
    return found


def claim_domain_uids(claim: Mapping[str, Any]) -> set[str]:
    """The ComputeDomains whose channels a ResourceClaim asks for (its config, or its allocation's)."""
    spec = claim.get("spec") or {}
    status = claim.get("status") or {}
    allocation = status.get("allocation") or {}
    return _channel_domain_ids((spec.get("devices") or {}).get("config")) | _channel_domain_ids(
        (allocation.get("devices") or {}).get("config")
    )


def claim_in_use(claim: Mapping[str, Any]) -> bool:
    """Allocated or reserved for a pod: a kubelet may have prepared (or be about to prepare) its channel."""
    status = claim.get("status") or {}
    return bool(status.get("allocation")) or bool(status.get("reservedFor"))


def claims_using(domain_uid: str, claims: Iterable[Mapping[str, Any]]) -> tuple[str, ...]:
    """Names of the claims of this domain that are allocated or reserved, sorted."""
    names = [
        str((claim.get("metadata") or {}).get("name", ""))
        for claim in claims
        if domain_uid in claim_domain_uids(claim) and claim_in_use(claim)
    ]
    return tuple(sorted(names))


@dataclass(frozen=True, slots=True)
class ObservedDomain:
    """The ComputeDomain of the rack's name. `rack` None: it has no rack label (not a rack domain)."""

    uid: str
    rack: str | None
    deleting: bool = False


@dataclass(frozen=True, slots=True)
class RackFacts:
    """What is known about one rack at one moment."""

    rack: str
    name: str
    nodes: tuple[str, ...]
    domain: ObservedDomain | None
    claims_in_use: tuple[str, ...] = ()


class Decision(StrEnum):
    CREATE = "create"  # nodes and no domain: create it
    PRESENT = "present"  # nodes and its domain: nothing to do
    KEEP = "keep"  # no nodes, but claims of the domain are still allocated: keep it, say why
    DELETE = "delete"  # no nodes and no claim in use: delete the domain
    WAIT = "wait"  # the domain is being deleted: decide again once it is gone
    CONFLICT = "conflict"  # the name is taken by a ComputeDomain of another rack or none: leave it alone
    NOTHING = "nothing"  # no nodes and no domain


@dataclass(frozen=True, slots=True)
class RackDecision:
    decision: Decision
    reason: str


def decide(facts: RackFacts) -> RackDecision:
    """The one thing to do about a rack now."""
    domain, count = facts.domain, len(facts.nodes)
    if domain is not None and domain.rack != facts.rack:
        owner = f"rack {domain.rack!r}" if domain.rack is not None else "no rack (not a rack domain)"
        return RackDecision(
            Decision.CONFLICT, f"ComputeDomain {facts.name} already exists and belongs to {owner}"
        )
    if domain is not None and domain.deleting:
        return RackDecision(Decision.WAIT, f"ComputeDomain {facts.name} is being deleted")
    if count:
        if domain is None:
            return RackDecision(Decision.CREATE, f"rack {facts.rack!r} has {count} node(s) and no domain")
        return RackDecision(Decision.PRESENT, f"rack {facts.rack!r} has {count} node(s) and its domain")
    if domain is None:
        return RackDecision(Decision.NOTHING, f"rack {facts.rack!r} has no nodes and no domain")
    if facts.claims_in_use:
        claims = ", ".join(facts.claims_in_use)
        return RackDecision(
            Decision.KEEP,
            f"rack {facts.rack!r} has no nodes left; kept while {len(facts.claims_in_use)} claim(s) "
            f"still use it: {claims}",
        )
    return RackDecision(Decision.DELETE, f"rack {facts.rack!r} has no nodes left and no claim uses it")


# --- Events of stream rack/<name> --------------------------------------------------------------------------


@event_type("RackDomainCreated")
@dataclass(frozen=True, slots=True)
class RackDomainCreated(DomainEvent):
    """The rack's domain was created; `existed`: another writer (a second replica) had created it first."""

    rack: str
    rack_label: str
    namespace: str
    name: str
    template: str
    uid: str
    nodes: list[str] = field(default_factory=list)
    existed: bool = False
    reason: str = ""


@event_type("RackDomainKept")
@dataclass(frozen=True, slots=True)
class RackDomainKept(DomainEvent):
    """The rack has no nodes but claims of its domain are still allocated: the domain stays."""

    rack: str
    namespace: str
    name: str
    uid: str
    claims: list[str] = field(default_factory=list)
    reason: str = ""


@event_type("RackDomainDeleted")
@dataclass(frozen=True, slots=True)
class RackDomainDeleted(DomainEvent):
    """The rack's last node is gone and no claim used the domain: its deletion was requested."""

    rack: str
    namespace: str
    name: str
    uid: str
    reason: str = ""


@event_type("RackDomainConflict")
@dataclass(frozen=True, slots=True)
class RackDomainConflict(DomainEvent):
    """The rack's name is taken by a ComputeDomain that is not this rack's; it is left alone."""

    rack: str
    namespace: str
    name: str
    uid: str
    reason: str = ""


@event_type("RackDomainActionFailed")
@dataclass(frozen=True, slots=True)
class RackDomainActionFailed(DomainEvent):
    rack: str
    namespace: str
    name: str
    action: str
    error: str
    retriable: bool = True
