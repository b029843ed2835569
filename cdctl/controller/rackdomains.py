"""Rack domains (`--rack-domains`): one ComputeDomain per rack, created when the rack's first node appears.

Three informers feed it: Nodes carrying the rack label (cluster-wide), the rack domains (ComputeDomains
labelled `cdctl.io/rack` in `--rack-domain-namespace`) and the ResourceClaims of that namespace. Each change
enqueues the rack it concerns (keyed by the rack label's value) on a keyed queue of its own; `reconcile` asks
the pure `decide` (cdctl.domain.racks) what to do and does it:

* create: POST the domain under its deterministic name. The API server refuses a second object of that name,
  so a restart, a re-list or a second replica racing this one never makes a second domain; an AlreadyExists
  answer is read back and judged (this rack's: recorded as existing; another's: a conflict).
* delete: only after a fresh listing from the API confirms that the rack has no node and that no claim of
  the domain is allocated or reserved, and with the domain's uid as precondition (a newer domain of the same
  name is never deleted). The ComputeDomain reconciler then tears it down as for any other domain.
* keep: the rack has no nodes but a workload still holds a claim: the domain stays, and a Kubernetes Event on
  it says why.

Every decision that changes or protects something (created, kept, deleted, conflict, failure) is an event in
stream `rack/<name>` of the controller's log (`cdctl events --stream 'rack/*'`); a decision is recorded when
it differs from the last one recorded for the rack (a domain kept while its claims go one by one: once). A
newly created domain then goes through the normal reconcile, since the controller's ComputeDomain informer
sees it like any other. cdctl.controller.manager runs `follow` from the start, on a standby too, and
`act` while this replica leads.
"""

from __future__ import annotations

import asyncio
from typing import Any

import structlog

from cdctl.controller.actions import typed
from cdctl.controller.context import ReconcileContext
from cdctl.controller.queue import KeyedQueue
from cdctl.domain.errors import RetriableError
from cdctl.domain.events import DomainEvent, NewEvent
from cdctl.domain.racks import (
    LABEL_RACK,
    Decision,
    ObservedDomain,
    RackDecision,
    RackDomainActionFailed,
    RackDomainConflict,
    RackDomainCreated,
    RackDomainDeleted,
    RackDomainKept,
    RackFacts,
    channel_template_name,
    claim_domain_uids,
    claims_using,
    decide,
    rack_domain_body,
    rack_domain_name,
    rack_stream,
)
from cdctl.k8s.errors import AlreadyExistsError, ConflictError, KubeApiError, NotFoundError
from cdctl.k8s.informer import Change, Informer, Observation
from cdctl.k8s.resources import COMPUTE_DOMAINS, NODES, resource_claims

log = structlog.get_logger(__name__)
JsonObject = dict[str, Any]
RACK_WORKERS = 4


