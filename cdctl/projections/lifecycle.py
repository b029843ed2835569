"""The lifecycle read models behind `cdctl sql`: claim_lifecycle, channel_allocations,
checkpoint_transitions and domain_history (docs/architecture.md section 2).

Pure folds over the claim events of cdctl.domain.claims and every event of `domain/<uid>` streams. Used by
the projection runner (live, persisted), `cdctl replay` and `cdctl verify` (in memory).
"""

from __future__ import annotations

from cdctl.domain import hashchain
from cdctl.domain.claims import (
    TARGET_STATE,
    ChannelAllocated,
    ChannelReleased,
    ClaimInvalidated,
    ClaimPrepareCompleted,
    ClaimPrepareFailed,
    ClaimPrepareFenced,
    ClaimPrepareRepaired,
    ClaimPrepareStarted,
    ClaimState,
    ClaimUnprepared,
)
from cdctl.domain.events import RecordedEvent
from cdctl.projections.base import Change, Projection, Row, View
from cdctl.store.sealing import format_time

_OUTCOME = {
    ClaimPrepareStarted.TYPE: "pending",
    ClaimPrepareCompleted.TYPE: "prepared",
    ClaimPrepareFailed.TYPE: "failed",
    ClaimUnprepared.TYPE: "unprepared",
    ClaimInvalidated.TYPE: "invalidated",
    ClaimPrepareFenced.TYPE: "fenced",
}


def _claim_uid(event: RecordedEvent) -> str | None:
    uid = event.data.get("claim_uid")
    return str(uid) if uid else None


class ClaimLifecycle(Projection):
    """One row per claim: who, where, when requested/prepared/unprepared, how it ended, the last error."""

    name = table = "claim_lifecycle"
    columns = (
        "claim_uid", "namespace", "name", "domain_uid", "node", "kind", "state",
        "requested_at", "prepared_at", "unprepared_at", "outcome", "last_error", "position",
    )  # fmt: skip
    key_columns = ("claim_uid",)
    handles = frozenset(_OUTCOME)

    def fold(self, view: View, event: RecordedEvent) -> list[Change]:
        uid = _claim_uid(event)
        if uid is None or event.type not in _OUTCOME:
            return []
        at = format_time(event.recorded_at)
        old = view.get((uid,))
        data = event.data
        if old is None and event.type != ClaimPrepareStarted.TYPE:
            # Not live here (never prepared, or already unprepared and out of the view). Only a fenced
            # prepare says something new about it: it lands on the history row, if there is one.
            if event.type != ClaimPrepareFenced.TYPE:
                return []
            fenced = {
                "outcome": "fenced",
                "last_error": str(data.get("reason", "")),
                "position": event.position,
            }
            return [Change((uid,), fenced, retain=False, partial=True)]
        row: Row = dict(old) if old else {c: "" for c in self.columns} | {"claim_uid": uid}
        row.update(position=event.position, outcome=_OUTCOME[event.type])
        row["state"] = TARGET_STATE.get(event.type, row["state"] or "") or row["state"]
        if event.type == ClaimPrepareStarted.TYPE:
            for field in ("namespace", "name", "domain_uid", "node", "kind"):
                row[field] = data.get(field, row[field]) or row[field]
            if not old or old["state"] == "Invalidated":
                row.update(requested_at=at, prepared_at=None, unprepared_at=None, last_error="")
        elif event.type == ClaimPrepareCompleted.TYPE:
            row.update(prepared_at=at, last_error="")
        elif event.type == ClaimUnprepared.TYPE:
            row["unprepared_at"] = at
        elif event.type in (ClaimPrepareFailed.TYPE, ClaimInvalidated.TYPE, ClaimPrepareFenced.TYPE):
            row["last_error"] = str(data.get("reason", ""))
        for time_field in ("requested_at", "prepared_at", "unprepared_at"):
            row[time_field] = row[time_field] or None
        # The live view holds claims that still hold something on the node; history stays in the table.
        return [Change((uid,), row, retain=row["state"] != "Unprepared")]


