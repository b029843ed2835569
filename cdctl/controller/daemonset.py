"""The IMEX daemon DaemonSet of a ComputeDomain (driver-managed mode) and its claim template.

`ensure` reuses a DaemonSet the domain already has in any managed namespace, else creates the daemon template
and then the DaemonSet `computedomain-daemon-<uid>` in the driver namespace (a fixed name, so only one create
can win); a DaemonSet someone deleted while the domain lives is released and recreated. Teardown deletes
the template before the DaemonSet in every namespace, then, once the rest of the domain is gone, removes
their finalizers; after a switch to a mode without a DaemonSet watch, one already gone is forgotten.
Called by cdctl.controller.computedomain.
"""

from __future__ import annotations

from typing import Any

from cdctl.controller import render
from cdctl.controller.context import ReconcileContext
from cdctl.controller.observations import KIND_DAEMON_SET
from cdctl.controller.resourceclaimtemplate import ClaimTemplates
from cdctl.controller.view import DomainState
from cdctl.domain.computedomains import FINALIZER, TARGET_DAEMON
from cdctl.domain.errors import RetriableError
from cdctl.k8s.resources import DAEMON_SETS

JsonObject = dict[str, Any]


class DaemonSets:
    def __init__(self, ctx: ReconcileContext, templates: ClaimTemplates) -> None:
        self.ctx = ctx
        self.templates = templates

    async def ensure(self, state: DomainState, cd: JsonObject) -> None:
        existing = state.of_kind(KIND_DAEMON_SET)
        terminating = [ds for ds in existing if ds.summary.get("deleting")]
        for ds in terminating:  # someone deleted it while the domain lives: let it go, then recreate it
            if FINALIZER in ds.summary.get("finalizers", []):
                await self.ctx.actions.set_finalizer(
                    state.uid, DAEMON_SETS, ds.namespace, ds.name, FINALIZER, False
                )
        if terminating:
            raise RetriableError("the deleted daemon DaemonSet is still terminating", delay=1.0)
        namespace = existing[0].namespace if existing else self.ctx.settings.namespace
        await self.templates.ensure_daemon(state, cd, namespace)
        if not existing:
            body = render.daemon_set(cd, namespace, self.ctx.settings)
            if await self.ctx.actions.create(state.uid, DAEMON_SETS, body) is None:
                name = body["metadata"]["name"]
                raise RetriableError(
                    f"DaemonSet {namespace}/{name} exists and is not this ComputeDomain's", delay=30.0
                )

    async def delete(self, state: DomainState) -> None:
        """Per namespace: the daemon template first, then the DaemonSet (both idempotent)."""
        namespaces = {ds.namespace for ds in state.of_kind(KIND_DAEMON_SET)}
        namespaces |= {t.namespace for t in self.templates.of_target(state, TARGET_DAEMON)}
        for namespace in sorted(namespaces):
            await self.templates.delete(state, TARGET_DAEMON, namespace)
            for ds in state.of_kind(KIND_DAEMON_SET):
                if ds.namespace == namespace and not ds.summary.get("deleting"):
                    await self.ctx.actions.delete(state.uid, DAEMON_SETS, ds.namespace, ds.name)

    async def remove_finalizers(self, state: DomainState) -> None:
        await self.templates.remove_finalizers(state, TARGET_DAEMON)
        for ds in state.of_kind(KIND_DAEMON_SET):
            if FINALIZER in ds.summary.get("finalizers", []):
                await self.ctx.actions.set_finalizer(
                    state.uid, DAEMON_SETS, ds.namespace, ds.name, FINALIZER, False
                )

    async def forget_gone(self, state: DomainState) -> None:
        """Without a DaemonSet watch (the mode was switched away from per-domain daemons), a DaemonSet the
        view holds from the log that the API no longer has is recorded as gone: teardown waits no more."""
        for ds in state.of_kind(KIND_DAEMON_SET):
            found = await self.ctx.actions.get(DAEMON_SETS, ds.namespace, ds.name)
            if found is None or (found.get("metadata") or {}).get("uid") != ds.uid:
                await self.ctx.actions.forget(state.uid, ds)

    def remaining(self, state: DomainState) -> list[str]:
        daemon_sets = [f"DaemonSet {d.namespace}/{d.name}" for d in state.of_kind(KIND_DAEMON_SET)]
        templates = [f"ResourceClaimTemplate {t}" for t in self.templates.remaining(state, TARGET_DAEMON)]
        return daemon_sets + templates
