"""ObjectMeta rules the API server enforces: names, generateName, system-owned fields, timestamps.

Pure helpers used by cdctl.sim.apiserver.store on every create and update, and `clone`, the copy the store
makes of what it keeps and answers.
"""

from __future__ import annotations

import copy
import random
import re
import uuid
from datetime import UTC, datetime
from typing import Any, TypeVar

import orjson

from cdctl.sim.apiserver.errors import Invalid

# The alphabet Kubernetes uses for generateName suffixes (no vowels, no confusable digits).
_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_SUFFIX_LENGTH = 5
_SUBDOMAIN_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
SYSTEM_FIELDS = (
    "uid",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
    "resourceVersion",
    "selfLink",
)


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def new_uid() -> str:
    return str(uuid.uuid4())


def generated_name(prefix: str, rng: random.Random) -> str:
    return prefix + "".join(rng.choice(_SUFFIX_ALPHABET) for _ in range(_SUFFIX_LENGTH))


def validate_name(kind: str, name: str) -> None:
    if not name:
        raise Invalid(f"{kind} is invalid: metadata.name: Required value: name or generateName is required")
    if len(name) > 253 or not _SUBDOMAIN_RE.match(name):
        raise Invalid(
            f'{kind} "{name}" is invalid: metadata.name: Invalid value: "{name}": a lowercase RFC 1123 '
            "subdomain must consist of lower case alphanumeric characters, '-' or '.', "
            "and must start and end with an "
            "alphanumeric character"
        )


def metadata_of(obj: dict[str, Any]) -> dict[str, Any]:
    metadata = obj.get("metadata")
    if metadata is None:
        metadata = obj["metadata"] = {}
    if not isinstance(metadata, dict):
        raise Invalid("metadata must be an object")
    return metadata


def carry_system_fields(new: dict[str, Any], old: dict[str, Any]) -> None:
    """Keep the server-owned metadata of `old` in `new` (clients cannot change them with an update)."""
    new_meta = metadata_of(new)
    old_meta = old["metadata"]
    for field in (*SYSTEM_FIELDS, "name", "namespace", "generateName"):
        if field in old_meta:
            new_meta[field] = copy.deepcopy(old_meta[field])
        else:
            new_meta.pop(field, None)
    new_meta.pop("managedFields", None)


def content_without_metadata(obj: dict[str, Any], ignore_status: bool) -> dict[str, Any]:
    """What `generation` counts: everything but metadata (and status, when it is a subresource)."""
    skipped = {"metadata", "apiVersion", "kind"} | ({"status"} if ignore_status else set())
    return {k: v for k, v in obj.items() if k not in skipped}


T = TypeVar("T")


def clone(obj: T) -> T:
    """A deep copy of stored data, made as a real API server makes one: through its serialization (several
    times cheaper than copy.deepcopy, which was most of the simulated server's CPU under load). Data that is
    not JSON (a test's own Python objects) is copied with copy.deepcopy."""
    try:
        copied: T = orjson.loads(orjson.dumps(obj))
    except TypeError:
        return copy.deepcopy(obj)
    return copied
