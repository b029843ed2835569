"""What `cdctl timeline` is given, resolved and read: the view of a domain, or of a claim's node in it.

`load_view(events, subject)` takes computedomain/NAMESPACE/NAME or resourceclaim/NAMESPACE/NAME (resolved as
`cdctl history` does: cdctl.projections.timeline), domain/<uid>, claim/<uid> or a bare uid; reads every
stream that names the domain's uid through `EventSource` (a log or a collected file) and folds it
(cdctl.projections.formation). A claim's view is its domain's, narrowed to the node(s) that prepared it. Bad
input is InvalidInput naming SUBJECT. Used by cdctl.cli.timeline and cdctl.sim.rack.timelines.
"""

from __future__ import annotations

from cdctl.domain.errors import InvalidInput
from cdctl.projections.formation import COMMAND, FormationView, formation_view, narrow, node_of
from cdctl.projections.timeline import EventSource, parse_subject, resolve_uid


async def load_view(events: EventSource, subject: str) -> FormationView:
    """Resolve `subject` to a domain (and for a claim, its node) and build the view."""
    kind, parts = parse_subject(subject, COMMAND)
    if kind == "node":
        raise InvalidInput(
            COMMAND, "SUBJECT",
            f"{subject!r}: a timeline is of a computedomain or a resourceclaim (a node's: cdctl history)",
        )  # fmt: skip
    claim = ""
    if kind in ("computedomain", "resourceclaim"):
        uid = await resolve_uid(events, subject, kind, parts[0], parts[1], COMMAND)
        claim = uid if kind == "resourceclaim" else ""
        domain = "" if claim else uid
    else:
        head, _, rest = subject.partition("/")
        if kind == "stream" and head not in ("domain", "claim"):
            raise InvalidInput(COMMAND, "SUBJECT", f"{subject!r} is not domain/<uid> or claim/<uid>")
        uid = rest if kind == "stream" else subject
        claim_lines = await events.lines("stream = ?", [f"claim/{uid}"])
        claim = uid if head == "claim" or claim_lines else ""
        domain = "" if claim else uid
    nodes: set[str] = set()
    if claim:
        started = [ln for ln in await events.lines("stream = ?", [f"claim/{claim}"])
                   if ln.event.type == "ClaimPrepareStarted"]  # fmt: skip
        if not started:
            raise InvalidInput(COMMAND, "SUBJECT", f"no Prepare of claim {claim} in {events.where}")
        domain = str(started[0].event.data.get("domain_uid") or "")
        nodes = {node_of(ln) for ln in started}
        if not domain:
            raise InvalidInput(COMMAND, "SUBJECT", f"claim {claim} names no ComputeDomain in {events.where}")
    lines = await events.lines(*events.naming(domain))
    if not lines:
        raise InvalidInput(COMMAND, "SUBJECT", f"no events of {subject!r} in {events.where}")
    view = formation_view(lines, domain, subject)
    if nodes:
        narrow(view, nodes)
    if not view.nodes:
        raise InvalidInput(
            COMMAND, "SUBJECT", f"{subject!r}: no node of it has a milestone in {events.where}"
        )
    return view
