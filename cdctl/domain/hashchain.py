"""The tamper-evident hash chain over the event log. Pure: no I/O.

hash(n) = SHA-256(hash(n-1) || canonical bytes of event n), with 64 zeros before the first event; in a keyed
log, events after the position the key was adopted at are chained with HMAC-SHA256 under the key instead, so
a chain recomputed without the key fails. The canonical bytes are the envelope's fields and the stored JSON
text of data and metadata, so any edit of a stored field (or a deleted or reordered row) breaks the chain from
that position on. Used by the store on append and at open, and by `cdctl verify`.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass, field
from typing import Any

import orjson

GENESIS = "0" * 64
UNKEYED = "sha256"
KEYED = "hmac-sha256"
_KEY_CHECK_MESSAGE = b"cdctl event log key check"


def canonical_bytes(
    position: int,
    stream: str,
    version: int,
    type_: str,
    schema_version: int,
    data_json: str,
    metadata_json: str,
    recorded_at: str,
) -> bytes:
    # data and metadata enter as the exact stored JSON text, so verification never depends on re-serialising.
    head = orjson.dumps([position, stream, version, type_, schema_version, recorded_at])
    return b"\n".join((head, data_json.encode(), metadata_json.encode()))


def chain(previous_hash: str, payload: bytes) -> str:
    """One unkeyed link: SHA-256 over the previous hash and the event's canonical bytes."""
    return hashlib.sha256(previous_hash.encode() + payload).hexdigest()


def keyed_chain(key: bytes, previous_hash: str, payload: bytes) -> str:
    """One keyed link: HMAC-SHA256 under `key` over the previous hash and the event's canonical bytes."""
    return hmac.digest(key, previous_hash.encode() + payload, "sha256").hex()


def key_check(key: bytes) -> str:
    """A value that identifies a key without revealing it: HMAC of a fixed message under the key."""
    return hmac.digest(key, _KEY_CHECK_MESSAGE, "sha256").hex()


@dataclass(frozen=True, slots=True)
class ChainScheme:
    """How a log's links are computed: unkeyed throughout, or keyed after position `keyed_from`.

    A log keyed at creation has `keyed_from` 0; a log that was unkeyed and adopted a key keeps its first
    `keyed_from` events as SHA-256 links, and the first keyed link covers the last unkeyed hash.
    """

    key: bytes | None = None
    keyed_from: int = 0
    # The HMAC state after the key, copied for each link (about half the cost of a fresh HMAC per event).
    _keyed: Any = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.key is not None:
            object.__setattr__(self, "_keyed", hmac.new(self.key, digestmod="sha256"))

    @property
    def name(self) -> str:
        return KEYED if self.key is not None else UNKEYED

    def link(self, position: int, previous_hash: str, payload: bytes) -> str:
        if self.key is None or position <= self.keyed_from:
            return chain(previous_hash, payload)
        mac = self._keyed.copy()
        mac.update(previous_hash.encode() + payload)
        return str(mac.hexdigest())


def dumps(value: Any) -> str:
    """The one JSON encoding used for stored data and metadata: compact, sorted keys, UTF-8 kept."""
    return orjson.dumps(value, option=_OPTIONS).decode()


_OPTIONS = orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS


def loads(text: str | bytes) -> Any:
    return orjson.loads(text)
