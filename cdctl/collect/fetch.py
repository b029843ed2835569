"""Reading one component pod into a collected file: its token, its published head, its logs.

For a pod (cdctl.collect.pods) `PodReader`:
1. asks the pod for its log list without a token: the 401 names the ServiceAccount whose token it accepts
   (which must be in the driver namespace), and a pod that does not answer is found out here; then mints a
   token of that account for this pod's audience (TokenRequest; cdctl.k8s.tokens);
2. reads the head its metrics publish (`cdctl_event_log_head_info`), before reading the log, so the log
   read afterwards must hold it;
3. reads the list of logs it serves (the plugin adds its node's IMEX daemon logs) and streams each, after the
   last position this file holds of it, into the file (`CollectedFile.store_batch`, a batch at a time on the
   writer's thread; a compacted log's horizon snapshots with `store_horizon`, checked against their digest),
   then records what it did (`fetches`).
Which source a log is: the latest generation of the same component, log and node (the controller: pod,
or any pod whose log starts with the same hash: one kept on a volume). A log whose first event is not the
one collected before, or that does not hold the last hash collected (the pod answers 409), was recreated:
it becomes a new generation, collected from its start, never merged into the old one. `--since` applies to
sources first seen; `--domain` narrows the controller's and plugins' logs to the domains' streams and keeps
only those domains' daemon logs. Nothing here raises for one pod or log: every failure is an `Outcome`
(skipped or cut, with the error) and a `fetches` row.
"""

from __future__ import annotations

import asyncio
import re
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import orjson

from cdctl.collect.pods import ComponentPod
from cdctl.domain.errors import CdctlError, StoreError
from cdctl.k8s.errors import KubeApiError
from cdctl.k8s.podproxy import PodProxy
from cdctl.k8s.rest import KubeApi
from cdctl.k8s.tokens import audience_for, mint_token, parse_service_account
from cdctl.store.collected import CollectedFile, Fetch, RangeState, Source, StoredHorizon
from cdctl.store.compaction import snapshot_digest
from cdctl.store.logserver import TOKEN_HEADER

T = TypeVar("T")
BATCH = 2000
FORMAT = 1
OWN_LOGS = {"controller": "controller", "kubelet-plugin": "plugin"}
_HEAD_INFO = re.compile(r"^cdctl_event_log_head_info\{([^}]*)\}\s+1(?:\.0)?\s*$", re.MULTILINE)
_LABEL = re.compile(r'(\w+)="([^"]*)"')


class CollectError(CdctlError):
    """One pod or log could not be read (the reason is recorded; the collection goes on)."""


@dataclass(frozen=True, slots=True)
class Options:
    namespace: str
    since: str = ""  # ISO 8601; applies to sources first seen in this run
    domains: tuple[str, ...] = ()  # uids
    service_account: str = ""  # NAMESPACE/NAME of the reader; empty: the one the pod names


class Progress(Protocol):
    def started(self, name: str, total: int) -> None: ...

    def advance(self, name: str, events: int) -> None: ...

    def finished(self, name: str, status: str) -> None: ...


class NoProgress:
    def started(self, name: str, total: int) -> None:
        return None

    def advance(self, name: str, events: int) -> None:
        return None

    def finished(self, name: str, status: str) -> None:
        return None


@dataclass(frozen=True, slots=True)
class Outcome:
    """What happened to one log (or to a pod that could not be read at all: `log` empty)."""

    name: str  # the source's name, or the pod's
    component: str
    node: str
    pod: str
    log: str
    status: str  # ok | skipped | cut
    events: int = 0
    error: str = ""
    source_id: int | None = None


class Writer:
    """The collected file's writes, one at a time on a worker thread (streams are read concurrently)."""

    def __init__(self, file: CollectedFile) -> None:
        self.file = file
        self._lock = asyncio.Lock()

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        async with self._lock:
            try:
                return await asyncio.to_thread(fn, *args)
            except sqlite3.Error as exc:
                raise StoreError(f"{self.file.path}: {exc}") from None


