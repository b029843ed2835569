"""The simulated API server's object store: every object, one global resourceVersion, and the write rules.

Objects are kept per (group, resource) in their storage version. Every write bumps the global resourceVersion
and publishes a `StoredEvent` to the watch hub. The write rules are the ones our components depend on:
generateName, 409 on existing names and stale resourceVersions, the status subresource split, generation
bumps, finalizers and deletionTimestamp, ownerReference garbage collection, namespace termination, and CRDs
(serving, defaults, validation rules). Called by the HTTP handlers (cdctl.sim.apiserver.handlers) and, in
process, by the stand-in controllers (claims, allocator, daemonsets, kubelet). Every create, update, patch and
delete passes the stored ValidatingAdmissionPolicies (cdctl.sim.apiserver.policies) as the writing `user`, in
the version it was `served` in (the HTTP handlers pass the request's user and version; in-process writers are
the admin, or the identity of the controller they stand in for, writing the storage version).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from cdctl.sim.apiserver import admission, defaulting
from cdctl.sim.apiserver import crd as crds
from cdctl.sim.apiserver import objectmeta as meta
from cdctl.sim.apiserver.deletion import PODS_KEY, Deletion
from cdctl.sim.apiserver.errors import (
    AlreadyExists,
    BadRequest,
    Conflict,
    Forbidden,
    Invalid,
    NotFound,
    not_found,
)
from cdctl.sim.apiserver.features import FeatureGates, drop_disabled_fields
from cdctl.sim.apiserver.identity import ADMIN, UserInfo
from cdctl.sim.apiserver.objectmeta import clone
from cdctl.sim.apiserver.patch import APPLY_PATCH, apply_patch
from cdctl.sim.apiserver.policies import BINDING_KEY, POLICY_KEY, AdmissionPolicies, AdmissionRequest
from cdctl.sim.apiserver.resources import ResourceRegistry, ResourceType, builtin_registry
from cdctl.sim.apiserver.watch import StoredEvent, Watcher, WatchHub

ObjectFilter = Callable[[Mapping[str, Any]], bool]
CRD_KEY = admission.CRD_KEY
NAMESPACE_KEY = admission.NAMESPACE_KEY
DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")


class ObjectStore(Deletion):
    """All objects of the simulated cluster; its methods are synchronous, so each write is atomic."""

    def __init__(
        self, registry: ResourceRegistry | None = None, history_window: int = 1000, seed: int = 0
    ) -> None:
        self.registry = registry or builtin_registry()
        self.hub = WatchHub(history_window)
        self._objects: dict[tuple[str, str], dict[tuple[str, str], dict[str, Any]]] = {}
        self._uids: dict[str, tuple[tuple[str, str], str, str]] = {}
        self._pods_by_node: dict[str, set[tuple[str, str]]] = {}  # spec.nodeName -> (namespace, name)
        # owner uid -> (storage key, namespace, name) of the objects whose ownerReferences name it: what the
        # garbage collector's graph answers, so a deletion does not pass over every object of the cluster
        self._dependents_of: dict[str, set[tuple[tuple[str, str], str, str]]] = {}
        self._revision = 0
        self._rng = random.Random(seed)
        self.policies = AdmissionPolicies(registry=self.registry)
        self.features = FeatureGates()  # the server's feature gates (cdctl.sim.apiserver.features)
        for namespace in DEFAULT_NAMESPACES:
            self.create(self.type_of(*NAMESPACE_KEY), "", {"metadata": {"name": namespace}})

    # ---- reads ---------------------------------------------------------------------------------------------
    @property
    def resource_version(self) -> str:
        return str(self._revision)

    def type_of(self, group: str, plural: str) -> ResourceType:
        """The storage-version type of a group and resource (what the store's objects are shaped as)."""
        return self.registry.storage_type(group, plural)

    def _bucket(self, resource_type: ResourceType) -> dict[tuple[str, str], dict[str, Any]]:
        return self._objects.setdefault(resource_type.storage_key, {})

    def _find(self, resource_type: ResourceType, namespace: str, name: str) -> dict[str, Any]:
        found = self._bucket(resource_type).get((namespace if resource_type.namespaced else "", name))
        if found is None:
            raise not_found(resource_type.plural, name, resource_type.group)
        return found

    def get(self, resource_type: ResourceType, namespace: str, name: str) -> dict[str, Any]:
        return clone(self._find(resource_type, namespace, name))

    def peek(self, resource_type: ResourceType, namespace: str, name: str) -> dict[str, Any]:
        """The stored object itself, for in-process readers that only read it (see `list_objects`)."""
        return self._find(resource_type, namespace, name)

    def list_objects(
        self,
        resource_type: ResourceType,
        namespace: str | None = None,
        matches: ObjectFilter | None = None,
        *,
        copies: bool = True,
    ) -> tuple[list[dict[str, Any]], str]:
        """Matching objects sorted by namespace and name, and the list's resourceVersion.

        `copies=False` hands out the stored objects themselves, for in-process readers that only read (the
        stand-in controllers pass over every object on every change; copying them all was most of the
        simulator's CPU on a big rack). The store never changes a stored object in place (a write stores a
        new one), so such a list stays a consistent snapshot; a reader that wants to change an object must
        copy it (or `get` it) first."""
        bucket = self._bucket(resource_type)
        items = [
            obj if not copies else clone(obj)
            for (ns, _), obj in sorted(bucket.items())
            if (namespace is None or ns == namespace) and (matches is None or matches(obj))
        ]
        return items, self.resource_version

    def pods_on_node(self, node: str) -> list[dict[str, Any]]:
        """The pods bound to `node` (spec.nodeName), sorted as a list is: the kubelet's field-selected view,
        from an index instead of a pass over every pod of the cluster. They are the stored objects themselves,
        as `list_objects(copies=False)` hands out (the simulated kubelets only read them, on every pass)."""
        pods = self._objects.get(PODS_KEY, {})
        return [pods[key] for key in sorted(self._pods_by_node.get(node, ())) if key in pods]

    def _index_pod(
        self, key: tuple[str, str], obj: dict[str, Any] | None, previous: dict[str, Any] | None
    ) -> None:
        before = ((previous or {}).get("spec") or {}).get("nodeName")
        after = ((obj or {}).get("spec") or {}).get("nodeName")
        if before and before != after:
            self._pods_by_node.get(before, set()).discard(key)
        if after:
            self._pods_by_node.setdefault(after, set()).add(key)

    def _index_owners(
        self,
        storage_key: tuple[str, str],
        key: tuple[str, str],
        obj: dict[str, Any] | None,
        previous: dict[str, Any] | None,
    ) -> None:
        def owners(item: dict[str, Any] | None) -> set[str]:
            refs = (item or {}).get("metadata", {}).get("ownerReferences") or []
            return {str(ref.get("uid")) for ref in refs if ref.get("uid")}

        entry = (storage_key, key[0], key[1])
        before, after = owners(previous), owners(obj)
        for uid in before - after:
            dependents = self._dependents_of.get(uid)
            if dependents is not None:
                dependents.discard(entry)
                if not dependents:
                    del self._dependents_of[uid]
        for uid in after - before:
            self._dependents_of.setdefault(uid, set()).add(entry)

    def exists_name(self, resource_type: ResourceType, namespace: str, name: str) -> bool:
        return (namespace if resource_type.namespaced else "", name) in self._bucket(resource_type)

    def exists_uid(self, uid: str) -> bool:
        return uid in self._uids

    def peek_uid(self, uid: str) -> dict[str, Any] | None:
        """The stored object with this uid, not copied (read only), or None."""
        found = self._uids.get(uid)
        if found is None:
            return None
        storage_key, namespace, name = found
        return self._objects.get(storage_key, {}).get((namespace, name))

    def watch(
        self,
        resource_type: ResourceType | None,
        namespace: str | None = None,
        matches: ObjectFilter | None = None,
        since: int | None = None,
        *,
        droppable: bool = True,
    ) -> Watcher:
        key = resource_type.storage_key if resource_type else None
        return self.hub.open(key, namespace, matches, since, droppable=droppable)

    # ---- write plumbing ------------------------------------------------------------------------------------
    def _commit(
        self,
        resource_type: ResourceType,
        event_type: str,
        obj: dict[str, Any],
        previous: dict[str, Any] | None,
    ) -> dict[str, Any]:
        self._revision += 1
        obj["metadata"]["resourceVersion"] = str(self._revision)
        namespace = obj["metadata"].get("namespace", "")
        key = (namespace, obj["metadata"]["name"])
        if event_type == "DELETED":
            self._bucket(resource_type).pop(key, None)
            self._uids.pop(obj["metadata"]["uid"], None)
        else:
            self._bucket(resource_type)[key] = obj
            self._uids[obj["metadata"]["uid"]] = (resource_type.storage_key, namespace, key[1])
        if resource_type.storage_key == PODS_KEY:
            self._index_pod(key, None if event_type == "DELETED" else obj, previous or obj)
        self._index_owners(resource_type.storage_key, key, None if event_type == "DELETED" else obj, previous)
        if resource_type.storage_key in (POLICY_KEY, BINDING_KEY):
            self.policies.observe(resource_type.storage_key, obj, deleted=event_type == "DELETED")
        self.hub.publish(
            StoredEvent(
                self._revision,
                event_type,
                resource_type.storage_key,
                namespace,
                obj,  # the stored objects themselves: never changed in place, so watchers share them
                previous,
            )
        )
        return clone(obj)

    def _check_namespace(self, resource_type: ResourceType, namespace: str, creating: bool) -> None:
        if not resource_type.namespaced:
            return
        if not namespace:
            raise BadRequest("the server could not find the requested resource: namespace is required")
        found = self._bucket(self.type_of(*NAMESPACE_KEY)).get(("", namespace))
        if found is None:
            raise not_found("namespaces", namespace)
        if creating and found["metadata"].get("deletionTimestamp"):
            raise Forbidden(
                f'{resource_type.plural} "{namespace}" is forbidden: unable to create new content in '
                f"namespace {namespace} because it is being terminated"
            )

    # ---- create / update / patch ---------------------------------------------------------------------------
    def _admit_policies(
        self,
        operation: str,
        resource_type: ResourceType,
        new: dict[str, Any] | None,
        old: dict[str, Any] | None,
        *,
        subresource: str | None,
        user: UserInfo | None,
        dry_run: bool,
        served: ResourceType | None,
        name: str | None = None,
    ) -> None:
        """The ValidatingAdmissionPolicies' say on one write (raises their 4xx), seen in the `served` version
        (the storage version when None); `name` is the request's when it differs from the object's (a create
        by generateName). A policy or binding being written must compile first."""
        current = new if new is not None else old
        assert current is not None
        if new is not None:
            self.policies.check_definition(resource_type.storage_key, new)
        if not self.policies.bindings:
            return
        metadata = current["metadata"]
        request = AdmissionRequest(
            operation,
            resource_type,
            str(metadata.get("namespace", "")),
            str(metadata.get("name", "")) if name is None else name,
            new,
            old,
            subresource or "",
            user or ADMIN,
            dry_run,
        )
        if served is not None and served.version != resource_type.version:
            request = request.in_version(served)
            request = replace(request, requested=None)
        self.policies.admit(request)

    def create(
        self,
        resource_type: ResourceType,
        namespace: str,
        body: dict[str, Any],
        *,
        dry_run: bool = False,
        user: UserInfo | None = None,
        served: ResourceType | None = None,
        uid: str | None = None,
        strict: bool = False,
    ) -> dict[str, Any]:
        """Create `body`. `uid` is for in-process writers that restore an object a real server made (as from
        a backup of etcd): it keeps that uid instead of a new one."""
        if not isinstance(body, dict):
            raise BadRequest("the request body must be an object")
        if uid is not None and uid in self._uids:
            raise AlreadyExists(f"an object with uid {uid} already exists")
        obj = clone(body)
        metadata = meta.metadata_of(obj)
        namespace = namespace if resource_type.namespaced else ""
        body_namespace = metadata.get("namespace")
        if resource_type.namespaced and body_namespace and namespace and body_namespace != namespace:
            raise BadRequest(
                "the namespace of the provided object does not match the namespace sent on the request"
            )
        namespace = namespace or (body_namespace or "")
        self._check_namespace(resource_type, namespace, creating=True)
        if resource_type.storage_key == PODS_KEY:
            admission.admit_service_account(namespace, obj, self._service_account_exists)
        requested_name = str(metadata.get("name") or "")
        if not metadata.get("name") and metadata.get("generateName"):
            metadata["name"] = meta.generated_name(metadata["generateName"], self._rng)
        name = metadata.get("name", "")
        meta.validate_name(resource_type.kind, name)
        if (namespace, name) in self._bucket(resource_type):
            raise AlreadyExists(
                f'{resource_type.plural}{"." + resource_type.group if resource_type.group else ""} "{name}" '
                "already exists",
                details={"name": name, "group": resource_type.group, "kind": resource_type.plural},
            )
        for field in meta.SYSTEM_FIELDS:
            metadata.pop(field, None)
        metadata.pop("managedFields", None)
        if resource_type.namespaced:
            metadata["namespace"] = namespace
        else:
            metadata.pop("namespace", None)
        metadata.update(uid=uid or meta.new_uid(), creationTimestamp=meta.now_rfc3339())
        if defaulting.tracks_generation(resource_type.storage_key, resource_type.builtin):
            metadata["generation"] = 1
        obj["apiVersion"], obj["kind"] = resource_type.api_version, resource_type.kind
        if resource_type.status_subresource and resource_type.storage_key != CRD_KEY:
            obj.pop("status", None)
        admission.apply_create_defaults(resource_type, obj)
        defaulting.apply_scheme_defaults(resource_type.storage_key, obj)
        defaulting.normalize_metadata(obj)
        drop_disabled_fields(self.features, resource_type, obj, None)
        obj = admission.admit(self.registry, resource_type, obj, None, strict=strict)
        self._admit_policies(
            "CREATE",
            resource_type,
            obj,
            None,
            subresource=None,
            user=user,
            dry_run=dry_run,
            served=served,
            name=requested_name,
        )
        if dry_run:
            return obj
        created = self._commit(resource_type, "ADDED", obj, None)
        if resource_type.storage_key == CRD_KEY:
            self._serve_crd(created)
        if resource_type.storage_key == NAMESPACE_KEY:  # the service-account controller's work, done at once
            accounts = self.type_of(*admission.SERVICE_ACCOUNT_KEY)
            self.create(accounts, name, admission.default_service_account(name))
        return created

    def _service_account_exists(self, namespace: str, name: str) -> bool:
        return (namespace, name) in self._bucket(self.type_of(*admission.SERVICE_ACCOUNT_KEY))

    def update(
        self,
        resource_type: ResourceType,
        namespace: str,
        name: str,
        body: dict[str, Any],
        *,
        subresource: str | None = None,
        dry_run: bool = False,
        user: UserInfo | None = None,
        served: ResourceType | None = None,
        strict: bool = False,
    ) -> dict[str, Any]:
        old = self._find(resource_type, namespace, name)
        if not isinstance(body, dict):
            raise BadRequest("the request body must be an object")
        body_name = (body.get("metadata") or {}).get("name")
        if body_name and body_name != name:
            raise BadRequest(
                f"the name of the object ({body_name}) does not match the name on the URL ({name})"
            )
        stated = (body.get("metadata") or {}).get("resourceVersion")
        if stated and stated != old["metadata"]["resourceVersion"]:
            qualified = (
                f"{resource_type.plural}.{resource_type.group}"
                if resource_type.group
                else resource_type.plural
            )
            raise Conflict(
                f'Operation cannot be fulfilled on {qualified} "{name}": the object has been modified; '
                "please apply your changes to the latest version and try again",
                details={"name": name, "group": resource_type.group, "kind": resource_type.plural},
            )
        if subresource == "status":
            new = clone(old)
            if "status" in body:
                new["status"] = clone(body["status"])
            else:
                new.pop("status", None)
        else:
            new = clone(body)
            meta.metadata_of(new)
            if resource_type.status_subresource:
                new.pop("status", None)
                if "status" in old:
                    new["status"] = clone(old["status"])
        meta.carry_system_fields(new, old)
        new["apiVersion"], new["kind"] = resource_type.api_version, resource_type.kind
        defaulting.apply_scheme_defaults(resource_type.storage_key, new)
        defaulting.normalize_metadata(new)
        if old["metadata"].get("deletionTimestamp"):
            added = set(new["metadata"].get("finalizers") or []) - set(
                old["metadata"].get("finalizers") or []
            )
            if added:
                raise Invalid(
                    f'{resource_type.kind} "{name}" is invalid: metadata.finalizers: Forbidden: '
                    "no new finalizers can be added if the object is being deleted"
                )
        drop_disabled_fields(self.features, resource_type, new, old)
        new = admission.admit(self.registry, resource_type, new, old, strict=strict)
        self._admit_policies(
            "UPDATE",
            resource_type,
            new,
            old,
            subresource=subresource,
            user=user,
            dry_run=dry_run,
            served=served,
        )
        if new == old:
            return clone(old)
        if (
            old["metadata"].get("deletionTimestamp")
            and not new["metadata"].get("finalizers")
            and not old["metadata"].get("deletionGracePeriodSeconds")
        ):
            # The registry's delete during update: the last finalizer's removal is the object's deletion, one
            # revision and one DELETED event (of the object as stored, as etcd's previous value is); the
            # answer is the object as the request left it. Not within a grace period: the pod's kubelet
            # deletes it when its containers have stopped.
            if not dry_run:
                self._remove(resource_type, old)
            return new
        ignore_status = resource_type.status_subresource
        # A binding (pods/binding) sets spec.nodeName without the pod strategy: no new generation.
        if (
            subresource != "binding"
            and "generation" in old["metadata"]
            and meta.content_without_metadata(new, ignore_status)
            != meta.content_without_metadata(old, ignore_status)
        ):
            new["metadata"]["generation"] = int(old["metadata"]["generation"]) + 1
            admission.on_spec_change(resource_type, new, old)
        if dry_run:
            return new
        updated = self._commit(resource_type, "MODIFIED", new, old)
        if resource_type.storage_key == CRD_KEY:
            self._serve_crd(updated)
        return updated

    def patch(
        self,
        resource_type: ResourceType,
        namespace: str,
        name: str,
        body: Any,
        content_type: str,
        *,
        subresource: str | None = None,
        dry_run: bool = False,
        user: UserInfo | None = None,
        served: ResourceType | None = None,
        strict: bool = False,
    ) -> dict[str, Any]:
        """Apply a patch of any supported content type; apply-patch creates a missing object."""
        bucket_key = (namespace if resource_type.namespaced else "", name)
        if content_type == APPLY_PATCH and bucket_key not in self._bucket(resource_type):
            if not isinstance(body, dict):
                raise BadRequest("apply patch body must be an object")
            created = clone(body)
            meta.metadata_of(created).setdefault("name", name)
            return self.create(
                resource_type, namespace, created, dry_run=dry_run, user=user, served=served, strict=strict
            )
        current = self.get(resource_type, namespace, name)
        patched = apply_patch(current, body, content_type, custom=not resource_type.builtin)
        patched_meta = meta.metadata_of(patched)
        if patched_meta.get("resourceVersion") is None:
            # No resourceVersion in the patch: it applies to the latest object. One in it is a precondition.
            patched_meta["resourceVersion"] = current["metadata"]["resourceVersion"]
        return self.update(
            resource_type,
            namespace,
            name,
            patched,
            subresource=subresource,
            dry_run=dry_run,
            user=user,
            served=served,
            strict=strict,
        )

    # ---- CRDs ----------------------------------------------------------------------------------------------
    def _serve_crd(self, crd: dict[str, Any]) -> None:
        spec = crd.get("spec") or {}
        self.registry.remove_group_resource(
            spec.get("group", ""), (spec.get("names") or {}).get("plural", "")
        )
        for resource_type in crds.resource_types_for(crd):
            self.registry.add(resource_type)

    def _unserve_crd(self, crd: dict[str, Any]) -> None:
        spec = crd.get("spec") or {}
        group, plural = spec.get("group", ""), (spec.get("names") or {}).get("plural", "")
        try:
            served = self.type_of(group, plural)
        except NotFound:
            return
        for obj in list(self._bucket(served).values()):
            self._remove(served, obj)
        self.registry.remove_group_resource(group, plural)
        self._objects.pop((group, plural), None)
