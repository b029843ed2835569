"""What `cdctl explain` is given, resolved and read: the lines of a domain, a claim, a pod's claims or a node.

`load_explanations(events, subject)` takes computedomain/NAMESPACE/NAME, resourceclaim/NAMESPACE/NAME,
pod/NAMESPACE/NAME (the claims the kubelet made for the pod: their names begin with the pod's), node/NAME,
domain/<uid>, claim/<uid> or a bare uid (cdctl.projections.timeline resolves the names), reads through
`EventSource` (a log or a collected file) and explains (cdctl.projections.explain). It adds what the file
cannot tell: the compaction horizon of each log that was compacted (what lies before it is gone), and in a
collected file each source the subject needed that is missing (which node's plugin or daemon would have
told). Bad input is InvalidInput naming SUBJECT. Used by cdctl.cli.explain and cdctl.sim.rack.
"""

from __future__ import annotations

from cdctl.domain.errors import InvalidInput
from cdctl.projections.causes import History, clock
from cdctl.projections.explain import Explanation, explain_claim, explain_domain, explain_node
from cdctl.projections.formation import LABELS, formation_view
from cdctl.projections.timeline import EventSource, Line, parse_subject, resolve_uid, timeline

COMMAND = "cdctl explain"
# Which component's log tells each milestone: a note when a file has none of one and lacks that log (a file
# that has it lacks the milestone for another reason: host-managed IMEX and channel isolation have no
# per-domain daemons).
TOLD_BY = {
    "labelled": ("controller", "the controller's log"),
    "daemon-claim": ("kubelet-plugin", "the kubelet plugins' logs"),
    "daemon-started": ("daemon", "the IMEX daemons' logs"),
    "listed": ("controller", "the controller's log"),
    "ready": ("controller", "the controller's log"),
    "worker": ("kubelet-plugin", "the kubelet plugins' logs"),
}
# The component an event's actor names (cdctl.domain.events.Actor) -> the component of a collected source.
_ACTOR_COMPONENTS = {"cdctl-controller": "controller", "compute-domain-daemon": "daemon"}


async def load_explanations(events: EventSource, subject: str) -> list[Explanation]:
    head, _, rest = subject.partition("/")
    if head.lower() in ("pod", "pods", "po"):
        return await _pod(events, subject, rest)
    kind, parts = parse_subject(subject, COMMAND)
    if kind == "node":
        _, lines = await timeline(events, subject)
        if not lines:
            raise InvalidInput(COMMAND, "SUBJECT", f"no events of node {parts[0]} in {events.where}")
        out = explain_node(lines, parts[0], subject)
        out.notes += await _horizons(events)
        return [out]
    if kind in ("computedomain", "resourceclaim"):
        uid = await resolve_uid(events, subject, kind, parts[0], parts[1], COMMAND)
        is_claim = kind == "resourceclaim"
    elif kind == "stream" and head not in ("domain", "claim"):
        raise InvalidInput(
            COMMAND, "SUBJECT", f"{subject!r} is not domain/<uid>, claim/<uid> or KIND/NS/NAME"
        )
    else:
        uid = rest if kind == "stream" else subject
        is_claim = head == "claim" or bool(await events.lines("stream = ?", [f"claim/{uid}"]))
    return [await (_claim(events, subject, uid) if is_claim else _domain(events, subject, uid))]


async def _domain(events: EventSource, subject: str, uid: str) -> Explanation:
    lines = await events.lines(*events.naming(uid))
    if not lines:
        raise InvalidInput(COMMAND, "SUBJECT", f"no events of {subject!r} in {events.where}")
    view = formation_view(lines, uid, subject)
    out = explain_domain(view, History(await _with_failovers(events, lines)))
    if not view.origin_is_creation:
        out.notes.append(
            "the controller's observation of the domain is not in this file: times count from its"
            " first event here"
        )
    held = await _components(events)
    for key in view.missing:  # in milestone order
        component, log = TOLD_BY[key]
        if component not in held:
            out.notes.append(f"no node has '{LABELS[key]}' here: {log} would tell it")
    out.notes += await _horizons(events) + await _missing_sources(events, [r.name for r in view.nodes], uid)
    return out


