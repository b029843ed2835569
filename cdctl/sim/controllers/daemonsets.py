"""Stand-in for the DaemonSet controller: one pod per eligible node, removed when the node stops matching.

A node is eligible when the pod template's nodeSelector, required node affinity and tolerations admit it
(cdctl.sim.controllers.nodematch). Pods are created bound to their node (`spec.nodeName`), owned by the
DaemonSet (controller reference, so deleting the DaemonSet collects them), labelled `pod-template-generation`
(from the DaemonSet's `deprecated.daemonset.template.generation` annotation); pods of an older template
generation or in phase Failed are replaced, and the DaemonSet status counts are kept. A DaemonSet that is
being deleted is left alone, as Kubernetes does. A pod the API server refuses (a ServiceAccount its namespace
lacks, say) is not created: the refusal is a FailedCreate Warning Event on the DaemonSet (`Error creating:
<the server's message>`) and ends that pass's creates for the DaemonSet, as the first failed batch of the real
controller's slow start does. A pod bound to a node that no longer exists is left alone, as the real
controller leaves it to the pod garbage collector (cdctl.sim.controllers.podgc). Run by the rack via
ControllerLoop.
"""

from __future__ import annotations

import copy
from typing import Any

from cdctl.sim.apiserver.admission import NOT_READY_TAINT, TEMPLATE_GENERATION_ANNOTATION, UNREACHABLE_TAINT
from cdctl.sim.apiserver.errors import ApiError
from cdctl.sim.apiserver.store import ObjectStore
from cdctl.sim.controllers import events
from cdctl.sim.controllers.nodematch import pod_fits_node

DAEMONSETS = ("apps", "daemonsets")
PODS = ("", "pods")
NODES = ("", "nodes")
TEMPLATE_GENERATION_LABEL = "pod-template-generation"
DAEMON_NO_EXECUTE_TAINTS = (NOT_READY_TAINT, UNREACHABLE_TAINT)
COMPONENT = "daemonset-controller"


def _signature(objects: list[dict[str, Any]]) -> tuple[int, int]:
    """How many objects and their newest resourceVersion: any create, change or deletion changes it."""
    newest = max((int(o["metadata"]["resourceVersion"]) for o in objects), default=0)
    return len(objects), newest


def template_generation(daemonset: dict[str, Any]) -> str:
    """The generation of the DaemonSet's pod template, as the API server keeps it in an annotation (its
    metadata.generation also counts other changes: a deletion held by a finalizer bumps it)."""
    annotations = daemonset["metadata"].get("annotations") or {}
    return str(annotations.get(TEMPLATE_GENERATION_ANNOTATION) or daemonset["metadata"].get("generation", 1))


