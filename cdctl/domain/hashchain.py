"""The tamper-evident hash chain over the event log. Pure: no I/O.

hash(n) = SHA-256(hash(n-1) || canonical bytes of event n), with 64 zeros before the first event.
The canonical bytes are the envelope's fields and the stored JSON text of data and metadata, so any edit of
a stored field (or a deleted or reordered row) breaks the chain from that position on. Used by the store on
append and by `cdctl verify`.
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson

GENESIS = "0" * 64


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
    return hashlib.sha256(previous_hash.encode() + payload).hexdigest()


_OPTIONS = orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS


def dumps(value: Any) -> str:
    """The one JSON encoding used for stored data and metadata: compact, sorted keys, UTF-8 kept."""
    return orjson.dumps(value, option=_OPTIONS).decode()


def loads(text: str | bytes) -> Any:
    return orjson.loads(text)