def published_head(metrics: str) -> tuple[int, str] | None:
    """The (position, hash) of `cdctl_event_log_head_info` in a Prometheus text exposition."""
    match = _HEAD_INFO.search(metrics)
    if match is None:
        return None
    labels = dict(_LABEL.findall(match.group(1)))
    position, hash_ = labels.get("position", ""), labels.get("hash", "")
    return (int(position), hash_) if position.isdigit() and len(hash_) == 64 else None


def _message(status: int, body: bytes) -> str:
    try:
        decoded = orjson.loads(body)
    except orjson.JSONDecodeError:
        return f"HTTP {status}: {body[:200].decode('utf-8', 'replace')}"
    text = decoded.get("message", "") if isinstance(decoded, dict) else ""
    return f"HTTP {status}: {text or body[:200].decode('utf-8', 'replace')}"


def _event_row(line: dict[str, Any]) -> tuple[int, str, int, str, int, str, str, str, str]:
    row = (
        line["position"], line["stream"], line["version"], line["type"], line["schema_version"],
        line["data"], line["metadata"], line["recorded_at"], line["hash"],
    )  # fmt: skip
    kinds = (int, str, int, str, int, str, str, str, str)
    if not all(isinstance(value, kind) for value, kind in zip(row, kinds, strict=True)):
        raise ValueError(f"an event line with a field of the wrong type (position {row[0]!r})")
    return row


def _horizon(line: dict[str, Any]) -> StoredHorizon:
    """A stream's horizon line; ValueError when malformed or when its snapshots do not match its digest."""
    snapshots = {str(s["name"]): s["state"] for s in line.get("snapshots") or []}
    horizon = StoredHorizon(
        int(line["position"]), int(line["record_position"]), str(line["anchor_hash"]),
        str(line["recorded_at"]), str(line["snapshot_digest"]), snapshots,
    )  # fmt: skip
    if not all(isinstance(state, str) for state in snapshots.values()):
        raise ValueError(f"a horizon snapshot at {horizon.position} that is not encoded text")
    rows = [(name, horizon.position, state) for name, state in snapshots.items()]
    if snapshot_digest(rows) != horizon.snapshot_digest:
        raise ValueError(f"the snapshots at horizon {horizon.position} do not match their digest")
    return horizon


