"""Why a step waited: the causes `cdctl explain` knows, and the rules that trace a wait to its origin.

`CAUSES` is the table (docs/explain.md prints it): a code, a title and what the history shows of it.
`classify(text)` names the cause of an error text (a Prepare's failure reason, a controller action's
error). `trace(history, node, key, start, end)` explains why node `node` reached milestone `key`
(cdctl.projections.formation.MILESTONES) only at `end` when the step began at `start`: a chain of `Cause`s,
the nearest first, each citing its event, followed back across components (worker Prepare refused <- node
not ready in the domain <- its daemon not Ready <- IMEX restarted for a peer change <- the node whose
daemon joined). `History` indexes a domain's lines (cdctl.projections.timeline) by node and type. Pure:
used by cdctl.projections.explain.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from cdctl.projections.evidence import Evidence
from cdctl.projections.formation import node_of
from cdctl.projections.timeline import Line

# code -> (title, what tells it)
CAUSES: dict[str, tuple[str, str]] = {
    "imex-peer-change": (
        "IMEX restarted or reloaded for a peer change",
        "the daemon's ImexPeersChanged (action: restarted IMEX or sent SIGUSR1) and ImexStarted",
    ),
    "node-joined": ("a node joined the IMEX domain", "the joining node's ImexDaemonStarted (its pod IP)"),
    "imex-crashed": ("IMEX exited unexpectedly", "the daemon's ImexExited with expected false"),
    "daemon-not-ready": (
        "the IMEX daemon was not Ready",
        "the daemon's ImexReadinessChanged; the controller's Pod observation turning Ready",
    ),
    "node-not-ready": (
        "the node was not ready in the domain",
        "the plugin's ClaimPrepareFailed: current node not ready in ComputeDomain",
    ),
    "channels-exhausted": (
        "every IMEX channel of the clique was held",
        "the controller's ImexChannelsExhausted; the plugin's waiting for an IMEX channel",
    ),
    "channel-held": (
        "the channel was still held on the node by another claim",
        "the plugin's ClaimPrepareFailed: still held on this node by claim",
    ),
    "clique-mismatch": ("the node's NVLink clique did not match", "a Prepare failure naming the clique"),
    "fabric-degraded": (
        "the NVLink fabric was not ready on the node",
        "the plugin's ClaimPrepareFailed: NVLink fabric not ready",
    ),
    "api-throttled": ("the API server throttled a request", "an error with 429 / Too Many Requests"),
    "api-error": ("an API request failed", "the controller's DomainActionFailed; a Prepare's API error"),
    "admission-refused": (
        "an admission policy refused a request",
        "an error naming a ValidatingAdmissionPolicy or 'denied the request'",
    ),
    "node-lost": (
        "the node's plugin restarted (a reboot, a crash or a lost node)",
        "a PluginStarted of the node's plugin during the wait",
    ),
    "prepare-fenced": ("a stale Prepare was fenced", "the plugin's ClaimPrepareFenced"),
    "controller-failover": ("the controller failed over", "the new leader's LeadershipAcquired"),
    "prepare-late": (
        "the kubelet asked for the Prepare late (the pod was scheduled or started late)",
        "the first ClaimPrepareStarted of the claim on the node",
    ),
}

_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("admission-refused", re.compile(r"ValidatingAdmissionPolic|denied the request|admission webhook", re.I)),
    ("api-throttled", re.compile(r"\b429\b|Too Many Requests|throttl", re.I)),
    ("node-not-ready", re.compile(r"not ready in ComputeDomain", re.I)),
    (
        "daemon-not-ready",
        re.compile(
            r"IMEX on this node is not ready now|IMEX daemon .* (not ready|is gone)"
            r"|shared IMEX daemon on this node is not ready|host's IMEX",
            re.I,
        ),
    ),
    ("channels-exhausted", re.compile(r"waiting for an IMEX channel|channels? exhausted", re.I)),
    ("channel-held", re.compile(r"still held on this node by claim", re.I)),
    ("fabric-degraded", re.compile(r"NVLink fabric", re.I)),
    ("clique-mismatch", re.compile(r"clique", re.I)),
    ("api-error", re.compile(r"\b5\d\d\b|timed out|connection|Internal|Service Unavailable|not found", re.I)),
)


def classify(text: str) -> str:
    """The cause code an error text tells, '' when it tells none this table knows."""
    return next((code for code, pattern in _PATTERNS if pattern.search(text)), "")


@dataclass(frozen=True, slots=True)
class Cause:
    code: str
    text: str
    at: datetime | None
    evidence: Evidence | None

    def to_json(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "title": CAUSES[self.code][0],
            "text": self.text,
            "at": self.at.isoformat(timespec="milliseconds") if self.at else None,
            "evidence": self.evidence.to_json() if self.evidence else None,
        }


def _cause(code: str, text: str, line: Line | None) -> Cause:
    return Cause(code, text, line.event.recorded_at if line else None, Evidence.of(line) if line else None)


def _seconds(value: Any) -> str:
    return f"{float(value or 0):.1f}"


def exit_text(data: dict[str, Any]) -> str:
    """How an ImexExited says the process ended: killed by a signal, or its exit code."""
    return f"killed by {data['signal']}" if data.get("signal") else f"exit code {data.get('exit_code')}"


def clock(at: datetime) -> str:
    return at.strftime("%H:%M:%S.") + f"{at.microsecond // 100_000}"


@dataclass
class History:
    """A domain's lines, indexed for the rules."""

    lines: Sequence[Line]
    by_node: dict[str, list[Line]] = field(default_factory=dict)
    claim_kinds: dict[str, str] = field(default_factory=dict)  # claim uid -> channel | daemon
    node_of_ip: dict[str, str] = field(default_factory=dict)  # a daemon pod's IP -> its node

    def __post_init__(self) -> None:
        for line in self.lines:
            self.by_node.setdefault(_concerns(line), []).append(line)
            data = line.event.data
            if line.event.type == "ClaimPrepareStarted":
                self.claim_kinds[str(data.get("claim_uid", ""))] = str(data.get("kind") or "channel")
            elif line.event.type == "ImexDaemonStarted" and data.get("pod_ip"):
                self.node_of_ip[str(data["pod_ip"])] = node_of(line)

    def on(self, node: str, types: Iterable[str], start: datetime, end: datetime) -> list[Line]:
        wanted = set(types)
        return [
            ln
            for ln in self.by_node.get(node, [])
            if ln.event.type in wanted and start <= ln.event.recorded_at <= end
        ]

    def anywhere(self, types: Iterable[str], start: datetime, end: datetime) -> list[Line]:
        wanted = set(types)
        return [ln for ln in self.lines if ln.event.type in wanted and start <= ln.event.recorded_at <= end]

    def asked(self, node: str, kind: str) -> list[Line]:
        """The node's ClaimPrepareStarted of `kind` (channel or daemon) claims, in time order."""
        return [
            ln
            for ln in self.by_node.get(node, [])
            if ln.event.type == "ClaimPrepareStarted" and ln.event.data.get("kind", "channel") == kind
        ]

    def claim_failures(self, node: str, kind: str, start: datetime, end: datetime) -> list[Line]:
        return [
            ln
            for ln in self.on(node, ("ClaimPrepareFailed", "ClaimPrepareFenced"), start, end)
            if self.claim_kinds.get(str(ln.event.data.get("claim_uid", "")), "channel") == kind
        ]


