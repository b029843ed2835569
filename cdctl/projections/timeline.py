"""An object's timeline in an event log or a collected file: which events tell its story, in time order.

`cdctl history SUBJECT` takes what a kubectl user knows, or what the log names:
- `computedomain/NAMESPACE/NAME`, `resourceclaim/NAMESPACE/NAME`: resolved to uids from the observed events
  (the controller's ComputeDomainObserved, the plugins' ClaimPrepareStarted). A name that had several uids
  (the object was deleted and created again) is `Ambiguous`, listing each uid with when it was seen; the
  uid then picks one.
- `node/NAME`: the node's own streams (`node/NAME`, `plugin/NAME`), every event that names it, and in a
  collected file every event of that node's plugin and IMEX daemons.
- a stream (`domain/<uid>`, `claim/<uid>`, `channels/<clique>`, ...) as it is, or a bare uid or node name.
A domain's or claim's story is every stream that names its uid (the domain's own stream, its claims'
streams, its daemons' streams), per source in a collected file: the controller's decisions, each plugin's
prepares and each daemon's IMEX restarts, merged by recorded_at with the source of each line. Reads go
through `EventSource`, the `events` table of a log or the `events` view of a collected file (which has a
`source` column). Used by cdctl.cli.history.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from cdctl.domain.errors import InvalidInput
from cdctl.domain.events import RecordedEvent
from cdctl.store.sqlite import row_to_event

Query = Callable[[str, Sequence[Any]], Awaitable[list[tuple[Any, ...]]]]
KINDS = {
    "computedomain": "computedomain", "computedomains": "computedomain", "cd": "computedomain",
    "resourceclaim": "resourceclaim", "resourceclaims": "resourceclaim",
    "node": "node", "nodes": "node", "no": "node",
}  # fmt: skip
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
LIMIT = 100_000


@dataclass(frozen=True, slots=True)
class Candidate:
    uid: str
    first_seen: str
    last_seen: str
    events: int


class Ambiguous(InvalidInput):
    """A name that had several uids; the message lists them."""

    def __init__(self, subject: str, candidates: Sequence[Candidate], command: str = "cdctl history") -> None:
        listed = "; ".join(
            f"{c.uid} (seen {c.first_seen[:19]} to {c.last_seen[:19]}, {c.events} events)" for c in candidates
        )
        super().__init__(
            command,
            "SUBJECT",
            f"{subject} names {len(candidates)} objects (recreated): {listed}."
            " Give one of these uids as SUBJECT",
        )
        self.candidates = list(candidates)


@dataclass(frozen=True, slots=True)
class Line:
    """One event of a timeline and where it comes from ('' in a single log)."""

    source: str
    event: RecordedEvent


class EventSource:
    """The `events` of a log (`collected=False`) or of a collected file, through an async query function."""

    def __init__(self, query: Query, collected: bool, where: str) -> None:
        self.query = query
        self.collected = collected
        self.where = where

    @property
    def _source(self) -> str:
        return "source" if self.collected else "''"

    @property
    def _pair(self) -> str:
        return "(source_id, stream)" if self.collected else "stream"

    async def lines(
        self, condition: str, params: Sequence[Any], since: str = "", until: str = ""
    ) -> list[Line]:
        sql = (
            f"SELECT {self._source}, position, stream, version, type, schema_version, data, metadata,"
            f" recorded_at, hash FROM events WHERE ({condition})"
        )
        args = list(params)
        if since:
            sql, args = sql + " AND recorded_at >= ?", [*args, since]
        if until:
            sql, args = sql + " AND recorded_at <= ?", [*args, until]
        sql += f" ORDER BY recorded_at, {self._source}, position LIMIT {LIMIT}"
        rows = await self.query(sql, args)
        return [Line(str(row[0]), row_to_event(row[1:], self.where)) for row in rows]

    def naming(self, uid: str) -> tuple[str, list[Any]]:
        """Every stream (per source) that names `uid`: its own, and any with an event whose data has it as a
        value; of a clique's channel stream (`channels/<clique>`, shared by every domain of the clique) only
        the events that name it."""
        inner = (
            f"SELECT DISTINCT {self._pair.strip('()')} FROM events WHERE stream GLOB ? OR instr(data, ?) > 0"
        )
        condition = (
            f"({self._pair} IN ({inner}) AND stream NOT GLOB 'channels/*')"
            " OR (stream GLOB 'channels/*' AND instr(data, ?) > 0)"
        )
        return condition, [f"*/{uid}", f'"{uid}"', f'"{uid}"']

    async def uids(self, kind: str, namespace: str, name: str) -> list[Candidate]:
        if kind == "computedomain":
            condition = (
                "stream GLOB 'domain/*' AND type = 'ComputeDomainObserved' AND json_valid(data)"
                " AND json_extract(data, '$.namespace') = ? AND json_extract(data, '$.name') = ?"
            )
            params: list[Any] = [namespace, name]
            uid = "substr(stream, 8)"
        else:
            condition = (
                "stream GLOB 'claim/*' AND type = 'ClaimPrepareStarted' AND json_valid(data) AND"
                " ((json_extract(data, '$.namespace') = ? AND json_extract(data, '$.name') = ?)"
                " OR json_extract(data, '$.claim') = ?)"
            )
            params = [namespace, name, f"{namespace}/{name}"]
            uid = "substr(stream, 7)"
        rows = await self.query(
            f"SELECT {uid}, MIN(recorded_at), MAX(recorded_at), COUNT(*) FROM events WHERE {condition}"
            f" GROUP BY {uid} ORDER BY MIN(recorded_at)",
            params,
        )
        found = [Candidate(str(r[0]), str(r[1]), str(r[2]), int(r[3])) for r in rows]
        if not found:
            return []
        # Each candidate's whole span, not only the events that named it.
        out = []
        for candidate in found:
            span = await self.query(
                "SELECT MIN(recorded_at), MAX(recorded_at), COUNT(*) FROM events WHERE stream GLOB ?",
                [f"*/{candidate.uid}"],
            )
            first, last, count = span[0]
            out.append(Candidate(candidate.uid, str(first), str(last), int(count)))
        return out


def parse_subject(subject: str, command: str = "cdctl history") -> tuple[str, list[str]]:
    """(kind, parts) for a kubectl-style subject ('computedomain', [ns, name]; 'node', [name]), or
    ('stream', [subject]) / ('bare', [subject]). `command` is the one errors name."""
    head, _, rest = subject.partition("/")
    kind = KINDS.get(head.lower())
    if kind is None or not rest:
        return ("stream" if "/" in subject else "bare"), [subject]
    parts = rest.split("/")
    wanted = 1 if kind == "node" else 2
    if len(parts) != wanted or not all(_NAME.match(p) for p in parts):
        form = "node/NAME" if kind == "node" else f"{kind}/NAMESPACE/NAME"
        raise InvalidInput(command, "SUBJECT", f"{subject!r} is not {form}")
    return kind, parts


async def resolve_uid(
    events: EventSource, subject: str, kind: str, namespace: str, name: str, command: str = "cdctl history"
) -> str:
    """The uid a computedomain or resourceclaim NAMESPACE/NAME had in the file; InvalidInput when none did,
    Ambiguous when several did (the object was recreated)."""
    candidates = await events.uids(kind, namespace, name)
    if not candidates:
        hint = "the controller's log" if kind == "computedomain" else "the plugins' logs"
        raise InvalidInput(
            command, "SUBJECT", f"no {kind} {namespace}/{name} observed in {events.where} ({hint})"
        )
    if len(candidates) > 1:
        raise Ambiguous(subject, candidates, command)
    return candidates[0].uid


async def timeline(
    events: EventSource, subject: str, since: str = "", until: str = ""
) -> tuple[str, list[Line]]:
    """What `subject` resolves to (said to the operator) and its events in time order."""
    kind, parts = parse_subject(subject)
    if kind in ("computedomain", "resourceclaim"):
        uid = await resolve_uid(events, subject, kind, *parts)
        condition, params = events.naming(uid)
        return f"{subject} is uid {uid}", await events.lines(condition, params, since, until)
    if kind == "node":
        return f"node {parts[0]}", await events.lines(*_node(events, parts[0]), since, until)
    if kind == "stream":
        return subject, await events.lines("stream = ?", [subject], since, until)
    condition, params = events.naming(subject)
    node_condition, node_params = _node(events, subject)
    either = f"({condition}) OR ({node_condition})"
    return subject, await events.lines(either, [*params, *node_params], since, until)


def _node(events: EventSource, name: str) -> tuple[str, list[Any]]:
    condition = "stream IN (?, ?) OR instr(data, ?) > 0"
    params: list[Any] = [f"node/{name}", f"plugin/{name}", f'"{name}"']
    if events.collected:
        condition += " OR (node = ? AND component IN ('kubelet-plugin', 'daemon'))"
        params.append(name)
    else:  # a plugin's own log: the whole stream of each claim prepared there (a fence names no node)
        condition += (
            " OR stream IN (SELECT stream FROM events WHERE stream GLOB 'claim/*' AND instr(data, ?) > 0)"
        )
        params.append(f'"{name}"')
    return condition, params