class PodReader:
    def __init__(
        self,
        api: KubeApi,
        pod: ComponentPod,
        options: Options,
        writer: Writer,
        collection: int,
        progress: Progress,
    ) -> None:
        self.api = api
        self.pod = pod
        self.options = options
        self.writer = writer
        self.collection = collection
        self.progress = progress
        self.proxy = PodProxy(api, options.namespace, pod.name, pod.port or 0)
        self.headers: dict[str, str] = {}

    # ---- the pod ----------------------------------------------------------------------------------------
    async def authenticate(self) -> None:
        """A token for this pod; CollectError when the pod cannot be reached or named no acceptable reader."""
        if self.pod.port is None:
            raise CollectError("the pod declares no `http` container port")
        account = self.options.service_account
        try:
            status, body = await self.proxy.get_raw("eventlog")
            if not account:
                if status != 401:
                    raise CollectError(
                        _message(status, body) if status != 200 else "serves its logs unguarded"
                    )
                account = str(orjson.loads(body).get("serviceAccount", ""))
            namespace, name = parse_service_account(account)
            if namespace != self.options.namespace:
                raise CollectError(
                    f"names reader {account!r}, outside the namespace {self.options.namespace}"
                )
            token = await mint_token(
                self.api, namespace, name, audience_for(self.options.namespace, self.pod.name)
            )
        except (KubeApiError, ValueError, orjson.JSONDecodeError) as exc:
            raise CollectError(str(exc)) from None
        self.headers = {TOKEN_HEADER: token}

    async def domain_uids(self, namespace: str, name: str) -> list[str]:
        body = await self._get_json("eventlog/domains", [("namespace", namespace), ("name", name)])
        return [str(uid) for uid in body.get("uids") or []]

    async def _get_json(self, path: str, query: Sequence[tuple[str, str]] = ()) -> dict[str, Any]:
        try:
            status, body = await self.proxy.get_raw(path, query, self.headers)
        except KubeApiError as exc:
            raise CollectError(str(exc)) from None
        if status != 200:
            raise CollectError(_message(status, body))
        decoded = orjson.loads(body)
        if not isinstance(decoded, dict):
            raise CollectError(f"{path}: not a JSON object")
        return decoded

    async def read(self) -> list[Outcome]:
        """Every log of the pod into the file; an unreadable pod is one skipped Outcome."""
        pod = self.pod
        try:
            if not self.headers:
                await self.authenticate()
            published = await self._published()
            index = await self._get_json("eventlog")
        except CollectError as exc:
            await self._record(Fetch(pod.component, pod.node, pod.name, "", "skipped", exc.message))
            self.progress.finished(pod.name, "skipped")
            return [Outcome(pod.name, pod.component, pod.node, pod.name, "", "skipped", error=exc.message)]
        outcomes: list[Outcome] = []
        for entry in index.get("logs") or []:
            if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
                continue
            domain = str(entry.get("domain_uid") or "")
            if (  # a shared daemon's log (no domain uid) serves every domain of its clique: kept
                entry.get("component") == "daemon"
                and self.options.domains
                and domain
                and domain not in self.options.domains
            ):
                continue
            own = entry["name"] == OWN_LOGS.get(pod.component)
            outcomes.append(await self._read_log(entry, published if own else None))
        return outcomes

    async def _published(self) -> tuple[int, str] | None:
        try:
            return published_head((await self.proxy.get("metrics")).decode("utf-8", "replace"))
        except KubeApiError:
            return None  # no metrics on that path: the served head still anchors the end

    async def _record(self, fetch: Fetch) -> None:
        await self.writer.call(self.writer.file.record_fetch, self.collection, fetch)

    # ---- one log ----------------------------------------------------------------------------------------
    async def _read_log(self, entry: dict[str, Any], published: tuple[int, str] | None) -> Outcome:
        pod, log = self.pod, str(entry["name"])
        component = str(entry.get("component") or pod.component)
        domain = str(entry.get("domain_uid") or "")
        if entry.get("error"):
            error = str(entry["error"])
            await self._record(Fetch(component, pod.node, pod.name, log, "skipped", error))
            return Outcome(f"{pod.name} {log}", component, pod.node, pod.name, log, "skipped", error=error)
        scheme = (
            str(entry.get("scheme", "sha256")),
            int(entry.get("keyed_from") or 0),
            str(entry.get("key_check", "")),
        )
        first = entry.get("first")
        first_point = (int(first["position"]), str(first["hash"])) if isinstance(first, dict) else None
        served = _ServedLog(component, pod.node, pod.name, log, domain, scheme, first_point)
        source, fresh = await self.writer.call(_source_for, self.writer.file, served)
        try:
            return await self._stream(source, fresh, published)
        except _Recreated:
            source = await self.writer.call(_new_source, self.writer.file, served)
            return await self._stream(source, True, published)

    async def _stream(self, source: Source, fresh: bool, published: tuple[int, str] | None) -> Outcome:
        pod, file = self.pod, self.writer.file
        point = None if fresh else await self.writer.call(file.last_point, source.id)
        after, after_hash = point if point else (0, "")
        query = [("log", source.log), ("after", str(after))]
        query += [("after_hash", after_hash)] if after_hash else []
        query += [("since", self.options.since)] if self.options.since and fresh else []
        if source.component != "daemon":
            query += [("domain", uid) for uid in self.options.domains]
        current = await self.writer.call(file.open_range, source.id)
        stored, error, status, head = 0, "", "cut", None
        items: list[tuple[str, Any]] = []
        try:
            async with self.proxy.lines("eventlog/events", query, self.headers) as lines:
                async for raw in lines:
                    line = orjson.loads(raw)
                    kind = line.get("kind")
                    if kind == "header":
                        head = self._check_header(line, source)
                        self.progress.started(source.name, max(0, (head[0] if head else 0) - after))
                    elif kind == "horizon":
                        await self.writer.call(file.store_horizon, source.id, _horizon(line))
                    elif kind == "anchor":
                        items.append(("anchor", (int(line["position"]), line.get("hash"))))
                    elif kind == "event":
                        items.append(("event", _event_row(line)))
                        if len(items) >= BATCH:
                            current, count = await self._store(source, items, current)
                            stored, items = stored + count, []
                    elif kind == "end":
                        status = "ok"
                        break
                if items:
                    current, count = await self._store(source, items, current)
                    stored += count
            if status != "ok":
                error = "the stream ended before its end line (the connection or the component failed)"
        except KubeApiError as exc:
            if exc.status == 409 and not fresh:
                raise _Recreated() from None
            error = str(exc)
        except (ValueError, KeyError, TypeError, StoreError, CollectError) as exc:
            error = f"malformed answer: {exc}" if not isinstance(exc, CdctlError) else exc.message
        if status != "ok":
            status = "cut" if stored else "skipped"
        self.progress.finished(source.name, status)
        fetch = Fetch(
            source.component, pod.node, pod.name, source.log, status, error, source.id, after, stored, head,
            published,
        )  # fmt: skip
        await self._record(fetch)
        return Outcome(
            source.name, source.component, pod.node, pod.name, source.log, status, stored, error, source.id
        )

    async def _store(
        self, source: Source, items: list[tuple[str, Any]], current: RangeState | None
    ) -> tuple[RangeState | None, int]:
        current, count = await self.writer.call(self.writer.file.store_batch, source.id, items, current)
        self.progress.advance(source.name, count)
        return current, count

    @staticmethod
    def _check_header(line: dict[str, Any], source: Source) -> tuple[int, str] | None:
        if line.get("format") != FORMAT:
            raise CollectError(f"stream format {line.get('format')!r}; this cdctl reads format {FORMAT}")
        if line.get("log") != source.log:
            raise CollectError(f"asked for log {source.log!r}, got {line.get('log')!r}")
        head = line.get("head")
        return (int(head["position"]), str(head["hash"])) if isinstance(head, dict) else None


