"""Event envelopes, the typed-event registry and upcasting. Pure: no I/O.

Components define their events as frozen dataclasses subclassing `DomainEvent` and decorated with
`@event_type("Name", version=N)`. The store persists a `NewEvent` (type, schema_version, JSON data, metadata)
and returns `RecordedEvent`s (the full envelope of docs/architecture.md section 2). Older stored schema
versions are upcast on read by pure functions registered with `@upcaster("Name", from_version)`; `decode()`
turns a recorded event into its typed form at the current version.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar, TypeVar

from cdctl.domain.errors import InvalidInput

JSONDict = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Actor:
    """Who recorded an event: the component and, where known, its pod and node."""

    component: str
    pod: str = ""
    node: str = ""

    def to_json(self) -> JSONDict:
        return {"component": self.component, "pod": self.pod, "node": self.node}


@dataclass(frozen=True, slots=True)
class ObservedVersion:
    """The (object uid, resourceVersion) a watch-derived event came from; the store records each once."""

    uid: str
    resource_version: str


class DomainEvent:
    """Base of typed events. Subclasses are frozen dataclasses registered with `@event_type`."""

    TYPE: ClassVar[str]
    SCHEMA_VERSION: ClassVar[int]

    def to_data(self) -> JSONDict:
        """The event's fields as JSON data: `dataclasses.asdict`, without its per-value recursion for the
        scalars most fields hold (it was a twentieth of the controller's CPU)."""
        names = _FIELD_NAMES.get(type(self))
        if names is None:
            names = _FIELD_NAMES[type(self)] = tuple(f.name for f in dataclasses.fields(self))  # type: ignore[arg-type]
        return {name: _plain(getattr(self, name)) for name in names}


_FIELD_NAMES: dict[type[DomainEvent], tuple[str, ...]] = {}
_SCALARS = (str, int, float, bool, type(None))


def _plain(value: Any) -> Any:
    """A deep copy of a field's value as `dataclasses.asdict` makes it (dataclasses become dicts)."""
    if isinstance(value, _SCALARS):
        return value
    if isinstance(value, dict):
        return {_plain(k): _plain(v) for k, v in value.items()}
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # a named tuple, rebuilt as asdict does
        return type(value)(*[_plain(v) for v in value])
    if isinstance(value, list | tuple):
        return type(value)(_plain(v) for v in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return copy.deepcopy(value)


_REGISTRY: dict[str, type[DomainEvent]] = {}
_UPCASTERS: dict[tuple[str, int], Callable[[JSONDict], JSONDict]] = {}

E = TypeVar("E", bound=type[DomainEvent])


def event_type(name: str, version: int = 1) -> Callable[[E], E]:
    """Register a frozen dataclass as the current schema `version` of event type `name`."""

    def register(cls: E) -> E:
        if not dataclasses.is_dataclass(cls) or not cls.__dataclass_params__.frozen:
            raise TypeError(f"event {name}: {cls.__name__} must be a frozen dataclass")
        existing = _REGISTRY.get(name)
        if existing is not None and existing.__qualname__ != cls.__qualname__:
            raise TypeError(
                f"event type {name!r} registered twice ({existing.__qualname__}, {cls.__qualname__})"
            )
        cls.TYPE = name
        cls.SCHEMA_VERSION = version
        _REGISTRY[name] = cls
        return cls

    return register


def upcaster(
    name: str, from_version: int
) -> Callable[[Callable[[JSONDict], JSONDict]], Callable[[JSONDict], JSONDict]]:
    """Register a pure function turning `name` data at `from_version` into `from_version + 1`."""

    def register(fn: Callable[[JSONDict], JSONDict]) -> Callable[[JSONDict], JSONDict]:
        _UPCASTERS[(name, from_version)] = fn
        return fn

    return register


def registered_types() -> Mapping[str, type[DomainEvent]]:
    return dict(_REGISTRY)


@dataclass(frozen=True, slots=True)
class NewEvent:
    """An event about to be appended; the store adds position, version, time and hash."""

    type: str
    data: JSONDict
    schema_version: int = 1
    metadata: JSONDict = field(default_factory=dict)
    observed: ObservedVersion | None = None

    @classmethod
    def of(
        cls,
        event: DomainEvent,
        *,
        actor: Actor | None = None,
        correlation_id: str | None = None,
        causation_id: str | None = None,
        observed: ObservedVersion | None = None,
    ) -> NewEvent:
        metadata: JSONDict = {}
        if actor is not None:
            metadata["actor"] = actor.to_json()
        if correlation_id:
            metadata["correlation_id"] = correlation_id
        if causation_id:
            metadata["causation_id"] = causation_id
        return cls(event.TYPE, event.to_data(), event.SCHEMA_VERSION, metadata, observed)


@dataclass(frozen=True, slots=True)
class RecordedEvent:
    """An event as stored: the full envelope."""

    position: int
    stream: str
    version: int
    type: str
    schema_version: int
    data: JSONDict
    metadata: JSONDict
    recorded_at: datetime
    hash: str
    data_json: str = field(default="", compare=False, repr=False)
    """The stored JSON text of `data` when read from a log (empty once upcasting changed the data)."""

    def to_json(self) -> JSONDict:
        return {
            "position": self.position,
            "stream": self.stream,
            "version": self.version,
            "type": self.type,
            "schema_version": self.schema_version,
            "data": self.data,
            "metadata": self.metadata,
            "recorded_at": self.recorded_at.isoformat(),
            "hash": self.hash,
        }


def upcast(event: RecordedEvent) -> RecordedEvent:
    """Bring a stored event's data to the current schema version of its type (unknown types pass through)."""
    cls = _REGISTRY.get(event.type)
    if cls is None or event.schema_version >= cls.SCHEMA_VERSION:
        return event
    data, version = event.data, event.schema_version
    while version < cls.SCHEMA_VERSION:
        step = _UPCASTERS.get((event.type, version))
        if step is None:
            raise InvalidInput(
                f"event {event.position}", "schema_version", f"no upcaster for {event.type} v{version}"
            )
        data, version = step(dict(data)), version + 1
    return dataclasses.replace(event, data=data, schema_version=version, data_json="")


def decode(event: RecordedEvent) -> DomainEvent:
    """The typed event for a recorded one, upcast to the current schema version."""
    current = upcast(event)
    cls = _REGISTRY.get(current.type)
    if cls is None:
        raise InvalidInput(f"event {event.position}", "type", f"unknown event type {event.type!r}")
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    try:
        return cls(**{k: v for k, v in current.data.items() if k in names})
    except TypeError as exc:
        raise InvalidInput(f"event {event.position}", "data", f"does not fit {current.type}: {exc}") from exc
