"""A real kube-apiserver v1.36.2's recorded answers to cdctl's own requests, in
tests/fixtures/real-apiserver-v1.36 (copied from the recording its README describes), for the tests that hold
our code and our simulated API server to what a real server sends: `exchanges()` in the order the server
received them, `response_of(seq)` one answer, `objects(resource)` every object a response carried, lists'
items included.
"""

from __future__ import annotations

import copy
import functools
import json
from pathlib import Path
from typing import Any

CORPUS = Path(__file__).parent / "fixtures" / "real-apiserver-v1.36" / "corpus.jsonl"


@functools.cache
def _exchanges() -> tuple[dict[str, Any], ...]:
    with CORPUS.open() as lines:
        return tuple(json.loads(line) for line in lines if line.strip())


def exchanges() -> list[dict[str, Any]]:
    """Every exchange, a deep copy (a test may change what it gets)."""
    return copy.deepcopy(list(_exchanges()))


def response_of(seq: int) -> dict[str, Any]:
    found = next(e for e in _exchanges() if e["seq"] == seq)
    return copy.deepcopy(found["response"])  # type: ignore[no-any-return]


def objects(resource: str) -> list[dict[str, Any]]:
    """Every object of `resource` (as the corpus names it: `resourceclaimtemplates`, ...) a response held."""
    found: list[dict[str, Any]] = []
    for exchange in _exchanges():
        response = exchange["response"]
        if exchange["resource"] != resource or not isinstance(response, dict):
            continue
        if response.get("kind", "").endswith("List"):
            found.extend(response.get("items") or [])
        elif response.get("kind") != "Status":
            found.append(response)
    return copy.deepcopy(found)
