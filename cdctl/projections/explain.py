"""`cdctl explain`'s answer: why a domain took the time it took, why a claim waits, what a node went through.

- `explain_domain(view, history)`: from the formation view (cdctl.projections.formation) the formation
  time, the critical path (the slowest node's steps, each with its start, end and wait, and the event that
  ended it) and the cause of its longest wait, traced across components (cdctl.projections.causes).
- `explain_claim(lines, claim_uid, history)`: a claim's outcome (prepared, failed, still waiting), its last
  error, how long it waited and for what, and the same chain over its wait.
- `explain_node(lines, node)`: every domain and claim the node served, and what went wrong there.
Each statement cites its event (cdctl.projections.evidence). `Explanation.text()` is what the command
prints, `to_json()` the same as data (docs/explain.md). Notes say what the file cannot tell (a compaction
horizon, a source that is missing). Pure: cdctl.projections.explainload reads the lines.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from cdctl.projections.causes import (
    CAUSES,
    Cause,
    History,
    classify,
    clock,
    exit_text,
    plugin_restart,
    trace,
    trace_domain,
)
from cdctl.projections.evidence import Evidence
from cdctl.projections.formation import LABELS, MILESTONES, FormationView, node_of
from cdctl.projections.timeline import Line


@dataclass(frozen=True, slots=True)
class Step:
    """One step of the critical path: the node reached `key` at `end`, `wait_s` after the step before."""

    key: str
    label: str
    start: datetime
    end: datetime
    start_s: float
    end_s: float
    evidence: Evidence | None

    @property
    def wait_s(self) -> float:
        return self.end_s - self.start_s

    def to_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "label": self.label,
            "start_s": round(self.start_s, 3),
            "end_s": round(self.end_s, 3),
            "wait_s": round(self.wait_s, 3),
            "evidence": self.evidence.to_json() if self.evidence else None,
        }


@dataclass
class Explanation:
    subject: str
    kind: str  # computedomain | resourceclaim | node
    facts: list[tuple[str, Evidence | None]] = field(default_factory=list)  # what happened, each cited
    path_node: str = ""
    path: list[Step] = field(default_factory=list)
    longest: Step | None = None
    # why the longest wait (or the claim's wait) took its time, the nearest cause first
    chain: list[Cause] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what this file cannot tell
    formation_s: float | None = None
    waiting_for: str = ""  # a claim still waiting: the cause code of its last refusal

    def fact(self, text: str, line: Line | None = None) -> None:
        self.facts.append((text, Evidence.of(line) if line else None))

    def text(self) -> list[str]:
        out = [f"{_cite(text, ev)}" for text, ev in self.facts]
        if self.path:
            out.append(f"critical path ({self.path_node}):")
            for step in self.path:
                mark = "  <- longest wait" if step is self.longest else ""
                out.append(
                    _cite(
                        f"  +{step.start_s:6.2f} s -> +{step.end_s:6.2f} s  wait {step.wait_s:5.2f} s  "
                        f"{step.label}{mark}",
                        step.evidence,
                    )
                )
        if self.chain:
            head = f"why {self.longest.label} waited" if self.longest else "why"
            out.append(f"{head}:")
            for depth, cause in enumerate(self.chain):
                arrow = "  " + "  " * depth + ("" if depth == 0 else "<- ")
                out.append(_cite(f"{arrow}{cause.text}", cause.evidence))
        elif self.longest is not None:
            out.append("why: no event in this file tells a cause for that wait (the step's own time)")
        out += [f"note: {note}" for note in self.notes]
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "subject": self.subject,
            "kind": self.kind,
            "formation_s": None if self.formation_s is None else round(self.formation_s, 3),
            "facts": [{"text": t, "evidence": e.to_json() if e else None} for t, e in self.facts],
            "critical_path": {
                "node": self.path_node,
                "steps": [s.to_json() for s in self.path],
                "longest": self.longest.key if self.longest else None,
            },
            "causes": [c.to_json() for c in self.chain],
            "waiting_for": self.waiting_for or None,
            "notes": self.notes,
        }


def _cite(text: str, evidence: Evidence | None) -> str:
    return f"{text}  {evidence.cite()}" if evidence else text


def critical_path(view: FormationView, node: str) -> list[Step]:
    """`node`'s milestones in order, each step from the one before (the first: from the domain's origin)."""
    row = next((r for r in view.nodes if r.name == node), None)
    if row is None or view.origin is None:
        return []
    steps: list[Step] = []
    before_s, before_at, previous = 0.0, view.origin, "domain observed"
    for key, label in MILESTONES:
        mark = row.first(key)
        if mark is None:
            continue
        steps.append(
            Step(key, f"{previous} -> {label}", before_at, mark.at, before_s, mark.offset_s, mark.evidence)
        )
        before_s, before_at, previous = mark.offset_s, mark.at, label
    return steps


def explain_domain(view: FormationView, history: History) -> Explanation:
    out = Explanation(view.subject, "computedomain", formation_s=view.formation_s)
    observed = view.domain.first("observed")
    name = view.domain_name or view.domain_uid
    out.fact(f"ComputeDomain {name} (uid {view.domain_uid})", None)
    if observed is not None:
        out.facts.append((f"first seen by the controller at {clock(observed.at)}", observed.evidence))
    count = len(view.nodes)
    if view.formation_s is not None:
        worker = next(r for r in view.nodes if r.name == view.slowest).first("worker")
        nodes = f"{count} node{'s' * (count != 1)}"
        text = f"formed in {view.formation_s:.2f} s: the last of {nodes}, {view.slowest}"
        out.facts.append((f"{text}, had its worker prepared last", worker.evidence if worker else None))
    else:
        waiting = [r.name for r in view.nodes if r.first("worker") is None]
        out.fact(
            f"not formed in this file: {len(waiting)} of {count} nodes without a prepared worker"
            f" ({', '.join(waiting[:8])}{' ...' if len(waiting) > 8 else ''})"
        )
    if view.slowest:
        out.path_node = view.slowest
        out.path = critical_path(view, view.slowest)
        out.longest = max(out.path, key=lambda s: s.wait_s, default=None)
        if out.longest is not None:
            step = out.longest
            out.chain = trace(history, view.slowest, step.key, step.start, step.end)
        if view.formation_s is None:
            _explain_stuck(out, view, history)
    if not view.nodes and view.origin is not None and history.lines:
        last = history.lines[-1].event.recorded_at
        out.fact(f"no node has joined it in this file ({(last - view.origin).total_seconds():.2f} s from its"
                 " observation to the file's last event)")  # fmt: skip
        out.chain = trace_domain(history, view.origin, last)
    if view.teardown_s is not None:
        torn = view.domain.first("torn-down")
        out.facts.append(
            (
                f"torn down {view.teardown_s:.2f} s after its deletion was seen",
                torn.evidence if torn else None,
            )
        )
    return out


def _explain_stuck(out: Explanation, view: FormationView, history: History) -> None:
    """A domain not formed: the node furthest behind waits for its next milestone since its last one."""
    row = next(r for r in view.nodes if r.name == view.slowest)
    reached = [k for k, _ in MILESTONES if row.first(k) is not None]
    following = [k for k, _ in MILESTONES if k not in reached]
    if not following or view.origin is None:
        return
    last = history.lines[-1].event.recorded_at if history.lines else view.origin
    since = out.path[-1].end if out.path else view.origin
    out.longest = None
    out.chain = trace(history, view.slowest, following[0], since, last)
    out.fact(
        f"{view.slowest} waits for: {LABELS[following[0]]} (since {clock(since)},"
        f" {(last - since).total_seconds():.2f} s to the file's last event)"
    )


def explain_claim(lines: Sequence[Line], claim_uid: str, subject: str, history: History) -> Explanation:
    """A claim's outcome and its wait, from its own stream's lines (and its domain's, in `history`)."""
    out = Explanation(subject, "resourceclaim")
    own = [ln for ln in lines if ln.event.stream == f"claim/{claim_uid}"]
    started = [ln for ln in own if ln.event.type == "ClaimPrepareStarted"]
    if not started:
        out.notes.append(f"no Prepare of claim {claim_uid} in this file")
        return out
    first = started[0]
    data = first.event.data
    node = node_of(first)
    name = f"{data.get('namespace', '')}/{data.get('name', '')}"
    out.fact(
        f"ResourceClaim {name} (uid {claim_uid}), a {data.get('kind', 'channel')} claim on {node}, "
        f"of ComputeDomain {data.get('domain_uid') or '(none named)'}"
    )
    out.fact(f"first Prepare asked at {clock(first.event.recorded_at)}", first)
    completed = [ln for ln in own if ln.event.type == "ClaimPrepareCompleted"]
    failures = [ln for ln in own if ln.event.type in ("ClaimPrepareFailed", "ClaimPrepareFenced")]
    unprepared = [ln for ln in own if ln.event.type == "ClaimUnprepared"]
    end_line = completed[0] if completed else own[-1]
    waited = (end_line.event.recorded_at - first.event.recorded_at).total_seconds()
    if completed:
        out.fact(
            f"prepared at {clock(completed[0].event.recorded_at)}, {waited:.2f} s after it was first asked"
            f"{f', after {_refusals(len(failures))}' if failures else ''}",
            completed[0],
        )
    if failures and (not completed or failures[-1].event.recorded_at < completed[0].event.recorded_at):
        last = failures[-1]
        reason = str(last.event.data.get("reason", ""))
        retriable = bool(last.event.data.get("retriable", last.event.type == "ClaimPrepareFailed"))
        if not completed:
            state = "still waiting" if retriable else "failed for good"
            out.waiting_for = (
                "prepare-fenced" if last.event.type == "ClaimPrepareFenced" else classify(reason)
            )
            waits = CAUSES[out.waiting_for][0] if out.waiting_for else "what its last error says"
            out.fact(
                f"{state} after {waited:.2f} s and {_refusals(len(failures))};"
                f" it waits for this to change: {waits}",
                None,
            )
        out.fact(f"last error at {clock(last.event.recorded_at)}: {reason}", last)
    if unprepared:
        out.fact(f"unprepared at {clock(unprepared[-1].event.recorded_at)}", unprepared[-1])
    kind = str(data.get("kind") or "channel")
    key = "worker" if kind == "channel" else "daemon-claim"
    if failures or waited > 1.0:
        out.chain = trace(history, node, key, first.event.recorded_at, end_line.event.recorded_at)
    return out


def explain_node(lines: Sequence[Line], node: str, subject: str) -> Explanation:
    """What `node` served and what went wrong there."""
    out = Explanation(subject, "node")
    mine = [ln for ln in lines if node_of(ln) == node]
    history = History(mine)
    domains: dict[str, list[Line]] = {}
    claims: dict[str, list[Line]] = {}
    for line in mine:
        data = line.event.data
        if line.event.type == "ClaimPrepareStarted":
            claims.setdefault(str(data.get("claim_uid")), []).append(line)
            if data.get("domain_uid"):
                domains.setdefault(str(data["domain_uid"]), []).append(line)
    out.fact(
        f"node {node}: {len(domains)} ComputeDomain{'s' * (len(domains) != 1)}, {len(claims)} "
        f"claim{'s' * (len(claims) != 1)}, {len(mine)} events"
    )
    for uid, seen in domains.items():
        out.fact(f"served ComputeDomain {uid} from {clock(seen[0].event.recorded_at)}", seen[0])
    for uid, seen in claims.items():
        data = seen[0].event.data
        ends = [
            ln
            for ln in mine
            if ln.event.data.get("claim_uid") == uid
            and ln.event.type
            in ("ClaimPrepareCompleted", "ClaimPrepareFailed", "ClaimPrepareFenced", "ClaimUnprepared")
        ]
        outcome = _claim_outcome(ends)
        out.fact(
            f"claim {data.get('namespace', '')}/{data.get('name', '')} ({data.get('kind', 'channel')}): "
            f"{outcome}",
            ends[-1] if ends else seen[0],
        )
    problems = 0
    first_start = _first(mine, "PluginStarted")
    for line in mine:
        data, kind = line.event.data, line.event.type
        said = ""
        if kind == "ClaimPrepareFailed" and not data.get("retriable"):
            said = f"a Prepare failed for good: {data.get('reason')}"
        elif kind == "ClaimPrepareFenced":
            said = f"a stale Prepare was fenced: {data.get('reason')}"
        elif kind == "ImexExited" and not data.get("expected"):
            said = f"IMEX exited ({exit_text(data)}): {data.get('reason')}"
        elif kind == "ImexDaemonStopped" and data.get("error"):
            said = f"an IMEX daemon stopped on an error: {data.get('reason')}"
        elif kind == "PluginStarted" and line is not first_start:
            cause = plugin_restart(history, node, line)
            said = (
                cause.text
                if cause.code == "clique-mismatch"
                else "the kubelet plugin started again (a reboot or a crash)"
            )
        elif kind == "FabricStateChanged" and not data.get("ready"):
            said = f"the NVLink fabric was not ready: {data.get('pending')}"
        if said:
            problems += 1
            out.fact(f"problem at {clock(line.event.recorded_at)}: {said}", line)
    if not problems:
        out.fact("no problem recorded on this node")
    return out


def _refusals(count: int) -> str:
    return f"{count} refusal{'s' * (count != 1)}"


def _first(lines: Sequence[Line], type_: str) -> Line | None:
    return next((ln for ln in lines if ln.event.type == type_), None)


def _claim_outcome(ends: Sequence[Line]) -> str:
    if not ends:
        return "asked, no answer recorded"
    last = ends[-1]
    data = last.event.data
    if last.event.type == "ClaimUnprepared":
        return f"prepared, unprepared at {clock(last.event.recorded_at)}"
    if last.event.type == "ClaimPrepareCompleted":
        return f"prepared at {clock(last.event.recorded_at)}"
    state = "waiting" if data.get("retriable") else "failed"
    return f"{state}: {data.get('reason')}"
