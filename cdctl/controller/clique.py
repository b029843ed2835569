"""ComputeDomainCliques, kept by the controller alone: index assignment for every daemon, one write per batch.

`sync` groups the domain's daemon pods by (namespace, clique label), assigns indices with
cdctl.domain.computedomains.assign_clique (previous entries come from the observed clique objects, so indices
survive restarts), writes each clique whose entries changed (create, or an update guarded by
resourceVersion; the cliques of a domain side by side), records `CliqueIndexAssigned`/`CliqueEntryRemoved`,
and returns the entries `status.nodes` is made of. Daemons only read cliques. With the ComputeDomainCliques
gate off the same assignment is kept in `status.nodes` instead (the previous entries are read from there).
Called by cdctl.controller.computedomain.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

import structlog

from cdctl.controller.context import ReconcileContext
from cdctl.controller.observations import KIND_CLIQUE
from cdctl.controller.view import DomainState
from cdctl.domain.computedomains import (
    LABEL_CLIQUE_ID,
    LABEL_COMPUTE_DOMAIN,
    CliqueEntryRemoved,
    CliqueIndexAssigned,
    DaemonEntry,
    DaemonPod,
    assign_clique,
    clique_name,
    split_by_clique,
    status_nodes,
)
from cdctl.domain.events import DomainEvent
from cdctl.k8s.resources import COMPUTE_DOMAIN_CLIQUES

log = structlog.get_logger(__name__)
JsonObject = dict[str, Any]


def index_changes(
    uid: str, clique_id: str, old: list[DaemonEntry], new: tuple[DaemonEntry, ...]
) -> list[DomainEvent]:
    before = {e.node_name: e.index for e in old}
    after = {e.node_name: e.index for e in new}
    events: list[DomainEvent] = []
    for node, index in sorted(before.items()):
        if after.get(node) != index:
            events.append(CliqueEntryRemoved(uid, clique_id, node, index))
    for node, index in sorted(after.items()):
        if before.get(node) != index:
            events.append(CliqueIndexAssigned(uid, clique_id, node, index))
    return events


class Cliques:
    def __init__(self, ctx: ReconcileContext) -> None:
        self.ctx = ctx

    async def sync(self, state: DomainState, cd: JsonObject) -> list[DaemonEntry]:
        """Bring the cliques up to date; the resulting `status.nodes` entries."""
        pods = state.daemon_pods()
        split = split_by_clique(pod for _, pod in pods)
        namespace_of = {pod.name: namespace for namespace, pod in pods}
        groups: dict[tuple[str, str], list[DaemonPod]] = {}
        for clique_id, members in split.fabric.items():
            for pod in members:
                groups.setdefault((namespace_of[pod.name], clique_id), []).append(pod)
        if self.ctx.settings.controller_keeps_cliques:
            entries = await self._sync_objects(state, cd, groups)
        else:
            entries = await self._assign_in_status(state, groups)
        return status_nodes(entries, split.non_fabric)

    async def _sync_objects(
        self, state: DomainState, cd: JsonObject, groups: dict[tuple[str, str], list[DaemonPod]]
    ) -> list[DaemonEntry]:
        existing = {(c.namespace, str(c.summary.get("clique", ""))): c for c in state.of_kind(KIND_CLIQUE)}
        entries: list[DaemonEntry] = []
        writes: list[Coroutine[Any, Any, None]] = []
        for namespace, clique_id in sorted(set(groups) | set(existing)):
            current = existing.get((namespace, clique_id))
            old = state.clique_entries(current) if current is not None else []
            assignment = assign_clique(
                clique_id,
                old,
                groups.get((namespace, clique_id), []),
                self.ctx.settings.max_nodes_per_imex_domain,
            )
            entries.extend(assignment.entries)
            await self._report_unplaced(cd, clique_id, assignment.unplaced)
            if current is not None and tuple(old) == assignment.entries:
                continue
            if current is None and not assignment.entries:
                continue
            changes = index_changes(state.uid, clique_id, old, assignment.entries)
            writes.append(
                self._write_and_record(state.uid, namespace, clique_id, assignment.entries, changes)
            )
        # The cliques are separate objects: written side by side, a domain over 8 racks waits for one round
        # trip instead of eight (they were most of a reconcile's time while a big domain formed).
        await asyncio.gather(*writes)
        return entries

    async def _write_and_record(
        self,
        uid: str,
        namespace: str,
        clique_id: str,
        entries: tuple[DaemonEntry, ...],
        changes: list[DomainEvent],
    ) -> None:
        await self._write(uid, namespace, clique_id, entries)
        if changes:
            await self.ctx.journal.record(uid, changes)

    async def _write(
        self, uid: str, namespace: str, clique_id: str, entries: tuple[DaemonEntry, ...]
    ) -> None:
        await self.put(uid, namespace, clique_id, {"daemons": [e.to_clique_json() for e in entries]})

    async def put(self, uid: str, namespace: str, clique_id: str, fields: JsonObject) -> None:
        """Create the (domain, clique) object with `fields`, or set them on the one that exists."""
        name = clique_name(uid, clique_id)
        cached = self.ctx.journal.cached(COMPUTE_DOMAIN_CLIQUES, namespace, name)
        if cached is not None:
            await self.ctx.actions.replace(uid, "update-clique", COMPUTE_DOMAIN_CLIQUES, {**cached, **fields})
            return
        body = {
            "apiVersion": COMPUTE_DOMAIN_CLIQUES.api_version,
            "kind": COMPUTE_DOMAIN_CLIQUES.kind,
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": {LABEL_COMPUTE_DOMAIN: uid, LABEL_CLIQUE_ID: clique_id},
            },
            "daemons": [],
            **fields,
        }
        if await self.ctx.actions.create(uid, COMPUTE_DOMAIN_CLIQUES, body) is None:
            current = await self.ctx.actions.get(COMPUTE_DOMAIN_CLIQUES, namespace, name)
            if current is not None:
                await self.ctx.actions.replace(
                    uid, "update-clique", COMPUTE_DOMAIN_CLIQUES, {**current, **fields}
                )

    async def _assign_in_status(
        self, state: DomainState, groups: dict[tuple[str, str], list[DaemonPod]]
    ) -> list[DaemonEntry]:
        previous = [
            DaemonEntry.from_status_json(n)
            for n in ((state.cd.status if state.cd else {}).get("nodes") or [])
            if n.get("cliqueID")
        ]
        entries: list[DaemonEntry] = []
        for (_, clique_id), members in sorted(groups.items()):
            old = [e for e in previous if e.clique_id == clique_id]
            assignment = assign_clique(clique_id, old, members, self.ctx.settings.max_nodes_per_imex_domain)
            entries.extend(assignment.entries)
            changes = index_changes(state.uid, clique_id, old, assignment.entries)
            if changes:
                await self.ctx.journal.record(state.uid, changes)
        return entries

    async def _report_unplaced(self, cd: JsonObject, clique_id: str, unplaced: tuple[str, ...]) -> None:
        if not unplaced:
            return
        limit = self.ctx.settings.max_nodes_per_imex_domain
        message = (
            f"clique {clique_id}: no available indices within maxNodesPerIMEXDomain ({limit}) for daemons on "
            f"{', '.join(unplaced)}"
        )
        log.warning("clique full", clique=clique_id, unplaced=list(unplaced), limit=limit)
        await self.ctx.actions.warn(str(cd["metadata"]["uid"]), cd, "CliqueFull", message)

    async def delete_all(self, state: DomainState) -> None:
        for clique in state.of_kind(KIND_CLIQUE):
            await self.ctx.actions.delete(state.uid, COMPUTE_DOMAIN_CLIQUES, clique.namespace, clique.name)