def pod_is_ready(pod: dict[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


class DaemonSetController:
    def __init__(self, store: ObjectStore) -> None:
        self.store = store
        self.kinds = (DAEMONSETS, PODS, NODES)
        # What the last pass synced each DaemonSet against: (its resourceVersion, the pods' and nodes'
        # signature). A DaemonSet whose own version and the pods and nodes are unchanged needs no pass, as the
        # real controller syncs only the DaemonSets its informers' events name.
        self._synced: dict[str, tuple[str, tuple[int, int, int, int]]] = {}

    def reconcile(self) -> None:
        daemonsets, _ = self.store.list_objects(self.store.type_of(*DAEMONSETS), copies=False)  # read only
        nodes, _ = self.store.list_objects(self.store.type_of(*NODES), copies=False)
        pods, _ = self.store.list_objects(self.store.type_of(*PODS), copies=False)
        world = (*_signature(nodes), *_signature(pods))
        synced: dict[str, tuple[str, tuple[int, int, int, int]]] = {}
        for daemonset in daemonsets:
            meta = daemonset["metadata"]
            if meta.get("deletionTimestamp"):
                continue
            uid, version = str(meta["uid"]), str(meta["resourceVersion"])
            if self._synced.get(uid) == (version, world):
                synced[uid] = (version, world)
            elif self._sync(daemonset, nodes, pods):  # a refused pod is retried at the next pass
                current = self.store.peek(self.store.type_of(*DAEMONSETS), meta["namespace"], meta["name"])
                synced[uid] = (str(current["metadata"]["resourceVersion"]), world)  # its own status write
        self._synced = synced

    def _owned(self, daemonset: dict[str, Any], pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
        uid = daemonset["metadata"]["uid"]
        return [
            p
            for p in pods
            if any(
                r.get("uid") == uid and r.get("controller")
                for r in p["metadata"].get("ownerReferences") or []
            )
        ]

    def _sync(
        self, daemonset: dict[str, Any], nodes: list[dict[str, Any]], pods: list[dict[str, Any]]
    ) -> bool:
        """One DaemonSet's pass; False when the API server refused a pod (the pass must be made again)."""
        complete = True
        pods_type = self.store.type_of(*PODS)
        namespace = daemonset["metadata"]["namespace"]
        template = (daemonset.get("spec") or {}).get("template") or {}
        template_spec = template.get("spec") or {}
        generation = template_generation(daemonset)
        on_delete = ((daemonset.get("spec") or {}).get("updateStrategy") or {}).get("type") == "OnDelete"
        eligible = {n["metadata"]["name"] for n in nodes if pod_fits_node(template_spec, n)}
        existing = {n["metadata"]["name"] for n in nodes}
        by_node: dict[str, list[dict[str, Any]]] = {}
        for pod in self._owned(daemonset, pods):
            if pod["metadata"].get("deletionTimestamp"):
                continue
            node = (pod.get("spec") or {}).get("nodeName", "")
            if node not in existing:
                continue  # its node was deleted: the pod garbage collector's to remove
            stale = (
                not on_delete
                and pod["metadata"].get("labels", {}).get(TEMPLATE_GENERATION_LABEL) != generation
            )
            failed = (pod.get("status") or {}).get("phase") == "Failed"
            if node not in eligible or stale or failed or by_node.get(node):
                self.store.delete(pods_type, namespace, pod["metadata"]["name"])
                continue
            by_node.setdefault(node, []).append(pod)
        for node in sorted(eligible - set(by_node)):
            try:
                created = self.store.create(pods_type, namespace, self._pod_for(daemonset, template, node))
            except ApiError as refused:
                message = f"Error creating: {refused.message}"
                events.record(self.store, daemonset, "Warning", "FailedCreate", message, COMPONENT)
                complete = False
                break
            by_node[node] = [created]
        self._write_status(daemonset, eligible, by_node, generation)
        return complete

    def _pod_for(self, daemonset: dict[str, Any], template: dict[str, Any], node: str) -> dict[str, Any]:
        template_meta = template.get("metadata") or {}
        labels = dict(template_meta.get("labels") or {})
        labels[TEMPLATE_GENERATION_LABEL] = template_generation(daemonset)
        spec = copy.deepcopy(template.get("spec") or {})
        spec["nodeName"] = node
        # As the DaemonSet controller: its pods stay on a node gone silent (never evicted by those taints).
        spec["tolerations"] = [
            *(spec.get("tolerations") or []),
            *({"key": key, "operator": "Exists", "effect": "NoExecute"} for key in DAEMON_NO_EXECUTE_TAINTS),
        ]
        return {
            "metadata": {
                "generateName": f"{daemonset['metadata']['name']}-",
                "labels": labels,
                "annotations": dict(template_meta.get("annotations") or {}),
                "ownerReferences": [
                    {
                        "apiVersion": "apps/v1",
                        "kind": "DaemonSet",
                        "name": daemonset["metadata"]["name"],
                        "uid": daemonset["metadata"]["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": spec,
        }

    def _write_status(
        self,
        daemonset: dict[str, Any],
        eligible: set[str],
        by_node: dict[str, list[dict[str, Any]]],
        generation: str,
    ) -> None:
        scheduled = [pods[0] for node, pods in by_node.items() if node in eligible and pods]
        ready = sum(1 for pod in scheduled if pod_is_ready(pod))
        status = {
            "currentNumberScheduled": len(scheduled),
            "desiredNumberScheduled": len(eligible),
            "numberMisscheduled": 0,
            "numberReady": ready,
            "numberAvailable": ready,
            "numberUnavailable": len(eligible) - ready,
            "updatedNumberScheduled": sum(
                1
                for pod in scheduled
                if pod["metadata"].get("labels", {}).get(TEMPLATE_GENERATION_LABEL) == generation
            ),
            "observedGeneration": int(daemonset["metadata"].get("generation", 1)),
        }
        if daemonset.get("status") != status:
            daemonsets = self.store.type_of(*DAEMONSETS)
            latest = self.store.get(
                daemonsets, daemonset["metadata"]["namespace"], daemonset["metadata"]["name"]
            )
            self.store.update(
                daemonsets,
                latest["metadata"]["namespace"],
                latest["metadata"]["name"],
                {**latest, "status": status},
                subresource="status",
            )