def trace_domain(history: History, start: datetime, end: datetime) -> list[Cause]:
    """Why a domain no node has joined waits: the controller's failed actions and failovers since `start`."""
    return _controller_wait(history, start, end) + _failovers(history, start, end)


def _concerns(line: Line) -> str:
    """The node a line is about: its source's or the node it names; a controller's Pod or Node observation
    names it in its summary or as the object's name."""
    data = line.event.data
    if line.event.type == "DomainObjectObserved":
        if data.get("kind") == "Node":
            return str(data.get("name") or "")
        summary = data.get("summary")
        if isinstance(summary, dict) and summary.get("node"):
            return str(summary["node"])
    return node_of(line)


def trace(history: History, node: str, key: str, start: datetime, end: datetime) -> list[Cause]:
    """Why `node` reached milestone `key` only at `end` (its step began at `start`): nearest cause first."""
    chain: list[Cause] = []
    if key in ("worker", "daemon-claim"):
        chain += _prepare_wait(history, node, "channel" if key == "worker" else "daemon", start, end)
    elif key == "ready":
        chain += _imex_wait(history, node, start, end)
    elif key == "labelled":  # the plugin labels the node at its first worker Prepare
        chain += _asked_late(history, node, "channel", start, end) + _controller_wait(history, start, end)
    elif key == "listed":
        chain += _controller_wait(history, start, end)
    chain += _node_wide(history, node, start, end, {c.code for c in chain})
    return chain


