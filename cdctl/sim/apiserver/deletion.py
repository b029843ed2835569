"""Deletion in the simulated API server: finalizers, graceful pod deletion, garbage collection, namespaces.

The delete half of cdctl.sim.apiserver.store's ObjectStore (a base class of it; its methods run on the store).
A pod bound to a node is deleted as a real v1.36 server deletes it (the pod strategy's CheckGracefulDelete and
the registry's BeforeDelete): it is marked with `deletionTimestamp` (now + the grace period) and
`deletionGracePeriodSeconds`, from the DeleteOptions' gracePeriodSeconds or else the pod's
`terminationGracePeriodSeconds`, and stays until its kubelet, its containers stopped, deletes it with a grace
period of 0. A pod on no node or in a terminal phase, or a grace period of 0, goes at once (finalizers
permitting). A second delete may only shorten the grace period; a longer one changes nothing. Other kinds are
deleted at once, or marked while finalizers remain. Deleting an owner deletes its dependents left without a
live owner (background propagation) or unlinks them (`Orphan`); deleting a namespace deletes what it holds and
removes the namespace once it is empty.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Final

from cdctl.sim.apiserver import admission
from cdctl.sim.apiserver import objectmeta as meta
from cdctl.sim.apiserver.errors import Conflict
from cdctl.sim.apiserver.identity import UserInfo
from cdctl.sim.apiserver.objectmeta import clone
from cdctl.sim.apiserver.resources import ResourceType

if TYPE_CHECKING:
    from cdctl.sim.apiserver.store import ObjectFilter

CRD_KEY = admission.CRD_KEY
NAMESPACE_KEY = admission.NAMESPACE_KEY
PODS_KEY = ("", "pods")
TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})
PENDING: Final = "pending"  # a graceful deletion under way that a delete does not shorten: nothing changes


def pod_grace_period(pod: Mapping[str, Any], requested: int | None) -> int:
    """The pod strategy's CheckGracefulDelete: the grace period a delete of `pod` gets."""
    spec = pod.get("spec") or {}
    period = requested if requested is not None else int(spec.get("terminationGracePeriodSeconds") or 0)
    if not spec.get("nodeName") or (pod.get("status") or {}).get("phase") in TERMINAL_PHASES:
        return 0  # nothing runs it, or nothing runs any more: no one to wait for
    return 1 if period < 0 else period


def graceful_step(
    pod: Mapping[str, Any], requested: int | None, now: datetime
) -> dict[str, Any] | str | None:
    """What a delete does to a pod (the registry's BeforeDelete): the pod marked for its grace period (a
    dict), PENDING (a graceful deletion under way stays as it is), or None (delete it now, or mark it for its
    finalizers)."""
    metadata = pod["metadata"]
    if metadata.get("deletionTimestamp"):
        current = metadata.get("deletionGracePeriodSeconds")
        if not current:
            return None
        if requested is None or max(requested, 0) >= current:
            return PENDING  # only a shorter grace period may be given
        period = max(requested, 0)
        if period == 0 and not metadata.get("finalizers"):
            return None  # shortened to nothing: deleted now
        started = _parse(metadata["deletionTimestamp"]) - timedelta(seconds=current)
        return _marked(pod, period, started + timedelta(seconds=period), bump=False)
    period = pod_grace_period(pod, requested)
    if period == 0:
        return None
    return _marked(pod, period, now + timedelta(seconds=period), bump=True)


def _marked(pod: Mapping[str, Any], period: int, deadline: datetime, *, bump: bool) -> dict[str, Any]:
    marked = clone(dict(pod))
    marked["metadata"]["deletionTimestamp"] = deadline.strftime("%Y-%m-%dT%H:%M:%SZ")
    marked["metadata"]["deletionGracePeriodSeconds"] = period
    if bump and "generation" in marked["metadata"]:  # the registry counts a graceful deletion as a change
        marked["metadata"]["generation"] = int(marked["metadata"]["generation"]) + 1
    return marked