def _meta(obj: JsonObject) -> dict[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def observed_domain(obj: JsonObject) -> ObservedDomain:
    meta = _meta(obj)
    rack = (meta.get("labels") or {}).get(LABEL_RACK)
    return ObservedDomain(
        str(meta.get("uid", "")), None if rack is None else str(rack), bool(meta.get("deletionTimestamp"))
    )


class RackDomains:
    def __init__(self, ctx: ReconcileContext) -> None:
        settings = ctx.settings
        self.ctx = ctx
        self.namespace = settings.rack_domain_namespace
        self.label = settings.rack_label
        self.pattern = settings.rack_domain_name_pattern
        self.claim_type = resource_claims(ctx.resource_version)
        timeout = settings.watch_timeout_s
        self.nodes = Informer(ctx.api, NODES, label_selector=self.label, watch_timeout_s=timeout)
        self.domains = Informer(
            ctx.api,
            COMPUTE_DOMAINS,
            namespace=self.namespace,
            label_selector=LABEL_RACK,
            watch_timeout_s=timeout,
        )
        self.claims = Informer(ctx.api, self.claim_type, namespace=self.namespace, watch_timeout_s=timeout)
        self.queue = KeyedQueue(self.reconcile, workers=RACK_WORKERS, describe=lambda rack: {"rack": rack})
        self.synced = asyncio.Event()
        self._members: dict[str, set[str]] = {}  # rack -> node names
        self._node_rack: dict[str, str] = {}  # node name -> rack
        self._domain_rack: dict[str, str] = {}  # domain uid -> rack
        self._told: dict[str, tuple[str, ...]] = {}  # rack -> the last decision recorded (not repeated)

    def name_of(self, rack: str) -> str:
        return rack_domain_name(rack, self.pattern)

    # ---- following the cluster -----------------------------------------------------------------------------
    async def run(self) -> None:
        """Follow nodes, rack domains and claims; decide about every rack once all three have listed."""
        async with asyncio.TaskGroup() as group:
            group.create_task(self.follow())
            group.create_task(self.act())

    async def follow(self) -> None:
        """Follow nodes, rack domains and claims until cancelled (a standby too: it writes nothing)."""
        async with asyncio.TaskGroup() as group:
            syncs = [asyncio.Event() for _ in range(3)]
            group.create_task(self._follow(self.nodes, self._node_changed, syncs[0]))
            group.create_task(self._follow(self.domains, self._domain_changed, syncs[1]))
            group.create_task(self._follow(self.claims, self._claim_changed, syncs[2]))
            for sync in syncs:
                await sync.wait()
            self.synced.set()
            log.info("rack domains: caches populated", racks=len(self._members), label=self.label)

    async def act(self) -> None:
        """Decide about every rack, once all three informers have listed, until cancelled (the leader)."""
        await self.synced.wait()
        async with asyncio.TaskGroup() as group:
            group.create_task(self.queue.run())
            group.create_task(self._sweep())

    async def _follow(self, informer: Informer, changed: Any, synced: asyncio.Event) -> None:
        async for item in informer.observe():
            if isinstance(item, Observation):
                changed(item)
            else:
                synced.set()

    async def _sweep(self) -> None:
        while True:
            for rack in {*self._members, *self._domain_rack.values()}:
                self.queue.add(rack)
            await asyncio.sleep(self.ctx.settings.cleanup_interval_s)

    def _node_changed(self, observation: Observation) -> None:
        node = observation.name
        before = self._node_rack.pop(node, None)
        if before is not None:
            self._members.get(before, set()).discard(node)
            if not self._members.get(before):
                self._members.pop(before, None)
            self.queue.add(before)
        rack = observation.labels.get(self.label, "")
        if observation.change != Change.DELETED and rack:
            self._node_rack[node] = rack
            self._members.setdefault(rack, set()).add(node)
            self.queue.add(rack)

    def _domain_changed(self, observation: Observation) -> None:
        rack = observation.labels.get(LABEL_RACK)
        if observation.change == Change.DELETED:
            rack = self._domain_rack.pop(observation.uid, rack)
        elif rack is not None:
            self._domain_rack[observation.uid] = rack
        if rack is not None:
            self.queue.add(rack)

    def _claim_changed(self, observation: Observation) -> None:
        for uid in claim_domain_uids(observation.obj):
            rack = self._domain_rack.get(uid)
            if rack is not None:
                self.queue.add(rack)

    # ---- deciding ------------------------------------------------------------------------------------------
    def facts(self, rack: str) -> RackFacts:
        """What the informers say about one rack now."""
        name = self.name_of(rack)
        domain = next(
            (observed_domain(d) for d in self.domains.known() if _meta(d).get("name") == name), None
        )
        in_use = claims_using(domain.uid, self.claims.known()) if domain is not None else ()
        return RackFacts(rack, name, tuple(sorted(self._members.get(rack, ()))), domain, in_use)

    async def reconcile(self, rack: str) -> None:
        facts = self.facts(rack)
        outcome = decide(facts)
        with structlog.contextvars.bound_contextvars(rack=rack, name=facts.name):
            if outcome.decision == Decision.CREATE:
                await self._create(facts, outcome)
            elif outcome.decision == Decision.DELETE:
                await self._delete(facts, outcome)
            elif outcome.decision == Decision.KEEP:
                await self._keep(facts, facts.claims_in_use, outcome.reason)
            elif outcome.decision == Decision.CONFLICT:
                await self._conflict(facts, facts.domain.uid if facts.domain else "", outcome.reason)
            elif outcome.decision == Decision.PRESENT:
                self._told.pop(rack, None)
            # WAIT and NOTHING: the domain's DELETED observation (or the next node) enqueues the rack again.

    async def _create(self, facts: RackFacts, outcome: RackDecision) -> None:
        body = rack_domain_body(facts.rack, self.label, self.namespace, facts.name)
        path = COMPUTE_DOMAINS.collection_path(self.namespace)
        try:
            created = await self.ctx.api.create(path, body)
        except AlreadyExistsError:
            await self._judge_existing(facts)
            return
        except KubeApiError as exc:
            await self._failed(facts, "create", exc)
            raise typed(exc, f"create rack domain {self.namespace}/{facts.name}") from exc
        uid = str(_meta(created).get("uid", ""))
        self._domain_rack[uid] = facts.rack
        await self._tell(facts, ("created", uid), self._created(facts, uid, False, outcome.reason))
        log.info("rack domain created", nodes=len(facts.nodes))
        await self.ctx.recorder.normal(self._with_kind(created), "RackDomainCreated", outcome.reason)

    def _created(self, facts: RackFacts, uid: str, existed: bool, reason: str) -> RackDomainCreated:
        template = channel_template_name(facts.name)
        nodes = list(facts.nodes)
        return RackDomainCreated(
            facts.rack, self.label, self.namespace, facts.name, template, uid, nodes, existed, reason
        )

    async def _judge_existing(self, facts: RackFacts) -> None:
        """Our create met an object of that name: this rack's (another writer won), another's, or deleting."""
        path = COMPUTE_DOMAINS.object_path(self.namespace, facts.name)
        try:
            existing = await self.ctx.api.get_or_none(path)
        except KubeApiError as exc:
            raise typed(exc, f"get ComputeDomain {self.namespace}/{facts.name}") from exc
        if existing is None:
            raise RetriableError("the ComputeDomain of that name vanished; deciding again", delay=0.2)
        domain = observed_domain(existing)
        if domain.rack != facts.rack:
            reason = decide(RackFacts(facts.rack, facts.name, facts.nodes, domain)).reason
            await self._conflict(facts, domain.uid, reason, existing)
        elif not domain.deleting:
            self._domain_rack[domain.uid] = facts.rack
            reason = "created by another writer (a second replica, or before a restart)"
            await self._tell(facts, ("created", domain.uid), self._created(facts, domain.uid, True, reason))

    async def _delete(self, facts: RackFacts, outcome: RackDecision) -> None:
        assert facts.domain is not None
        uid = facts.domain.uid
        api = self.ctx.api
        try:  # fresh from the API: an informer that lags must not cost a workload its domain
            nodes = await api.list_objects(
                NODES.collection_path(), label_selector=f"{self.label}={facts.rack}"
            )
            claims = await api.list_objects(self.claim_type.collection_path(self.namespace))
        except KubeApiError as exc:
            raise typed(exc, "list the rack's nodes and claims") from exc
        if nodes.get("items"):
            return  # a node of the rack is back; its observation enqueues the rack again
        in_use = claims_using(uid, claims.get("items") or [])
        if in_use:
            reason = decide(RackFacts(facts.rack, facts.name, (), facts.domain, in_use)).reason
            await self._keep(facts, in_use, reason)
            return
        try:
            await api.delete(COMPUTE_DOMAINS.object_path(self.namespace, facts.name), uid=uid)
        except NotFoundError:
            return
        except ConflictError:
            return  # the name belongs to a newer domain now (the uid precondition failed): decide again
        except KubeApiError as exc:
            await self._failed(facts, "delete", exc)
            raise typed(exc, f"delete rack domain {self.namespace}/{facts.name}") from exc
        event = RackDomainDeleted(facts.rack, self.namespace, facts.name, uid, outcome.reason)
        await self._tell(facts, ("deleted", uid), event)
        log.info("rack domain deleted", reason=outcome.reason)

    async def _keep(self, facts: RackFacts, claims: tuple[str, ...], reason: str) -> None:
        assert facts.domain is not None
        uid = facts.domain.uid
        event = RackDomainKept(facts.rack, self.namespace, facts.name, uid, list(claims), reason)
        if not await self._tell(facts, ("kept", uid), event):
            return  # told already; claims going one by one are no news until the last one goes
        log.info("rack domain kept", reason=reason)
        obj = self._known_domain(facts.name)
        if obj is not None:
            await self.ctx.recorder.warn(obj, "RackDomainInUse", reason)

    async def _conflict(self, facts: RackFacts, uid: str, reason: str, obj: JsonObject | None = None) -> None:
        event = RackDomainConflict(facts.rack, self.namespace, facts.name, uid, reason)
        if await self._tell(facts, ("conflict", uid), event):
            log.warning("rack domain name taken", reason=reason)
        obj = obj if obj is not None else self._known_domain(facts.name)
        if obj is not None:
            await self.ctx.recorder.warn(self._with_kind(obj), "RackDomainNameTaken", reason)

    async def _failed(self, facts: RackFacts, action: str, exc: KubeApiError) -> None:
        event = RackDomainActionFailed(
            facts.rack, self.namespace, facts.name, action, str(exc), exc.retriable
        )
        await self._record(facts.name, event)
        log.warning(f"rack domain {action} failed", error=str(exc))

    # ---- recording -----------------------------------------------------------------------------------------
    async def _tell(self, facts: RackFacts, what: tuple[str, ...], event: DomainEvent) -> bool:
        """Record `event` unless the same decision was the last one recorded for this rack."""
        if self._told.get(facts.rack) == what:
            return False
        self._told[facts.rack] = what
        await self._record(facts.name, event)
        return True

    async def _record(self, name: str, event: DomainEvent) -> None:
        journal = self.ctx.journal
        await journal.store.append(rack_stream(name), [NewEvent.of(event, actor=journal.actor)])

    def _known_domain(self, name: str) -> JsonObject | None:
        for obj in self.domains.known():
            if _meta(obj).get("name") == name:
                return self._with_kind(obj)
        return None

    @staticmethod
    def _with_kind(obj: JsonObject) -> JsonObject:
        return {"apiVersion": COMPUTE_DOMAINS.api_version, "kind": COMPUTE_DOMAINS.kind, **obj}