def _asked_late(history: History, node: str, kind: str, start: datetime, end: datetime) -> list[Cause]:
    """`prepare-late` when the kubelet first asked for the claim's Prepare late in the step."""
    asked = [ln for ln in history.asked(node, kind) if start <= ln.event.recorded_at <= end]
    if not asked or (asked[0].event.recorded_at - start).total_seconds() <= LATE_S:
        return []
    first = asked[0]
    waited = (first.event.recorded_at - start).total_seconds()
    said = (
        f"the kubelet asked for the {kind} claim's Prepare only at {clock(first.event.recorded_at)},"
        f" {waited:.2f} s into the step (its kubelet down or slow, or the pod scheduled late)"
    )
    return [_cause("prepare-late", said, first)]


def _prepare_wait(history: History, node: str, kind: str, start: datetime, end: datetime) -> list[Cause]:
    # The refusals since the claim was first asked for: a worker asked early waits through earlier steps too.
    first_asked = [ln.event.recorded_at for ln in history.asked(node, kind)[:1]]
    failures = history.claim_failures(node, kind, min([start, *first_asked]), end)
    if not failures:
        return _asked_late(history, node, kind, start, end)
    runs = _refusal_runs(failures, end)
    longest = max(runs, key=lambda run: run[2])  # the refusals that held the claim the longest
    chain = _refused(history, node, kind, longest, start, end)
    final = runs[-1]
    if final is not longest:  # what refused it last, after the longest run of refusals
        chain += _refused(history, node, kind, final, start, end)[:1]
    return chain


def _refusal_runs(failures: list[Line], end: datetime) -> list[tuple[str, list[Line], float]]:
    """Consecutive refusals of one cause: (code, lines, seconds until the next run began or `end`)."""
    runs: list[tuple[str, list[Line]]] = []
    for line in failures:
        code = _refusal_code(line)
        if runs and runs[-1][0] == code:
            runs[-1][1].append(line)
        else:
            runs.append((code, [line]))
    ends = [lines[0].event.recorded_at for _, lines in runs[1:]] + [end]
    return [
        (code, lines, (until - lines[0].event.recorded_at).total_seconds())
        for (code, lines), until in zip(runs, ends, strict=True)
    ]


def _refusal_code(line: Line) -> str:
    if line.event.type == "ClaimPrepareFenced":
        return "prepare-fenced"
    return classify(str(line.event.data.get("reason", ""))) or "api-error"


def _refused(
    history: History,
    node: str,
    kind: str,
    run: tuple[str, list[Line], float],
    start: datetime,
    end: datetime,
) -> list[Cause]:
    """A run of refusals of one cause, and what that cause follows back to."""
    code, lines, lasted = run
    last = lines[-1]
    reason = str(last.event.data.get("reason", ""))
    if code == "prepare-fenced":
        return [_cause(code, f"a stale Prepare of the {kind} claim was fenced: {reason}", last)]
    times = f" ({len(lines)} refusals over {lasted:.2f} s)" if len(lines) > 1 else ""
    said = f"the {kind} claim's Prepare was refused{times}, last at {clock(last.event.recorded_at)}: {reason}"
    chain = [_cause(code, said, last)]
    if code in ("node-not-ready", "daemon-not-ready"):
        chain += _daemon_ready(history, node, start, end)
    elif code == "channels-exhausted":
        exhausted = history.anywhere(("ImexChannelsExhausted",), start - _LOOKBACK, end)
        if exhausted:
            data = exhausted[-1].event.data
            count = data.get("channel_count")
            usable = f"1 to {count - 1}; 0 is never handed out" if isinstance(count, int) else "its limit"
            chain.append(
                _cause(
                    "channels-exhausted",
                    f"every channel of clique {data.get('clique_id')} ({usable}) was held by other domains",
                    exhausted[-1],
                )
            )
    return chain


