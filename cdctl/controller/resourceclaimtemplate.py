"""ResourceClaimTemplates of a ComputeDomain: the workload template users reference, the daemons' template.

`ensure_workload` creates the channel template named by the domain's spec unless one labelled for the domain
exists; a template of that name made by someone else is a conflict the user must resolve (a Kubernetes Event
on the ComputeDomain, then a slow retry). `ensure_daemon` creates the daemon template beside the DaemonSet.
Teardown: `delete`, `remove_finalizers` and `remaining`, per target (Workload or Daemon). Called by
cdctl.controller.computedomain and cdctl.controller.daemonset.
"""

from __future__ import annotations

from typing import Any

from cdctl.controller import render
from cdctl.controller.context import ReconcileContext
from cdctl.controller.observations import KIND_CLAIM_TEMPLATE
from cdctl.controller.view import DomainState
from cdctl.domain.computedomains import FINALIZER, LABEL_COMPUTE_DOMAIN, TARGET_DAEMON, TARGET_WORKLOAD
from cdctl.domain.computedomains import DomainObjectObserved as Observed
from cdctl.domain.errors import RetriableError
from cdctl.k8s.informer import Change

JsonObject = dict[str, Any]
CONFLICT_RETRY_S = 30.0


class ClaimTemplateConflict(RetriableError):
    """A template with the domain's template name exists and was not made for this domain."""


class ClaimTemplates:
    def __init__(self, ctx: ReconcileContext) -> None:
        self.ctx = ctx

    def of_target(self, state: DomainState, target: str) -> list[Observed]:
        return [t for t in state.of_kind(KIND_CLAIM_TEMPLATE) if t.summary.get("target") == target]

    async def release_deleted(self, state: DomainState, target: str, namespace: str | None = None) -> bool:
        """For a live domain: let go of templates someone deleted, so they can be recreated.

        True when one was still terminating (the caller waits for it to disappear before recreating it).
        """
        waiting = False
        for template in self.of_target(state, target):
            if not template.summary.get("deleting") or (
                namespace is not None and template.namespace != namespace
            ):
                continue
            waiting = True
            if FINALIZER in template.summary.get("finalizers", []):
                await self.ctx.actions.set_finalizer(
                    state.uid, self.ctx.claim_templates, template.namespace, template.name, FINALIZER, False
                )
        return waiting

    async def ensure_workload(self, state: DomainState, cd: JsonObject) -> None:
        if await self.release_deleted(state, TARGET_WORKLOAD):
            raise RetriableError("the deleted workload ResourceClaimTemplate is still terminating", delay=1.0)
        if self.of_target(state, TARGET_WORKLOAD):
            return
        desired = render.workload_claim_template(
            cd, self.ctx.resource_version, channel_isolation=self.ctx.settings.channel_isolation
        )
        if await self.ctx.actions.create(state.uid, self.ctx.claim_templates, desired) is not None:
            return
        namespace, name = desired["metadata"]["namespace"], desired["metadata"]["name"]
        existing = await self.ctx.actions.get(self.ctx.claim_templates, namespace, name)
        if existing is None:
            raise RetriableError(
                f"ResourceClaimTemplate {namespace}/{name} vanished during create", delay=0.0
            )
        if (existing.get("metadata", {}).get("labels") or {}).get(LABEL_COMPUTE_DOMAIN) == state.uid:
            await self.ctx.journal.observe_written(self.ctx.claim_templates, existing, Change.MODIFIED)
            return
        message = (
            f"ResourceClaimTemplate {namespace}/{name} already exists and was not created for this "
            "ComputeDomain; delete it or choose another spec.channel.resourceClaimTemplate.name"
        )
        await self.ctx.actions.warn(state.uid, cd, "ResourceClaimTemplateConflict", message)
        raise ClaimTemplateConflict(message, delay=CONFLICT_RETRY_S)

    async def ensure_daemon(self, state: DomainState, cd: JsonObject, namespace: str) -> None:
        if await self.release_deleted(state, TARGET_DAEMON, namespace):
            raise RetriableError("the deleted daemon ResourceClaimTemplate is still terminating", delay=1.0)
        if any(t.namespace == namespace for t in self.of_target(state, TARGET_DAEMON)):
            return
        desired = render.daemon_claim_template(cd, namespace, self.ctx.resource_version)
        await self.ctx.actions.create(state.uid, self.ctx.claim_templates, desired)

    async def delete(self, state: DomainState, target: str, namespace: str | None = None) -> None:
        """Delete the domain's templates of `target` (in `namespace` only, when given) not yet terminating."""
        for template in self.of_target(state, target):
            if template.summary.get("deleting") or (
                namespace is not None and template.namespace != namespace
            ):
                continue
            await self.ctx.actions.delete(
                state.uid, self.ctx.claim_templates, template.namespace, template.name
            )

    async def remove_finalizers(self, state: DomainState, target: str) -> None:
        for template in self.of_target(state, target):
            if not template.summary.get("deleting"):
                raise RetriableError(
                    f"attempting to remove finalizer before ResourceClaimTemplate {template.namespace}/"
                    f"{template.name} marked for deletion",
                    delay=0.0,
                )
            if FINALIZER in template.summary.get("finalizers", []):
                await self.ctx.actions.set_finalizer(
                    state.uid, self.ctx.claim_templates, template.namespace, template.name, FINALIZER, False
                )

    def remaining(self, state: DomainState, target: str) -> list[str]:
        return [f"{t.namespace}/{t.name}" for t in self.of_target(state, target)]
