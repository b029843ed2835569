"""Turning requested appends into recorded events: versions, positions, dedup, timestamps, hash chain.

Shared by every store implementation so they cannot disagree on the contract. Pure apart from the clock
passed in; the caller supplies what it knows of stream versions and recorded observations.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from cdctl.domain import hashchain
from cdctl.domain.errors import ConcurrencyConflict, InvalidInput
from cdctl.domain.events import RecordedEvent
from cdctl.store.base import ANY, StreamAppend


@dataclass(frozen=True, slots=True)
class SealedEvent:
    """A recorded event plus the exact text stored for it."""

    event: RecordedEvent
    data_json: str
    metadata_json: str
    recorded_at: str
    observed: tuple[str, str] | None

    def row(self) -> tuple[int, str, int, str, int, str, str, str, str]:
        """The values of an `events` row, in column order."""
        e = self.event
        return (
            e.position, e.stream, e.version, e.type, e.schema_version,
            self.data_json, self.metadata_json, self.recorded_at, e.hash,
        )  # fmt: skip


@dataclass(slots=True)
class Chain:
    """The writer's view of the log's tip: head position, last hash and the stream versions it has seen."""

    head: int
    last_hash: str
    scheme: hashchain.ChainScheme = field(default_factory=hashchain.ChainScheme)
    versions: dict[str, int] = field(default_factory=dict)
    observed: set[tuple[str, str]] = field(default_factory=set)


def utc_now() -> datetime:
    return datetime.now(UTC)


@functools.lru_cache(maxsize=4096)
def format_time(moment: datetime) -> str:
    """Stored timestamps: UTC, microseconds, one fixed width, so text order is time order.

    Cached: the events of one commit share their instant, and folds format it once per projection.
    """
    return moment.astimezone(UTC).isoformat(timespec="microseconds")


def seal(
    appends: Sequence[StreamAppend],
    chain: Chain,
    already_observed: Callable[[str, str], bool],
    now: datetime,
) -> list[SealedEvent]:
    """Seal one atomic batch against `chain` and advance it; raise without touching it on a conflict.

    `chain.versions` must already hold every stream in `appends`; `already_observed` answers for
    (uid, resourceVersion) pairs recorded before this batch.
    """
    versions: dict[str, int] = {}
    observed: set[tuple[str, str]] = set()
    for append in appends:
        if not append.stream or "\n" in append.stream:
            raise InvalidInput("append", "stream", f"invalid stream name {append.stream!r}")
        current = versions.get(append.stream, chain.versions[append.stream])
        if append.expected_version != ANY and append.expected_version != current:
            raise ConcurrencyConflict(append.stream, append.expected_version, current)
        versions[append.stream] = current
    sealed: list[SealedEvent] = []
    position, last_hash = chain.head, chain.last_hash
    link = chain.scheme.link
    recorded_at = format_time(now)
    for append in appends:
        for new in append.events:
            key: tuple[str, str] | None = None
            metadata = new.metadata
            if new.observed is not None:
                key = (new.observed.uid, new.observed.resource_version)
                if key in observed or key in chain.observed or already_observed(*key):
                    continue
                observed.add(key)
                metadata = {**metadata, "uid": key[0], "resourceVersion": key[1]}
            position += 1
            version = versions[append.stream] + 1
            versions[append.stream] = version
            data_json = hashchain.dumps(new.data)
            metadata_json = hashchain.dumps(metadata)
            payload = hashchain.canonical_bytes(
                position,
                append.stream,
                version,
                new.type,
                new.schema_version,
                data_json,
                metadata_json,
                recorded_at,
            )
            last_hash = link(position, last_hash, payload)
            event = RecordedEvent(
                position,
                append.stream,
                version,
                new.type,
                new.schema_version,
                new.data,
                metadata,
                now,
                last_hash,
                data_json,  # as a read returns it: the history table stores this text as it is
            )
            sealed.append(SealedEvent(event, data_json, metadata_json, recorded_at, key))
    chain.head, chain.last_hash = position, last_hash
    chain.versions.update(versions)
    chain.observed.update(observed)
    return sealed