def _daemon_ready(history: History, node: str, start: datetime, end: datetime) -> list[Cause]:
    """The node's daemon turning Ready (the controller's Pod observation), and why it came when it did."""
    readies = [
        ln
        for ln in history.on(node, ("DomainObjectObserved",), start - _LOOKBACK, end + _SETTLE)
        if ln.event.data.get("kind") == "Pod" and (ln.event.data.get("summary") or {}).get("ready")
    ]
    began = history.on(node, ("ImexDaemonStarted",), start - _LOOKBACK, end)
    since = began[-1].event.recorded_at if began else start
    if not readies:
        return [_cause("daemon-not-ready", f"its IMEX daemon was not Ready by {clock(end)}", None)]
    before = [ln for ln in readies if ln.event.recorded_at <= end]
    ready = before[-1] if before else readies[0]  # the controller may record it just after the plugin saw it
    chain = [
        _cause(
            "daemon-not-ready",
            f"its IMEX daemon turned Ready only at {clock(ready.event.recorded_at)}",
            ready,
        )
    ]
    return chain + _imex_wait(history, node, since, ready.event.recorded_at)


def _imex_wait(history: History, node: str, start: datetime, end: datetime) -> list[Cause]:
    """Why IMEX on `node` answered READY late: a restart or reload for a peer change (who joined), a crash."""
    chain: list[Cause] = []
    ready = [
        ln
        for ln in history.on(node, ("ImexReadinessChanged",), start, end + _SETTLE)
        if ln.event.data.get("ready")
    ]
    if ready:
        at = ready[-1].event.recorded_at
        chain.append(_cause("daemon-not-ready", f"IMEX answered READY at {clock(at)}", ready[-1]))
    changes = [
        ln
        for ln in history.on(node, ("ImexPeersChanged",), start, end)
        if ln.event.data.get("action") not in ("", "started IMEX", "none")
    ]
    crashes = [
        ln for ln in history.on(node, ("ImexExited",), start, end) if not ln.event.data.get("expected")
    ]
    if crashes:
        data = crashes[-1].event.data
        chain.append(
            _cause(
                "imex-crashed",
                f"IMEX exited at {clock(crashes[-1].event.recorded_at)} ({exit_text(data)}):"
                f" {data.get('reason')}",
                crashes[-1],
            )
        )
    if changes:
        change = changes[-1]
        data = change.event.data
        action = str(data.get("action"))
        how = "restarted" if "restart" in action else "reloaded its peers"
        chain.append(
            _cause(
                "imex-peer-change",
                f"IMEX {how} at {clock(change.event.recorded_at)}: the peer list"
                f" changed ({action}, {len(changes)} change{'s' * (len(changes) != 1)} in the wait)",
                change,
            )
        )
        chain += _joined(history, data.get("added") or [], end)
    return chain


def _joined(history: History, added: Sequence[Any], before: datetime) -> list[Cause]:
    """The node(s) whose joining changed the peer list, from the entries added (`name=ip` or `ip`)."""
    nodes = []
    for entry in added:
        ip = str(entry).rpartition("=")[2]
        node = history.node_of_ip.get(ip, "")
        nodes.append(node or ip)
    if not nodes:
        return []
    last = nodes[-1]
    started = [
        ln
        for ln in history.by_node.get(last, [])
        if ln.event.type == "ImexDaemonStarted" and ln.event.recorded_at <= before
    ]
    line = started[-1] if started else None
    when = f" (its daemon started at {clock(line.event.recorded_at)})" if line else ""
    return [_cause("node-joined", f"the peer list changed when {', '.join(nodes)} joined{when}", line)]


