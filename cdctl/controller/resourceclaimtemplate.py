"""ResourceClaimTemplates of a ComputeDomain: the workload template users reference, the daemons' template.

`ensure_workload` creates the channel template named by the domain's spec unless the domain's own exists. A
template of that name is the domain's only if it is what the controller would create (`made_as`: the domain's
labels and the same spec, API server defaults aside), so a template a tenant made first, even one carrying
the domain's labels, never passes for it: that is a conflict the user must resolve (the create recorded as
failed, a Kubernetes Event on the ComputeDomain, which the caller makes NotReady with the reason, then a slow
retry). `ensure_daemon` creates the daemon template beside the DaemonSet, under the same test.
Teardown: `delete`, `remove_finalizers` and `remaining`, per target (Workload or Daemon). Called by
cdctl.controller.computedomain and cdctl.controller.daemonset.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from cdctl.controller import render
from cdctl.controller.context import ReconcileContext
from cdctl.controller.observations import KIND_CLAIM_TEMPLATE
from cdctl.controller.view import DomainState
from cdctl.domain.computedomains import FINALIZER, TARGET_DAEMON, TARGET_WORKLOAD
from cdctl.domain.computedomains import DomainObjectObserved as Observed
from cdctl.domain.errors import RetriableError

JsonObject = dict[str, Any]
CONFLICT_RETRY_S = 30.0
CONFLICT_REASON = "ResourceClaimTemplateConflict"
# Fields the API server fills in when a request leaves them out (resource.k8s.io defaulting): a template
# that differs from ours only by these is still ours.
API_DEFAULTS: dict[str, Any] = {"allocationMode": "ExactCount", "count": 1}
_ABSENT = object()


def _neutral(key: str, value: Any) -> bool:
    """Whether a field present on one side only changes nothing: absent, empty (a real kube-apiserver
    answers every template with `spec.metadata: {}`, and drops empty lists we send), or a default the API
    server fills in. An empty value means what its absence means, so no server default can make a template
    we created look foreign, and no tenant can smuggle meaning through one."""
    if value is _ABSENT or value is None or (isinstance(value, dict | list | str) and not value):
        return True
    return key in API_DEFAULTS and bool(API_DEFAULTS[key] == value)


def _same_intent(want: Any, got: Any) -> bool:
    if isinstance(want, dict):
        if not isinstance(got, dict):
            return False
        for key in want.keys() | got.keys():
            mine, theirs = want.get(key, _ABSENT), got.get(key, _ABSENT)
            if mine is _ABSENT or theirs is _ABSENT:
                if not (_neutral(key, mine) and _neutral(key, theirs)):
                    return False
            elif not _same_intent(mine, theirs):
                return False
        return True
    if isinstance(want, list):
        return isinstance(got, list) and len(want) == len(got) and all(map(_same_intent, want, got))
    return bool(want == got)


def made_as(desired: JsonObject) -> Callable[[JsonObject], bool]:
    """Whether a found template is the one `desired` describes: the same domain and target labels and the
    same spec (fields the API server defaults aside). Labels alone prove nothing: anyone who may create a
    template in the namespace may copy them."""
    want_labels = desired["metadata"]["labels"]

    def ours(found: JsonObject) -> bool:
        labels = (found.get("metadata") or {}).get("labels") or {}
        if any(labels.get(k) != v for k, v in want_labels.items()):
            return False
        return _same_intent(desired.get("spec"), found.get("spec"))

    return ours


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
        desired = render.workload_claim_template(
            cd, self.ctx.resource_version, channel_isolation=self.ctx.settings.channel_isolation
        )
        await self._ensure(state, cd, desired, TARGET_WORKLOAD)

    async def ensure_daemon(self, state: DomainState, cd: JsonObject, namespace: str) -> None:
        if await self.release_deleted(state, TARGET_DAEMON, namespace):
            raise RetriableError("the deleted daemon ResourceClaimTemplate is still terminating", delay=1.0)
        desired = render.daemon_claim_template(cd, namespace, self.ctx.resource_version)
        await self._ensure(state, cd, desired, TARGET_DAEMON)

    async def _ensure(self, state: DomainState, cd: JsonObject, desired: JsonObject, target: str) -> None:
        """The domain's template `desired` exists, or a conflict is reported and raised."""
        namespace, name = desired["metadata"]["namespace"], desired["metadata"]["name"]
        ours = made_as(desired)
        known = any((t.namespace, t.name) == (namespace, name) for t in self.of_target(state, target))
        if known:
            cached = self.ctx.journal.cached(self.ctx.claim_templates, namespace, name)
            if cached is None or ours(cached):
                return
            found_uid = (cached.get("metadata") or {}).get("uid", "?")
            error = f"labelled for this ComputeDomain but not what it would create (uid {found_uid})"
            await self.ctx.actions.refused(
                state.uid, "check", self.ctx.claim_templates, namespace, name, error, True
            )
        elif await self.ctx.actions.create(state.uid, self.ctx.claim_templates, desired, ours) is not None:
            return
        fix = (
            "choose another spec.channel.resourceClaimTemplate.name" if target == TARGET_WORKLOAD else "retry"
        )
        message = (
            f"ResourceClaimTemplate {namespace}/{name} already exists and was not created for this "
            f"ComputeDomain; delete it or {fix}"
        )
        await self.ctx.actions.warn(state.uid, cd, CONFLICT_REASON, message)
        raise ClaimTemplateConflict(message, delay=CONFLICT_RETRY_S)

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
