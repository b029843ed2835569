"""A ComputeDomain's formation and teardown, node by node, from the events that tell it.

`formation_view(lines, domain_uid, subject)` folds a domain's timeline (cdctl.projections.timeline: the
controller's decisions, the plugins' prepares, the daemons' starts; one log or a collected file) into one
row per node: the formation milestones (node labelled, daemon claim prepared, daemon started, listed in its
clique, daemon pod Ready, worker claim prepared), the teardown (worker unprepared, unlisted, daemon stopped,
daemon claim unprepared, label removed), and the retries and failures on the way, each mark with the event
behind it. A `domain` row holds what concerns the domain as a whole (observed, Ready, deletion, torn
down, the controller's failed actions). The summary: formation time (first seen by the controller ->
the last node's worker prepared), the slowest node and why (its longest step, and its step furthest above
the other nodes' median). A milestone a file does not hold (a plugin's own log has no controller events) is
absent, and `missing` says which. Pure fold; cdctl.projections.formationload reads the lines and
`narrow`s a claim's view to its node. Drawn by cdctl.projections.formationpage.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from cdctl.projections.evidence import Evidence
from cdctl.projections.timeline import Line

COMMAND = "cdctl timeline"
DOMAIN_ROW = "domain"
# Formation milestones, in the order a node reaches them (docs/formation.md, the critical path).
MILESTONES: tuple[tuple[str, str], ...] = (
    ("labelled", "node labelled"),
    ("daemon-claim", "daemon claim prepared"),
    ("daemon-started", "daemon started"),
    ("listed", "listed in its clique"),
    ("ready", "daemon Ready"),
    ("worker", "worker prepared"),
)
TEARDOWN: tuple[tuple[str, str], ...] = (
    ("worker-unprepared", "worker unprepared"),
    ("unlisted", "left its clique"),
    ("daemon-stopped", "daemon stopped"),
    ("daemon-claim-unprepared", "daemon claim unprepared"),
    ("unlabelled", "label removed"),
)
LABELS = dict(MILESTONES) | dict(TEARDOWN)
PHASES = ("formation", "teardown", "retry", "failure", "domain")
HOVER_DATA = 600


@dataclass(frozen=True, slots=True)
class Mark:
    """One mark on a row: what happened (`key`, `label`), when (`offset_s` after the view's origin), what
    kind of mark (`phase`: formation, teardown, retry, failure, domain) and the event behind it."""

    row: str
    key: str
    label: str
    phase: str
    offset_s: float
    at: datetime
    event: str  # the event, as the hover shows it
    detail: str = ""
    evidence: Evidence | None = None  # the event behind the mark, for citing (cdctl explain)


@dataclass
class Row:
    name: str
    marks: list[Mark] = field(default_factory=list)

    def first(self, key: str) -> Mark | None:
        return next((m for m in self.marks if m.key == key), None)

    @property
    def retries(self) -> list[Mark]:
        return [m for m in self.marks if m.phase == "retry"]

    @property
    def failures(self) -> list[Mark]:
        return [m for m in self.marks if m.phase == "failure"]


@dataclass
class FormationView:
    subject: str
    domain_uid: str
    domain_name: str  # NAMESPACE/NAME when the file says it
    origin: datetime | None  # the domain first seen by the controller (else the first event)
    origin_is_creation: bool
    domain: Row
    nodes: list[Row]
    expected_nodes: int  # the domain's numNodes (0: not in the file, or elastic)
    formation_s: float | None
    slowest: str  # the node whose worker came last
    why: str  # why it was the slowest
    teardown_s: float | None  # deletion seen -> torn down
    missing: list[str]  # milestones no node has in this file
    events: int = 0

    @property
    def end_s(self) -> float:
        marks = [m.offset_s for row in [self.domain, *self.nodes] for m in row.marks]
        return max(marks, default=0.0)

    @property
    def start_s(self) -> float:
        marks = [m.offset_s for row in [self.domain, *self.nodes] for m in row.marks]
        return min([0.0, *marks])

    def summary_lines(self) -> list[str]:
        """The summary the page shows on top, and `cdctl timeline` prints."""
        out = [f"ComputeDomain {self.domain_name or self.domain_uid} (uid {self.domain_uid})"]
        count = f"{len(self.nodes)} node{'s' * (len(self.nodes) != 1)}"
        if self.expected_nodes and self.expected_nodes != len(self.nodes):
            count += f" of the {self.expected_nodes} it asks for"
        origin = "first seen by the controller" if self.origin_is_creation else "the first event in this file"
        if "worker" in self.missing:
            out.append("formation: not in this file, which holds no worker Prepare (the plugins' logs, or a"
                       " collected file, have them)")  # fmt: skip
        elif self.formation_s is not None:
            out.append(
                f"formation: {self.formation_s:.2f} s ({origin} -> the last of {count}: worker prepared)"
            )
        else:
            waiting = [r.name for r in self.nodes if r.first("worker") is None]
            out.append(f"not formed in this file: {len(waiting)} of {count} without a prepared worker")
        if self.slowest:
            said = "slowest node" if self.formation_s is not None else "the node furthest behind"
            out.append(f"{said}: {self.slowest}: {self.why}")
        retries = sum(len(r.retries) for r in [self.domain, *self.nodes])
        failures = sum(len(r.failures) for r in [self.domain, *self.nodes])
        out.append(f"retries: {retries}, failures: {failures}")
        if self.teardown_s is not None:
            out.append(f"teardown: {self.teardown_s:.2f} s (deletion seen -> torn down)")
        if self.missing:
            out.append(f"not in this file: {', '.join(LABELS[k] for k in self.missing)}")
        return out


def _text(line: Line) -> str:
    event = line.event
    data = json.dumps(event.data, sort_keys=True, separators=(", ", ": "))
    if len(data) > HOVER_DATA:
        data = data[: HOVER_DATA - 1] + "…"
    where = f"{line.source} " if line.source else ""
    return (
        f"{event.type} at {event.recorded_at.isoformat(timespec='milliseconds')}\n"
        f"{where}{event.stream} v{event.version}, position {event.position}\n{data}"
    )


def node_of(line: Line) -> str:
    """The node an event is about. In a collected file a plugin's or daemon's event is its source's node
    (the collector took it from the pod's node, not from what the log says: a compromised daemon cannot
    put marks on another node's row); elsewhere what the event names, then its actor's node."""
    component, _, rest = line.source.partition("/")
    if component in ("kubelet-plugin", "daemon") and rest:
        return rest.split("/")[0].split("#")[0]
    data, metadata = line.event.data, line.event.metadata
    for value in (data.get("node"), data.get("node_name")):
        if isinstance(value, str) and value:
            return value
    actor = metadata.get("actor") if isinstance(metadata, dict) else None
    node = actor.get("node") if isinstance(actor, dict) else ""
    return node if isinstance(node, str) else ""


class _Fold:
    """Marks per node from a domain's lines, in time order."""

    def __init__(self, domain_uid: str) -> None:
        self.uid = domain_uid
        # (source, claim uid) -> channel | daemon, and its node: one source's events never relabel another's
        self.claim_kinds: dict[tuple[str, str], str] = {}
        self.claim_nodes: dict[tuple[str, str], str] = {}
        self.rows: dict[str, Row] = {}
        self.domain = Row(DOMAIN_ROW)
        self.name = ""
        self.expected = 0
        self.created: datetime | None = None
        self.deleting: datetime | None = None
        self.torn_down: datetime | None = None
        self.ready_seen: set[str] = set()  # nodes whose daemon was Ready (a later NotReady is a failure)
        self.pending: list[tuple[str, str, str, str, Line, str]] = []

    def mark(self, row: str, key: str, phase: str, line: Line, label: str = "", detail: str = "") -> None:
        self.pending.append((row, key, phase, label or LABELS.get(key, key), line, detail))

    def feed(self, line: Line) -> None:
        event, data = line.event, line.event.data
        handler = getattr(self, f"_on_{event.type}", None)
        if handler is not None:
            handler(line, data)

    # ---- the controller ----------------------------------------------------------------------------------
    def _on_ComputeDomainObserved(self, line: Line, data: dict[str, Any]) -> None:
        if data.get("uid") != self.uid:
            return
        self.name = f"{data.get('namespace', '')}/{data.get('name', '')}"
        self.expected = int(data.get("num_nodes") or 0)
        if self.created is None:
            self.created = line.event.recorded_at
            self.mark(DOMAIN_ROW, "observed", "domain", line, "domain observed")
        if data.get("deleting") and self.deleting is None:
            self.deleting = line.event.recorded_at
            self.mark(DOMAIN_ROW, "deleting", "domain", line, "deletion seen")

    def _on_ComputeDomainStatusChanged(self, line: Line, data: dict[str, Any]) -> None:
        label = f"domain {data.get('status')} ({data.get('ready_nodes')}/{data.get('nodes')} nodes Ready)"
        if data.get("status") == "Ready":
            self.mark(DOMAIN_ROW, "domain-ready", "domain", line, label)

    def _on_ComputeDomainTornDown(self, line: Line, data: dict[str, Any]) -> None:
        self.torn_down = line.event.recorded_at
        self.mark(DOMAIN_ROW, "torn-down", "domain", line, "torn down")

    def _on_DomainActionFailed(self, line: Line, data: dict[str, Any]) -> None:
        row = str(data.get("name")) if data.get("kind") == "Node" else DOMAIN_ROW
        phase = "retry" if data.get("retriable", True) else "failure"
        label = f"{data.get('action')} {data.get('kind')} failed"
        self.mark(row, "action-failed", phase, line, label, str(data.get("error", "")))

    def _on_DomainObjectObserved(self, line: Line, data: dict[str, Any]) -> None:
        summary = data.get("summary") or {}
        if data.get("kind") == "Node":
            key = "unlabelled" if data.get("change") == "DELETED" else "labelled"
            self.mark(str(data.get("name")), key, "teardown" if key == "unlabelled" else "formation", line)
        elif data.get("kind") == "Pod" and summary.get("node"):
            node = str(summary["node"])
            if data.get("change") == "DELETED":
                self.mark(node, "daemon-pod-gone", "teardown", line, "daemon pod gone")
            elif summary.get("ready"):
                self.ready_seen.add(node)
                self.mark(node, "ready", "formation", line)
            elif node in self.ready_seen:
                self.ready_seen.discard(node)
                self.mark(node, "not-ready", "failure", line, "daemon NotReady")

    def _on_CliqueIndexAssigned(self, line: Line, data: dict[str, Any]) -> None:
        self.mark(
            str(data.get("node_name")), "listed", "formation", line, detail=f"index {data.get('index')}"
        )

    def _on_CliqueEntryRemoved(self, line: Line, data: dict[str, Any]) -> None:
        self.mark(str(data.get("node_name")), "unlisted", "teardown", line)

    # ---- the plugins -------------------------------------------------------------------------------------
    def _claim(self, line: Line, data: dict[str, Any]) -> tuple[str, str]:
        key = (line.source, str(data.get("claim_uid", "")))
        return self.claim_kinds.get(key, "channel"), self.claim_nodes.get(key) or node_of(line)

    def _on_ClaimPrepareStarted(self, line: Line, data: dict[str, Any]) -> None:
        key = (line.source, str(data.get("claim_uid", "")))
        self.claim_kinds[key] = str(data.get("kind") or "channel")
        self.claim_nodes[key] = node_of(line)

    def _on_ClaimPrepareCompleted(self, line: Line, data: dict[str, Any]) -> None:
        kind, node = self._claim(line, data)
        self.mark(node, "daemon-claim" if kind == "daemon" else "worker", "formation", line)

    def _on_ClaimPrepareFailed(self, line: Line, data: dict[str, Any]) -> None:
        kind, node = self._claim(line, data)
        phase = "retry" if data.get("retriable") else "failure"
        self.mark(
            node, "prepare-failed", phase, line, f"{kind} claim Prepare failed", str(data.get("reason"))
        )

    def _on_ClaimPrepareFenced(self, line: Line, data: dict[str, Any]) -> None:
        kind, node = self._claim(line, data)
        self.mark(node, "fenced", "failure", line, f"{kind} claim Prepare fenced", str(data.get("reason")))

    def _on_ClaimUnprepared(self, line: Line, data: dict[str, Any]) -> None:
        kind, node = self._claim(line, data)
        key = "daemon-claim-unprepared" if kind == "daemon" else "worker-unprepared"
        self.mark(node, key, "teardown", line, detail=str(data.get("reason", "")))

    # ---- the daemons -------------------------------------------------------------------------------------
    def _on_ImexDaemonStarted(self, line: Line, data: dict[str, Any]) -> None:
        self.mark(node_of(line), "daemon-started", "formation", line, detail=str(data.get("pod_name", "")))

    def _on_ImexStarted(self, line: Line, data: dict[str, Any]) -> None:
        if int(data.get("attempt") or 1) > 1:
            self.mark(node_of(line), "imex-restart", "retry", line, "IMEX restarted", str(data.get("reason")))

    def _on_ImexExited(self, line: Line, data: dict[str, Any]) -> None:
        if not data.get("expected"):
            detail = f"exit {data.get('exit_code')} signal {data.get('signal')}: {data.get('reason')}"
            self.mark(node_of(line), "imex-exited", "failure", line, "IMEX exited", detail)

    def _on_ImexDaemonStopped(self, line: Line, data: dict[str, Any]) -> None:
        phase = "failure" if data.get("error") else "teardown"
        self.mark(node_of(line), "daemon-stopped", phase, line, detail=str(data.get("reason", "")))


def formation_view(lines: Sequence[Line], domain_uid: str, subject: str) -> FormationView:
    """The view of `domain_uid` from its timeline's lines (in time order)."""
    fold = _Fold(domain_uid)
    for line in lines:
        fold.feed(line)
    origin = fold.created or (lines[0].event.recorded_at if lines else None)
    for row_name, key, phase, label, line, detail in fold.pending:
        if not row_name:
            continue
        row = fold.domain if row_name == DOMAIN_ROW else fold.rows.setdefault(row_name, Row(row_name))
        if phase in ("formation", "teardown") and row.first(key) is not None:
            continue  # a milestone counts once: its first time (a repeated Prepare answers from the log)
        at = line.event.recorded_at
        offset = (at - origin).total_seconds() if origin else 0.0
        row.marks.append(
            Mark(row_name, key, label, phase, offset, at, _text(line), detail, Evidence.of(line))
        )
    nodes = sorted(fold.rows.values(), key=lambda r: r.name)
    view = FormationView(
        subject=subject, domain_uid=domain_uid, domain_name=fold.name, origin=origin,
        origin_is_creation=fold.created is not None, domain=fold.domain, nodes=nodes,
        expected_nodes=fold.expected, formation_s=None, slowest="", why="", teardown_s=None,
        missing=[], events=len(lines),
    )  # fmt: skip
    if fold.deleting and fold.torn_down:
        view.teardown_s = (fold.torn_down - fold.deleting).total_seconds()
    _summarise(view)
    return view


def narrow(view: FormationView, nodes: set[str]) -> None:
    """Keep only `nodes`' rows (a claim's view), the summary made of them."""
    view.nodes = [r for r in view.nodes if r.name in nodes]
    _summarise(view)


def _summarise(view: FormationView) -> None:
    """Formation time, what is missing, the slowest node and why: from `view.nodes`."""
    nodes = view.nodes
    view.missing = [k for k, _ in MILESTONES if not any(r.first(k) for r in nodes)]
    workers = [r.first("worker") for r in nodes]
    done = [w.offset_s for w in workers if w is not None]
    view.formation_s = max(done) if nodes and len(done) == len(nodes) else None
    _explain_slowest(view)


def _steps(row: Row) -> list[tuple[str, float]]:
    """The time each milestone the row has took after the one before it (the first: after the origin)."""
    out, before, previous = [], 0.0, "domain observed"
    for key, label in MILESTONES:
        mark = row.first(key)
        if mark is None:
            continue
        out.append((f"{previous} -> {label}", mark.offset_s - before))
        before, previous = mark.offset_s, label
    return out


def _explain_slowest(view: FormationView) -> None:
    """The node whose worker came last (or, not formed, the one furthest behind) and its step that was
    furthest above the other nodes' median for that step, and its longest step."""
    view.slowest = view.why = ""
    if not view.nodes:
        return

    def reached(row: Row) -> tuple[int, float]:
        done = [m for k, _ in MILESTONES if (m := row.first(k)) is not None]
        return (-len(done), -max((m.offset_s for m in done), default=0.0))

    def worker_at(row: Row) -> float:
        mark = row.first("worker")
        return mark.offset_s if mark else 0.0

    # Not formed: the node with the fewest milestones (of those, the first to stall) is furthest behind.
    slowest = max(view.nodes, key=reached) if view.formation_s is None else max(view.nodes, key=worker_at)
    steps = _steps(slowest)
    others = {name: [s for r in view.nodes if r is not slowest for n, s in _steps(r) if n == name]
              for name, _ in steps}  # fmt: skip

    def median(step: str) -> str:
        return f" (the other nodes' median {statistics.median(others[step]):.2f} s)" if others[step] else ""

    worst = max(steps, key=lambda s: s[1] - statistics.median(others[s[0]] or [0.0]), default=None)
    longest = max(steps, key=lambda s: s[1], default=None)
    worker = slowest.first("worker")
    said = [f"worker prepared at {worker.offset_s:.2f} s" if worker else "no worker prepared"]
    if longest is not None:
        said.append(f"its longest step: {longest[0]}, {longest[1]:.2f} s{median(longest[0])}")
    if worst is not None and worst != longest:
        said.append(f"furthest behind the others: {worst[0]}, {worst[1]:.2f} s{median(worst[0])}")
    if slowest.retries:
        reasons = sorted({m.detail or m.label for m in slowest.retries})
        said.append(
            f"{len(slowest.retries)} retr{'y' if len(slowest.retries) == 1 else 'ies'} ({'; '.join(reasons)})"
        )
    if slowest.failures:
        said.append(f"{len(slowest.failures)} failure{'s' * (len(slowest.failures) != 1)}")
    view.slowest, view.why = slowest.name, "; ".join(said)