def _controller_wait(history: History, start: datetime, end: datetime) -> list[Cause]:
    chain: list[Cause] = []
    for line in history.anywhere(("DomainActionFailed",), start, end)[-3:]:
        data = line.event.data
        error = str(data.get("error", ""))
        code = classify(error)
        if code not in ("api-throttled", "admission-refused"):
            code = "api-error"
        chain.append(
            _cause(
                code,
                f"the controller's {data.get('action')} of {data.get('kind')} "
                f"{data.get('name', '')} failed: {error}",
                line,
            )
        )
    return chain


def _node_wide(history: History, node: str, start: datetime, end: datetime, said: set[str]) -> list[Cause]:
    """What stalls any step: the controller failing over, the node's plugin restarting, its fabric."""
    chain = _failovers(history, start, end)
    restarts = history.on(node, ("PluginStarted",), start, end)
    if restarts and "node-lost" not in said:
        chain.append(plugin_restart(history, node, restarts[-1]))
    if "fabric-degraded" not in said:
        chain += _fabric(history, node, start, end)
    return chain


def _failovers(history: History, start: datetime, end: datetime) -> list[Cause]:
    """The controller's takeovers during the wait (a LeadershipAcquired from a previous holder)."""
    chain: list[Cause] = []
    for line in history.anywhere(("LeadershipAcquired",), start, end):
        data = line.event.data
        if data.get("previous_holder"):
            chain.append(
                _cause(
                    "controller-failover",
                    f"the controller failed over at "
                    f"{clock(line.event.recorded_at)}: {data.get('identity')} took the Lease from "
                    f"{data.get('previous_holder')} ({data.get('how')}, {_seconds(data.get('silent_s'))} s"
                    " after its last renewal)",
                    line,
                )
            )
    return chain


def plugin_restart(history: History, node: str, line: Line) -> Cause:
    """A start of the node's plugin after its first: a clique change it restarted for, else a lost node."""
    before = [ln for ln in history.by_node.get(node, []) if ln.event.type == "PluginStarted"
              and ln.event.recorded_at < line.event.recorded_at]  # fmt: skip
    old = str(before[-1].event.data.get("clique_id", "")) if before else None
    new = str(line.event.data.get("clique_id", ""))
    at = clock(line.event.recorded_at)
    if old is not None and old != new:
        said = (f"the NVLink clique of {node} changed from {old or '(none)'} to {new or '(none)'}: its plugin"
                f" restarted at {at} to follow it")  # fmt: skip
        return _cause("clique-mismatch", said, line)
    return _cause("node-lost", f"the kubelet plugin on {node} started again at {at} (the node rebooted, or"
                  " the plugin crashed)", line)  # fmt: skip


def _fabric(history: History, node: str, start: datetime, end: datetime) -> list[Cause]:
    """The node's NVLink fabric not ready during the step (the plugin's FabricStateChanged)."""
    states = [ln for ln in history.by_node.get(node, []) if ln.event.type == "FabricStateChanged"
              and ln.event.recorded_at <= end]  # fmt: skip
    down = [ln for ln in states if not ln.event.data.get("ready")]
    if not down:
        return []
    began = down[0]
    ready = [
        ln for ln in states if ln.event.data.get("ready") and ln.event.recorded_at > began.event.recorded_at
    ]
    if ready and ready[0].event.recorded_at < start:
        return []  # it was ready again before this step began
    until = f"until {clock(ready[0].event.recorded_at)}" if ready else f"still at {clock(end)}"
    said = (f"the NVLink fabric on {node} was not ready from {clock(began.event.recorded_at)} {until}:"
            f" {down[-1].event.data.get('pending')}")  # fmt: skip
    return [_cause("fabric-degraded", said, ready[0] if ready else down[-1])]


# How far before a step's start a cause may lie (a refusal recorded just before the step's own mark), and
# how long after its end an answer may be recorded (IMEX's READY lands after the Pod turned Ready).
_LOOKBACK = timedelta(seconds=30)
LATE_S = 0.5  # a first Prepare asked later than this into its step is late
_SETTLE = timedelta(seconds=1)
