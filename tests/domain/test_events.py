"""Typed events to JSON data: the same dict as dataclasses.asdict, sharing no container with the event."""

from __future__ import annotations

import dataclasses
from collections import namedtuple
from dataclasses import dataclass, field
from typing import Any

from cdctl.domain.computedomains import ComputeDomainObserved, DomainObjectObserved
from cdctl.domain.events import DomainEvent

Point = namedtuple("Point", "x y")


@dataclass(frozen=True)
class Inner:
    name: str
    tags: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Mixed(DomainEvent):  # not registered: to_data alone is under test
    text: str
    count: int
    ratio: float
    flag: bool
    nothing: None
    nested: dict[str, Any]
    items: list[Any]
    pair: tuple[int, str]
    point: Any
    inner: Inner


def test_to_data_is_asdict_and_copies_every_container() -> None:
    nested = {"a": [1, {"b": 2}], "c": None}
    items = [{"x": 1}, [2, 3]]
    inner = Inner("i", ["t"])
    event = Mixed("t", 1, 0.5, True, None, nested, items, (1, "a"), Point(1, 2), inner)
    data = event.to_data()
    assert data == dataclasses.asdict(event)
    assert (
        type(data["pair"]) is tuple
        and type(data["point"]) is Point
        and data["inner"] == {"name": "i", "tags": ["t"]}
    )
    assert data["nested"] is not nested and data["nested"]["a"] is not nested["a"]
    assert data["items"][0] is not items[0]


def test_the_controllers_events_match_asdict() -> None:
    observed = ComputeDomainObserved(
        uid="u", namespace="n", name="cd", resource_version="7", change="MODIFIED", num_nodes=2,
        finalizers=["f"], status={"status": "Ready", "nodes": [{"name": "a", "index": 0}]},
    )  # fmt: skip
    summary = {"finalizers": ["f"], "deleting": False, "daemons": [{"index": 0}]}
    obj = DomainObjectObserved("u", "ComputeDomainClique", "drv", "c", "cu", "3", "ADDED", summary)
    for event in (observed, obj):
        assert event.to_data() == dataclasses.asdict(event)
