"""The controller's projection: per ComputeDomain, what the event log says about it and the objects it owns.

A pure fold of the events of streams `domain/<uid>` (cdctl.domain.computedomains): observations set or drop
entries, action outcomes update the per-domain error record. Reconcilers read it (never the API) to decide;
cdctl.controller.journal folds every event it records, and on start the whole log is replayed into it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from cdctl.domain.computedomains import (
    ComputeDomainObserved,
    DaemonEntry,
    DaemonPod,
    DomainActionFailed,
    DomainActionSucceeded,
    DomainObjectObserved,
)
from cdctl.domain.events import DomainEvent

ObjectKey = tuple[str, str, str]  # kind, namespace, name


@dataclass
class DomainState:
    uid: str
    cd: ComputeDomainObserved | None = None
    objects: dict[ObjectKey, DomainObjectObserved] = field(default_factory=dict)
    last_error: str = ""

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
            pods.append(
                (
                    obj.namespace,
                    DaemonPod(
                        obj.name,
                        str(s.get("node", "")),
                        str(s.get("ip", "")),
                        None if clique is None else str(clique),
                        bool(s.get("ready")),
                    ),
                )
            )
        return pods

    def clique_entries(self, obj: DomainObjectObserved) -> list[DaemonEntry]:
        return [DaemonEntry.from_clique_json(d) for d in obj.summary.get("daemons", [])]


class DomainView:
    def __init__(self) -> None:
        self._domains: dict[str, DomainState] = {}

    def domain(self, uid: str) -> DomainState:
        return self._domains.get(uid) or DomainState(uid)

    def uids(self) -> list[str]:
        return list(self._domains)

    def __iter__(self) -> Iterator[DomainState]:
        return iter(list(self._domains.values()))

    def apply(self, event: DomainEvent) -> str | None:
        """Fold one event; the uid of the domain it concerns (None for events this view ignores)."""
        if isinstance(event, ComputeDomainObserved):
            state = self._domains.setdefault(event.uid, DomainState(event.uid))
            state.cd = None if event.change == "DELETED" else event
            self._drop_if_empty(state)
            return event.uid
        if isinstance(event, DomainObjectObserved):
            state = self._domains.setdefault(event.domain_uid, DomainState(event.domain_uid))
            key = (event.kind, event.namespace, event.name)
            if event.change == "DELETED":
                current = state.objects.get(key)
                if current is not None and current.uid == event.uid:
                    del state.objects[key]
            else:
                state.objects[key] = event
            self._drop_if_empty(state)
            return event.domain_uid
        if isinstance(event, DomainActionFailed):
            if event.domain_uid in self._domains:
                self._domains[event.domain_uid].last_error = f"{event.action} {event.kind}: {event.error}"
            return None
        if isinstance(event, DomainActionSucceeded):
            if event.domain_uid in self._domains:
                self._domains[event.domain_uid].last_error = ""
            return None
        return None

    def _drop_if_empty(self, state: DomainState) -> None:
        if state.empty:
            self._domains.pop(state.uid, None)