class _Recreated(Exception):
    """The pod answered 409: its log does not hold the last hash collected, so it is another log."""


@dataclass(frozen=True, slots=True)
class _ServedLog:
    """One log as a pod's log list names it: whose it is, its chain scheme and its first event."""

    component: str
    node: str
    pod: str
    log: str
    domain: str  # the domain_uid the list gives ("" when none)
    scheme: tuple[str, int, str]  # (scheme, keyed_from, key_check)
    first: tuple[int, str] | None  # (position, hash); None for an empty log


def _matches(source: Source, served: _ServedLog) -> bool:
    if source.component != served.component or source.log != served.log:
        return False
    return source.pod == served.pod if served.component == "controller" else source.node == served.node


def _source_for(file: CollectedFile, served: _ServedLog) -> tuple[Source, bool]:
    """The source this log continues (and False), or a new one (and True)."""
    sources, first = file.sources(), served.first
    same_log = [
        s for s in sources
        if s.component == served.component and s.log == served.log and first is not None
        and (s.first_position, s.first_hash) == first
    ]  # fmt: skip
    candidates = same_log or [s for s in sources if _matches(s, served)]
    latest = max(candidates, key=lambda s: s.generation, default=None)
    same_start = latest is not None and first is not None and latest.first_position == first[0]
    if latest is not None and first is not None and same_start and latest.first_hash not in (None, first[1]):
        latest = None  # its first event is another: the log was recreated
    if latest is None:
        return _new_source(file, served), True
    file.update_source(latest.id, pod=served.pod, scheme=served.scheme, first=first)
    return file.source(latest.id), False


def _new_source(file: CollectedFile, served: _ServedLog) -> Source:
    return file.add_source(
        component=served.component,
        node=served.node,
        pod=served.pod,
        log=served.log,
        domain_uid=served.domain,
        scheme=served.scheme,
        first=served.first,
    )
