"""The controller's projection: per ComputeDomain, what the event log says about it and the objects it owns.

`DomainProjection` is a pure fold (cdctl.projections contract) of the events of streams `domain/<uid>`: one
row per domain holding its ComputeDomain as last observed, every object labelled for it, and the last action
error. Its rows live in memory only (the `domain_history` projection is the queryable record): the journal
(cdctl.controller.journal) folds each batch the store wrote, in log order per object, and folds the whole
log again on start. `DomainView` turns rows into typed `DomainState`s for the reconcilers, which read it
(never the API) to decide; a fold replaces rows and never edits them, so a state read once stays consistent.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from cdctl.domain.computedomains import (
    ComputeDomainObserved,
    DaemonEntry,
    DaemonPod,
    DomainObjectObserved,
)
from cdctl.domain.events import RecordedEvent
from cdctl.projections.base import Change, Key, Projection, Row, View

ObjectKey = tuple[str, str, str]  # kind, namespace, name
OBSERVATIONS = frozenset({"ComputeDomainObserved", "DomainObjectObserved"})
OUTCOMES = frozenset({"DomainActionSucceeded", "DomainActionFailed"})


def _object_key(data: Mapping[str, Any]) -> str:
    return f"{data.get('kind', '')}/{data.get('namespace', '')}/{data.get('name', '')}"


class DomainProjection(Projection):
    name = "controller_domains"
    table = "controller_domains"  # never written: every change is retained in memory, not persisted
    columns = ("uid",)
    key_columns = ("uid",)
    handles = OBSERVATIONS | OUTCOMES
    stream_prefix = "domain/"

    def fold(self, view: View, event: RecordedEvent) -> list[Change]:
        uid = event.stream[len("domain/") :]
        current = view.get((uid,))
        if current is None and event.type in OUTCOMES:
            return []
        row: Row = dict(current) if current is not None else {"cd": None, "objects": {}, "last_error": ""}
        data = event.data
        if event.type == "ComputeDomainObserved":
            row["cd"] = None if data.get("change") == "DELETED" else dict(data)
        elif event.type == "DomainObjectObserved":
            objects = dict(row["objects"])
            key = _object_key(data)
            if data.get("change") != "DELETED":
                objects[key] = dict(data)
            elif objects.get(key, {}).get("uid") == data.get("uid"):
                del objects[key]
            row["objects"] = objects
        elif event.type == "DomainActionFailed":
            row["last_error"] = f"{data.get('action')} {data.get('kind')}: {data.get('error')}"
        else:
            row["last_error"] = ""
        if row["cd"] is None and not row["objects"]:
            return [Change((uid,), None, persist=False)]
        return [Change((uid,), row, persist=False)]


_FIELDS: dict[type[Any], frozenset[str]] = {}


def _typed(cls: type[Any], data: Mapping[str, Any]) -> Any:
    names = _FIELDS.get(cls)
    if names is None:
        names = _FIELDS[cls] = frozenset(f.name for f in dataclasses.fields(cls))
    return cls(**{k: v for k, v in data.items() if k in names})


@dataclass
class DomainState:
    """One domain as the view holds it at the moment it was read (a snapshot: read again after a write)."""

    uid: str
    cd: ComputeDomainObserved | None = None
    objects: dict[ObjectKey, DomainObjectObserved] = field(default_factory=dict)
    last_error: str = ""

    @staticmethod
    def from_row(uid: str, row: Row | None) -> DomainState:
        if row is None:
            return DomainState(uid)
        objects: dict[ObjectKey, DomainObjectObserved] = {}
        for data in row["objects"].values():
            obj: DomainObjectObserved = _typed(DomainObjectObserved, data)
            objects[(obj.kind, obj.namespace, obj.name)] = obj
        cd = _typed(ComputeDomainObserved, row["cd"]) if row["cd"] is not None else None
        return DomainState(uid, cd, objects, str(row.get("last_error", "")))

    def of_kind(self, kind: str) -> list[DomainObjectObserved]:
        return [obj for key, obj in sorted(self.objects.items()) if key[0] == kind]

    def get(self, kind: str, namespace: str, name: str) -> DomainObjectObserved | None:
        return self.objects.get((kind, namespace, name))

    @property
    def empty(self) -> bool:
        return self.cd is None and not self.objects

    def daemon_pods(self) -> list[tuple[str, DaemonPod]]:
        """(namespace, pod) of every daemon pod that is not being deleted."""
        pods = []
        for obj in self.of_kind("Pod"):
            s = obj.summary
            if s.get("deleting"):
                continue
            clique = s.get("clique")
            pod = DaemonPod(
                obj.name,
                str(s.get("node", "")),
                str(s.get("ip", "")),
                None if clique is None else str(clique),
                bool(s.get("ready")),
            )
            pods.append((obj.namespace, pod))
        return pods

    def clique_entries(self, obj: DomainObjectObserved) -> list[DaemonEntry]:
        return [DaemonEntry.from_clique_json(d) for d in obj.summary.get("daemons", [])]


class DomainView:
    """Typed reads over the projection's rows (the runner's live view)."""

    def __init__(self, rows: Callable[[], Mapping[Key, Row]]) -> None:
        self._rows = rows
        self._states: dict[str, tuple[Row, DomainState]] = {}  # a fold replaces a row, never edits it

    @property
    def rows(self) -> Mapping[Key, Row]:
        return self._rows()

    def domain(self, uid: str) -> DomainState:
        row = self.rows.get((uid,))
        if row is None:
            self._states.pop(uid, None)
            return DomainState(uid)
        cached = self._states.get(uid)
        if cached is not None and cached[0] is row:
            return cached[1]
        state = DomainState.from_row(uid, row)
        self._states[uid] = (row, state)
        if len(self._states) > 2 * len(self.rows) + 64:  # drop the states of domains gone since
            self._states = {u: entry for u, entry in self._states.items() if (u,) in self.rows}
        return state

    def uids(self) -> list[str]:
        return [str(key[0]) for key in self.rows]

    def __iter__(self) -> Iterator[DomainState]:
        return iter([self.domain(str(key[0])) for key in list(self.rows)])