def _parse(stamp: str) -> datetime:
    return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)


class Deletion:
    """The delete methods of ObjectStore."""

    if TYPE_CHECKING:  # what they use of the store, which defines these
        _objects: dict[tuple[str, str], dict[tuple[str, str], dict[str, Any]]]
        _dependents_of: dict[str, set[tuple[tuple[str, str], str, str]]]

        def type_of(self, group: str, plural: str) -> ResourceType: ...
        def exists_uid(self, uid: str) -> bool: ...
        def _bucket(self, resource_type: ResourceType) -> dict[tuple[str, str], dict[str, Any]]: ...
        def _find(self, resource_type: ResourceType, namespace: str, name: str) -> dict[str, Any]: ...
        def _unserve_crd(self, crd: dict[str, Any]) -> None: ...

        _commit: Callable[[ResourceType, str, dict[str, Any], dict[str, Any] | None], dict[str, Any]]

        def list_objects(
            self,
            resource_type: ResourceType,
            namespace: str | None = None,
            matches: ObjectFilter | None = None,
        ) -> tuple[list[dict[str, Any]], str]: ...
        def update(
            self, resource_type: ResourceType, namespace: str, name: str, body: dict[str, Any]
        ) -> dict[str, Any]: ...

        _admit_policies: Callable[..., None]  # policies.AdmissionPolicies via the store

    def delete(
        self,
        resource_type: ResourceType,
        namespace: str,
        name: str,
        *,
        propagation: str | None = None,
        preconditions: Mapping[str, Any] | None = None,
        dry_run: bool = False,
        user: UserInfo | None = None,
        served: ResourceType | None = None,
        grace_period_s: int | None = None,
    ) -> dict[str, Any]:
        """Delete now, or mark with deletionTimestamp while finalizers remain or, for a pod on a node, for its
        grace period (`grace_period_s`, the DeleteOptions' gracePeriodSeconds; None: the pod's own); returns
        the object."""
        obj = self._find(resource_type, namespace, name)
        for field, key in (("uid", "uid"), ("resourceVersion", "resourceVersion")):
            wanted = (preconditions or {}).get(field)
            if wanted and wanted != obj["metadata"].get(key):
                raise Conflict(
                    f"Precondition failed: {field} in precondition: {wanted}, {field} in object meta: "
                    f"{obj['metadata'].get(key)}"
                )
        self._admit_policies(
            "DELETE", resource_type, None, obj, subresource=None, user=user, dry_run=dry_run, served=served
        )
        if dry_run:
            return clone(obj)
        if resource_type.storage_key == NAMESPACE_KEY:
            return self._terminate_namespace(resource_type, obj)
        if propagation == "Orphan":
            self._orphan_dependents(obj["metadata"]["uid"])
        if resource_type.storage_key == PODS_KEY:
            step = graceful_step(obj, grace_period_s, datetime.now(UTC))
            if step is PENDING:
                return clone(obj)
            if isinstance(step, dict):
                return self._commit(resource_type, "MODIFIED", step, obj)
        if obj["metadata"].get("finalizers"):
            if obj["metadata"].get("deletionTimestamp"):
                return clone(obj)
            marked = clone(obj)
            marked["metadata"]["deletionTimestamp"] = meta.now_rfc3339()
            marked["metadata"]["deletionGracePeriodSeconds"] = 0
            if "generation" in marked["metadata"]:  # the registry counts a graceful deletion as a change
                marked["metadata"]["generation"] = int(marked["metadata"]["generation"]) + 1
            return self._commit(resource_type, "MODIFIED", marked, obj)
        return self._remove(resource_type, obj)

    def delete_collection(
        self,
        resource_type: ResourceType,
        namespace: str | None,
        matches: ObjectFilter | None = None,
        *,
        user: UserInfo | None = None,
        served: ResourceType | None = None,
    ) -> list[dict[str, Any]]:
        items, _ = self.list_objects(resource_type, namespace, matches)
        deleted = []
        for item in items:
            item_meta = item["metadata"]
            if self.exists_uid(item_meta["uid"]):
                deleted.append(
                    self.delete(
                        resource_type,
                        item_meta.get("namespace", ""),
                        item_meta["name"],
                        user=user,
                        served=served,
                    )
                )
        return deleted

    def _remove(self, resource_type: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
        current = self._bucket(resource_type).get(
            (obj["metadata"].get("namespace", ""), obj["metadata"]["name"])
        )
        if current is None or current["metadata"]["uid"] != obj["metadata"]["uid"]:
            return clone(obj)
        removed = self._commit(resource_type, "DELETED", clone(current), current)
        if resource_type.storage_key == CRD_KEY:
            self._unserve_crd(removed)
        self._collect_dependents(removed["metadata"]["uid"])
        namespace = removed["metadata"].get("namespace")
        if namespace:
            self._finish_namespace_if_empty(namespace)
        return removed

    def _dependents(self, owner_uid: str) -> list[tuple[ResourceType, dict[str, Any]]]:
        found = []
        for storage_key, namespace, name in sorted(self._dependents_of.get(owner_uid, ())):
            obj = self._objects.get(storage_key, {}).get((namespace, name))
            refs = (obj or {}).get("metadata", {}).get("ownerReferences") or []
            if obj is not None and any(ref.get("uid") == owner_uid for ref in refs):
                found.append((self.type_of(*storage_key), obj))
        return found

    def _collect_dependents(self, owner_uid: str) -> None:
        """Background cascading deletion: delete dependents left without any live owner, unlink the others."""
        for resource_type, dependent in self._dependents(owner_uid):
            refs = dependent["metadata"].get("ownerReferences") or []
            live = [ref for ref in refs if self.exists_uid(str(ref.get("uid")))]
            namespace, name = dependent["metadata"].get("namespace", ""), dependent["metadata"]["name"]
            if not live:
                self.delete(resource_type, namespace, name)
            elif len(live) != len(refs):
                unlinked = clone(dependent)
                unlinked["metadata"]["ownerReferences"] = live
                self.update(resource_type, namespace, name, unlinked)

    def _orphan_dependents(self, owner_uid: str) -> None:
        for resource_type, dependent in self._dependents(owner_uid):
            unlinked = clone(dependent)
            refs = unlinked["metadata"].get("ownerReferences") or []
            unlinked["metadata"]["ownerReferences"] = [r for r in refs if r.get("uid") != owner_uid]
            metadata = unlinked["metadata"]
            self.update(resource_type, metadata.get("namespace", ""), metadata["name"], unlinked)

    def _terminate_namespace(self, resource_type: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
        name = obj["metadata"]["name"]
        result = clone(obj)
        if not obj["metadata"].get("deletionTimestamp"):
            marked = clone(obj)
            marked["metadata"]["deletionTimestamp"] = meta.now_rfc3339()
            marked.setdefault("status", {})["phase"] = "Terminating"
            result = self._commit(resource_type, "MODIFIED", marked, obj)
        for storage_key in list(self._objects):
            contained = self.type_of(*storage_key)
            if contained.namespaced:
                self.delete_collection(contained, name)
        self._finish_namespace_if_empty(name)
        return result

    def _finish_namespace_if_empty(self, namespace: str) -> None:
        namespaces = self.type_of(*NAMESPACE_KEY)
        found = self._bucket(namespaces).get(("", namespace))
        if found is None or not found["metadata"].get("deletionTimestamp"):
            return
        if any(
            key[0] == namespace for k, bucket in self._objects.items() if k != NAMESPACE_KEY for key in bucket
        ):
            return
        if not found["metadata"].get("finalizers"):
            self._remove(namespaces, found)