async def _claim(events: EventSource, subject: str, uid: str) -> Explanation:
    own = await events.lines("stream = ?", [f"claim/{uid}"])
    started = [ln for ln in own if ln.event.type == "ClaimPrepareStarted"]
    if not started:
        horizons = await _horizons(events)
        if not (own and horizons):
            raise InvalidInput(COMMAND, "SUBJECT", f"no Prepare of claim {uid} in {events.where}")
        out = Explanation(subject, "resourceclaim")
        out.fact(f"claim {uid}: its Prepare lies before the compaction horizon; what this file still holds:")
        for line in own:
            out.fact(f"  {line.event.type} at {clock(line.event.recorded_at)}", line)
        out.notes += horizons
        return out
    domain = str(started[0].event.data.get("domain_uid") or "")
    lines = (await events.lines(*events.naming(domain)) if domain else []) or own
    out = explain_claim(lines, uid, subject, History(await _with_failovers(events, lines)))
    node = str(started[0].event.data.get("node") or "")
    out.notes += await _horizons(events) + await _missing_sources(events, [node] if node else [], domain)
    return out


async def _with_failovers(events: EventSource, lines: list[Line]) -> list[Line]:
    """The lines with the controller's failovers of their time span: a takeover stalls every domain, and its
    event names none."""
    if not lines:
        return lines
    first, last = lines[0].event.recorded_at.isoformat(), lines[-1].event.recorded_at.isoformat()
    failovers = await events.lines("type = 'LeadershipAcquired'", [], first, last)
    return sorted([*lines, *failovers], key=lambda ln: (ln.event.recorded_at, ln.source, ln.event.position))


async def _pod(events: EventSource, subject: str, rest: str) -> list[Explanation]:
    parts = rest.split("/")
    if len(parts) != 2 or not all(parts):
        raise InvalidInput(COMMAND, "SUBJECT", f"{subject!r} is not pod/NAMESPACE/NAME")
    namespace, pod = parts
    rows = await events.query(
        "SELECT DISTINCT substr(stream, 7) FROM events WHERE stream GLOB 'claim/*' AND type ="
        " 'ClaimPrepareStarted' AND json_valid(data) AND json_extract(data, '$.namespace') = ?"
        " AND substr(json_extract(data, '$.name'), 1, ?) = ?",
        [namespace, len(pod) + 1, f"{pod}-"],
    )
    if not rows:
        raise InvalidInput(
            COMMAND,
            "SUBJECT",
            f"no claim of pod {namespace}/{pod} was prepared in {events.where}"
            " (a pod's claims are named after it: <pod>-<claim>-<suffix>)",
        )
    return [await _claim(events, subject, str(row[0])) for row in rows]


async def _components(events: EventSource) -> set[str]:
    """The components whose logs the file holds: a collected file's sources, or the actors of one log."""
    if events.collected:
        return {str(row[0]) for row in await events.query("SELECT DISTINCT component FROM sources", [])}
    rows = await events.query(
        "SELECT DISTINCT json_extract(metadata, '$.actor.component') FROM events WHERE json_valid(metadata)",
        [],
    )
    return {_ACTOR_COMPONENTS.get(str(row[0]), str(row[0])) for row in rows if row[0]}


async def _horizons(events: EventSource) -> list[str]:
    """A note for each log in the file that was compacted: its first kept position and time."""
    source = "source" if events.collected else "''"
    rows = await events.query(
        f"SELECT {source}, MIN(position), MIN(recorded_at) FROM events GROUP BY {source}"
        " HAVING MIN(position) > 1",
        [],
    )
    out = []
    for name, position, recorded_at in rows:
        where = f"{name}'s log" if name else "this log"
        out.append(
            f"{where} was compacted: what happened before position {position} ({str(recorded_at)[:23]}) is"
            " gone, and with it any cause that lies there"
        )
    return out


async def _missing_sources(events: EventSource, nodes: list[str], domain_uid: str) -> list[str]:
    """In a collected file: the sources this subject needed that the file lacks, and what each would tell."""
    if not events.collected:
        return []
    rows = await events.query("SELECT name, component FROM sources", [])
    names = {str(r[0]) for r in rows}
    components = {str(r[1]) for r in rows}
    out = []
    if "controller" not in components:
        out.append("no controller source: it would have told the labels, clique entries and Ready daemons")
    # Per-domain daemons are the domain's when some node's daemon log of it is here (host-managed IMEX and
    # channel isolation have none; a file with none of them gets no note for each node).
    own_daemons = bool(domain_uid) and any(n.startswith("daemon/") and f"/{domain_uid}" in n for n in names)
    for node in nodes:
        if f"kubelet-plugin/{node}" not in names:
            out.append(f"no kubelet-plugin/{node} source: it would have told that node's prepares")
        daemon = f"daemon/{node}/{domain_uid}"
        if own_daemons and not any(n.startswith(daemon) for n in names):
            out.append(f"no {daemon} source: it would have told IMEX's starts and restarts on {node}")
    return out
