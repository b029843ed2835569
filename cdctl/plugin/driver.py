"""One NodePrepareResources / NodeUnprepareResources call: every claim gets an entry within the budget.

Called by the gRPC handlers (cdctl.plugin.server) for both API versions. Claims of a call are worked on
concurrently; each is retried with exponential backoff (250 ms doubling to 3 s, like the Go plugin) while its
error is retriable and the call's budget (40 s, inside the kubelet's 45 s) lasts; a claim waiting for its
daemon retries as soon as a watch says Ready. Every attempt, and so every API request in it, runs under the
call's deadline: a slow API server cannot hold a claim past it. A claim still failing (or waiting) at the
deadline gets an error entry naming its last error (the Go plugin leaves it out of the response). Permanent
errors end a claim's work at once. A claim reference that is not a UUID and two DNS names is refused before
any request is made, as is a claim named twice in one call or already in another call of the same kind;
every error entry is cut to ERROR_LIMIT characters.
Prepare needs the ResourceClaim itself (the kubelet sends only refs): a watched copy serves when
`usable_cached_claim` says it is unambiguous, else it is read fresh (a GET).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

import structlog

from cdctl.domain.errors import CdctlError, PermanentError, RetriableError, clip, echo
from cdctl.plugin.checkpoint import ClaimBook
from cdctl.plugin.devices import ClaimRef, check_claim_ref, parse_claim
from cdctl.plugin.metrics import DRIVER, PluginMetrics
from cdctl.plugin.ports import ClusterPort
from cdctl.plugin.prepare import DeviceState
from cdctl.plugin.preparesettings import WatchedWait

log = structlog.get_logger("cdctl.plugin.driver")

KUBELET_CALL_TIMEOUT_S = 45.0
ERROR_LIMIT = 1024  # an error entry's length at most: input echoed in it is already cut to about 200
WATCHED_NOT_READY_RECHECK_S = 10.0  # see `pause`
T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    base_s: float = 0.25
    cap_s: float = 3.0
    budget_s: float = 40.0

    def backoff(self, attempt: int, hint: float) -> float:
        return min(self.cap_s, max(hint, self.base_s * (2.0**attempt)))


@dataclass
class PrepareOutcome:
    devices: list[dict[str, Any]] = field(default_factory=list)
    error: str = ""


def usable_cached_claim(obj: dict[str, Any], ref: ClaimRef, node: str, book: ClaimBook) -> bool:
    """Whether a watched copy of a claim may stand in for a fresh GET in Prepare (no request).

    Only for a claim this node has no record of (its first Prepare here), and only a copy that is plainly
    the allocation being prepared: the UID the kubelet sent, not being deleted, allocated and reserved, with a
    result of this driver in this node's pool. Everything else reads fresh: a retry, a repeated Prepare, a
    claim this node prepared or unprepared before (its copy may predate a deallocation and a new
    allocation), so the issue-1162 fences always decide on what the API server says.
    """
    meta = obj.get("metadata") or {}
    status = obj.get("status") or {}
    if book.get(ref.uid) is not None or meta.get("uid") != ref.uid or meta.get("deletionTimestamp"):
        return False
    if not status.get("reservedFor"):
        return False
    try:
        claim = parse_claim(obj)
    except CdctlError:
        return False
    return any(r.pool == node for r in claim.own_results())


async def pause(exc: RetriableError, delay: float, left: float) -> None:
    """Wait `delay` before a retry; a WatchedWait's wake (a watch saying Ready, or a channel assigned)
    ends the wait early.

    A "not ready" that running watches gave is retried when they say Ready, with a timed retry only every
    WATCHED_NOT_READY_RECHECK_S (within the `left` of the call's budget) in case a watch stalls: on a big
    rack, each node retrying on the backoff re-read its claim up to ten times while its clique formed."""
    if not isinstance(exc, WatchedWait):
        await asyncio.sleep(delay)
        return
    if exc.watched:
        delay = max(delay, min(WATCHED_NOT_READY_RECHECK_S, left))
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(delay):
            await exc.wake()


async def _timeouts_retriable(attempt_fn: Callable[[], Awaitable[T]]) -> T:
    try:
        return await attempt_fn()
    except TimeoutError as exc:
        raise RetriableError(f"timed out: {echo(str(exc))}") from exc


def _entry(what: str, ref: ClaimRef, problem: str) -> str:
    return clip(f"error {what} devices for claim {ref}: {problem}", ERROR_LIMIT)


class Driver:
    """Runs the per-claim prepare/unprepare work of one kubelet call under the retry policy."""

    def __init__(
        self,
        state: DeviceState,
        cluster: ClusterPort,
        policy: RetryPolicy | None = None,
        metrics: PluginMetrics | None = None,
    ) -> None:
        self.state = state
        self.cluster = cluster
        self.policy = policy or RetryPolicy()
        self.metrics = metrics
        self._calls: dict[str, set[str]] = {"preparing": set(), "unpreparing": set()}  # claim UIDs in calls

    async def _measured(self, operation: str, work: Awaitable[T], failed: Callable[[T], bool]) -> T:
        m = self.metrics
        if m is None:
            return await work
        m.requests.labels(DRIVER, operation).inc()
        inflight = m.inflight.labels(DRIVER, operation)
        inflight.inc()
        started = asyncio.get_running_loop().time()
        try:
            result = await work
        finally:
            inflight.dec()
            m.duration.labels(DRIVER, operation).observe(asyncio.get_running_loop().time() - started)
        if failed(result):
            m.failed(operation)
        m.observe_records(self.state.book.records())
        return result

    async def _retry(self, what: str, ref: ClaimRef, attempt_fn: Callable[[], Awaitable[T]]) -> T | str:
        """The attempt's result, or the error text for the claim's response entry (within the budget)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.policy.budget_s
        attempt = 0
        last = ""
        while True:
            try:
                async with asyncio.timeout_at(deadline):
                    return await _timeouts_retriable(attempt_fn)
            except TimeoutError:  # the call's deadline, not one inside the attempt (those are retriable)
                log.warning(f"{what} claim ran out of the call budget", claim=str(ref), last_error=last)
                note = f"; last error: {last}" if last else ""
                return _entry(
                    what, ref, f"no answer within the call's {self.policy.budget_s:g} s budget "
                    f"(attempt {attempt + 1} still waiting){note}; the kubelet will retry",
                )  # fmt: skip
            except PermanentError as exc:
                log.error(f"Permanent error {what} devices for claim", claim=str(ref), error=str(exc))
                return _entry(what, ref, str(exc))
            except RetriableError as exc:
                last = str(exc)
                delay = self.policy.backoff(attempt, exc.delay)
                attempt += 1
                if loop.time() + delay >= deadline:
                    log.warning(
                        f"gave up {what} claim within the call budget", claim=str(ref), error=str(exc)
                    )
                    return _entry(
                        what, ref, f"{exc} (still failing after {attempt} attempts; the kubelet will retry)"
                    )
                log.info(f"retrying {what} claim", claim=str(ref), error=str(exc), delay=round(delay, 3))
                await pause(exc, delay, deadline - loop.time())
            except CdctlError as exc:
                return _entry(what, ref, str(exc))
            except Exception as exc:  # an unexpected bug: fail this claim, keep the call and the process
                log.exception(f"unexpected error {what} claim", claim=str(ref))
                return _entry(what, ref, f"internal error: {echo(exc)}")

    def _cached_claim(self, ref: ClaimRef) -> dict[str, Any] | None:
        """The watched copy of the claim when it can stand in for a fresh read, else None."""
        obj = self.cluster.cached_claim(ref.namespace, ref.name, ref.uid)
        if obj is None or not usable_cached_claim(obj, ref, self.state.settings.node, self.state.book):
            return None
        return obj

    async def _prepare_one(self, ref: ClaimRef) -> PrepareOutcome:
        fence = self.state.book.version(ref.uid)  # anything that ends the claim after this point fences us

        async def attempt() -> list[dict[str, Any]]:
            obj = self._cached_claim(ref) or await self.cluster.get_claim(ref.namespace, ref.name)
            if obj is None:
                raise RetriableError(f"ResourceClaim {ref.namespace}/{ref.name} not found", delay=0.5)
            uid = (obj.get("metadata") or {}).get("uid") if isinstance(obj.get("metadata"), dict) else None
            if uid != ref.uid:
                raise PermanentError(
                    f"ResourceClaim {ref.namespace}/{ref.name} got replaced (uid {echo(uid)})"
                )
            return await self.state.prepare(parse_claim(obj), fence)

        got = await self._measured(
            "prepare", self._retry("preparing", ref, attempt), lambda g: isinstance(g, str)
        )
        return PrepareOutcome(error=got) if isinstance(got, str) else PrepareOutcome(devices=got)

    async def _unprepare_one(self, ref: ClaimRef) -> str:
        async def attempt() -> bool:
            return await self.state.unprepare(ref)

        got = await self._measured(
            "unprepare", self._retry("unpreparing", ref, attempt), lambda g: isinstance(g, str)
        )
        return got if isinstance(got, str) else ""

    async def prepare_resources(self, claims: list[ClaimRef]) -> dict[str, PrepareOutcome]:
        """An outcome for every claim UID of the request (an empty request gives an empty answer)."""
        refused = self._refused("preparing", claims)
        todo = [ref for ref in claims if ref.uid not in refused]
        with self._in_call("preparing", todo):
            outcomes = await asyncio.gather(*(self._prepare_one(ref) for ref in todo))
        out = {uid: PrepareOutcome(error=err) for uid, err in refused.items()}
        out.update({ref.uid: o for ref, o in zip(todo, outcomes, strict=True)})
        return out

    async def unprepare_resources(self, claims: list[ClaimRef]) -> dict[str, str]:
        refused = self._refused("unpreparing", claims)
        todo = [ref for ref in claims if ref.uid not in refused]
        with self._in_call("unpreparing", todo):
            errors = await asyncio.gather(*(self._unprepare_one(ref) for ref in todo))
        return {**refused, **{ref.uid: err for ref, err in zip(todo, errors, strict=True)}}

    def busy(self) -> set[str]:
        """The claim UIDs of the calls in progress."""
        return self._calls["preparing"] | self._calls["unpreparing"]

    def _refused(self, what: str, claims: list[ClaimRef]) -> dict[str, str]:
        """Error entries, by claim UID, for what no call may ask: a malformed claim reference (checked before
        any request or record is made from it), a claim named twice in one call (the answer has one entry
        per UID), and a claim another call of the same kind is working on (the kubelet
        sends one call per claim at a time; a second at once is answered here and retried by the kubelet).
        An Unprepare during a Prepare of the same claim is not refused: it ends the claim and fences that
        Prepare (cdctl.plugin.prepare)."""
        seen = collections.Counter(ref.uid for ref in claims)
        out: dict[str, str] = {}
        for ref in claims:
            if ref.uid in out:
                continue  # named again: the entry says so already
            try:
                check_claim_ref(ref)
            except CdctlError as exc:
                out[ref.uid] = _entry(what, ref, str(exc))
                continue
            if seen[ref.uid] > 1:
                out[ref.uid] = _entry(
                    what, ref, f"the claim's UID appears {seen[ref.uid]} times in this call; "
                    "a call names each claim once",
                )  # fmt: skip
            elif ref.uid in self._calls[what]:
                out[ref.uid] = _entry(
                    what, ref, f"another call is already {what} this claim; refusing a second at once "
                    "(the kubelet will retry)",
                )  # fmt: skip
        if out:
            log.warning(
                f"refused claims of a call {what} devices", claims=len(out), first=next(iter(out.values()))
            )
        return out

    @contextlib.contextmanager
    def _in_call(self, what: str, claims: list[ClaimRef]) -> Iterator[None]:
        uids = {ref.uid for ref in claims}
        self._calls[what] |= uids
        try:
            yield
        finally:
            self._calls[what] -= uids