class ChannelAllocations(Projection):
    """Every channel ever allocated on a node, to which claim, and when it was released.

    The live view holds open allocations (and an index of them per claim); released ones live in the table.
    """

    name = table = "channel_allocations"
    columns = (
        "node",
        "channel",
        "claim_uid",
        "domain_uid",
        "allocated_at",
        "released_at",
        "position",
        "count",
    )
    key_columns = ("node", "channel", "claim_uid")
    handles = frozenset(
        {ChannelAllocated.TYPE, ChannelReleased.TYPE, ClaimUnprepared.TYPE, ClaimInvalidated.TYPE}
    )

    def fold(self, view: View, event: RecordedEvent) -> list[Change]:
        data, at = event.data, format_time(event.recorded_at)
        if event.type == ChannelAllocated.TYPE:
            key = (str(data["node"]), int(data["channel"]), str(data["claim_uid"]))
            if key in view and view[key]["released_at"] is None:
                return []  # a repeated allocation after a crash: still the same one
            row = dict(zip(self.key_columns, key, strict=True))
            row.update(domain_uid=str(data.get("domain_uid", "")), allocated_at=at, released_at=None)
            row.update(position=event.position, count=int(data.get("count", 1)))
            index = view.get(("open", key[2]), {"keys": []})
            return [
                Change(key, row),
                Change(("open", key[2]), {"keys": [*index["keys"], list(key)]}, persist=False),
            ]
        if event.type == ChannelReleased.TYPE:
            keys = [[str(data["node"]), int(data["channel"]), str(data["claim_uid"])]]
        elif event.type in (ClaimUnprepared.TYPE, ClaimInvalidated.TYPE):
            keys = list(view.get(("open", str(data.get("claim_uid", ""))), {"keys": []})["keys"])
        else:
            return []
        changes = []
        for key_list in keys:
            open_key = tuple(key_list)
            open_row = view.get(open_key)
            if open_row is not None and open_row["released_at"] is None:
                released = {**open_row, "released_at": at, "position": event.position}
                changes.append(Change(open_key, released, retain=False))  # history: the table keeps it
        if keys:
            uid = str(keys[0][2])
            remaining = [k for k in view.get(("open", uid), {"keys": []})["keys"] if k not in keys]
            changes.append(Change(("open", uid), {"keys": remaining} if remaining else None, persist=False))
        return changes


def _repair_reason(data: dict[str, object]) -> str:
    repaired = data.get("repaired")
    what = ", ".join(str(r) for r in repaired) if isinstance(repaired, list) else ""
    found = str(data.get("reason") or "")
    return f"repaired {what or 'what the first Prepare wrote'}" + (f": {found}" if found else "")


class CheckpointTransitions(Projection):
    """Every state change of every claim, in log order: the audit trail that replaces checkpoint.json.

    `from_state` is empty when the claim held nothing before: new here, or unprepared earlier. A repair of a
    completed claim (ClaimPrepareRepaired: its CDI spec or domain directory written again) is a row too,
    PrepareCompleted to PrepareCompleted, whose reason says what was rewritten and why: the checkpoint held,
    but what it stood for on the node did not.
    """

    name = table = "checkpoint_transitions"
    columns = ("position", "claim_uid", "from_state", "to_state", "at", "reason")
    key_columns = ("position",)
    handles = frozenset({*TARGET_STATE, ClaimPrepareRepaired.TYPE})

    def fold(self, view: View, event: RecordedEvent) -> list[Change]:
        uid = _claim_uid(event)
        if uid is None:
            return []
        # An unprepared claim leaves the view, so its next transition starts from "" (holds nothing).
        last = view.get(("last", uid), {"state": ""})["state"]
        if event.type == ClaimPrepareRepaired.TYPE:  # only a completed claim is repaired
            state = last or str(ClaimState.PREPARE_COMPLETED)
            repair = {
                "position": event.position, "claim_uid": uid, "from_state": state, "to_state": state,
                "at": format_time(event.recorded_at), "reason": _repair_reason(event.data),
            }  # fmt: skip
            return [Change((event.position,), repair, retain=False)]
        target = TARGET_STATE.get(event.type)
        if target is None:
            return []
        row = {
            "position": event.position, "claim_uid": uid, "from_state": last, "to_state": str(target),
            "at": format_time(event.recorded_at), "reason": str(event.data.get("reason", "")),
        }  # fmt: skip
        live = None if target == "Unprepared" else {"state": str(target)}
        return [
            Change((event.position,), row, retain=False),
            Change(("last", uid), live, persist=False),
        ]


class DomainHistory(Projection):
    """Every event of every ComputeDomain stream: what the controller saw and did, in order."""

    name = table = "domain_history"
    columns = ("position", "domain_uid", "namespace", "name", "type", "at", "detail")
    key_columns = ("position",)
    stream_prefix = "domain/"

    def fold(self, view: View, event: RecordedEvent) -> list[Change]:
        stream = event.stream
        if not stream.startswith("domain/"):
            return []
        data = event.data
        row = {
            "position": event.position, "domain_uid": stream[7:],
            "namespace": data.get("namespace") or "", "name": data.get("name") or "",
            "type": event.type, "at": format_time(event.recorded_at),
            "detail": event.data_json or hashchain.dumps(data),
        }  # fmt: skip
        return [Change((event.position,), row, True, False)]


def lifecycle_projections() -> list[Projection]:
    """The read models every cdctl event log carries (the tables of migration 0004)."""
    return [ClaimLifecycle(), ChannelAllocations(), CheckpointTransitions(), DomainHistory()]
