"""Stand-in for Kubernetes' ResourceClaim controller (the part that serves pods).

For every pod entry `spec.resourceClaims[].resourceClaimTemplateName` it creates one ResourceClaim from the
template, named `<pod>-<podClaim>-<random>` like Kubernetes (generateName, owner reference to the pod,
annotation `resource.kubernetes.io/pod-claim-name`, finalizer `resource.kubernetes.io/delete-protection`) and
records it in `pod.status.resourceClaimStatuses`. It also drops reservations of pods that are gone and lets
unreserved claims that are being deleted go. Every write is made as the real controller's identity
(`RESOURCE_CLAIM_CONTROLLER`, the service account kube-controller-manager gives it with
`--use-service-account-credentials`), so the API server's admission policies judge its claims as they judge
the real one's; a claim the API server refuses leaves the pod without it and a Warning Event
`FailedResourceClaimCreation` on the pod, and is tried again on the next pass, as the real controller does.
Run by the rack via ControllerLoop; tests call `reconcile()`.
"""

from __future__ import annotations

import copy
from typing import Any

from cdctl.sim.apiserver.errors import ApiError
from cdctl.sim.apiserver.identity import service_account_token, user_for_token
from cdctl.sim.apiserver.store import ObjectStore
from cdctl.sim.controllers import events

POD_CLAIM_NAME_ANNOTATION = "resource.kubernetes.io/pod-claim-name"
DELETE_PROTECTION_FINALIZER = "resource.kubernetes.io/delete-protection"
PODS = ("", "pods")
CLAIMS = ("resource.k8s.io", "resourceclaims")
TEMPLATES = ("resource.k8s.io", "resourceclaimtemplates")
_MAX_GENERATE_NAME = 57  # 63 minus "-" and the 5 random characters
# kube-controller-manager's client for its resource-claim controller (cmd/kube-controller-manager).
COMPONENT = "resource-claim-controller"
RESOURCE_CLAIM_CONTROLLER = user_for_token(service_account_token("kube-system", "resource-claim-controller"))


def claim_generate_name(pod_name: str, pod_claim_name: str) -> str:
    return f"{pod_name}-{pod_claim_name}-"[:_MAX_GENERATE_NAME]


def pod_is_finished(pod: dict[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


class ClaimTemplateController:
    def __init__(self, store: ObjectStore) -> None:
        self.store = store
        self.kinds = (PODS, CLAIMS, TEMPLATES)

    def reconcile(self) -> None:
        pods, _ = self.store.list_objects(self.store.type_of(*PODS), copies=False)  # read only
        for pod in pods:
            if not pod["metadata"].get("deletionTimestamp") and not pod_is_finished(pod):
                self._ensure_claims(pod)
        self._release_claims({p["metadata"]["uid"] for p in pods if not pod_is_finished(p)})

    def _owned_claim(self, pod: dict[str, Any], pod_claim_name: str) -> dict[str, Any] | None:
        claims, _ = self.store.list_objects(
            self.store.type_of(*CLAIMS), pod["metadata"]["namespace"], copies=False
        )
        for claim in claims:
            annotations = claim["metadata"].get("annotations") or {}
            owners = claim["metadata"].get("ownerReferences") or []
            if annotations.get(POD_CLAIM_NAME_ANNOTATION) == pod_claim_name and any(
                ref.get("uid") == pod["metadata"]["uid"] for ref in owners
            ):
                return claim
        return None

    def _ensure_claims(self, pod: dict[str, Any]) -> None:
        namespace, pod_name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        statuses = list((pod.get("status") or {}).get("resourceClaimStatuses") or [])
        recorded = {s.get("name") for s in statuses}
        changed = False
        for pod_claim in (pod.get("spec") or {}).get("resourceClaims") or []:
            template_name = pod_claim.get("resourceClaimTemplateName")
            if not template_name or pod_claim["name"] in recorded:
                continue
            claim = self._owned_claim(pod, pod_claim["name"])
            if claim is None:
                try:
                    claim = self._create_claim(pod, pod_claim["name"], template_name)
                except ApiError as error:
                    # The real controller gives up on the pod for this pass, status unpatched, and retries.
                    message = f"PodResourceClaim {pod_claim['name']}: create ResourceClaim: {error.message}"
                    events.record(
                        self.store, pod, "Warning", "FailedResourceClaimCreation", message, COMPONENT
                    )
                    return
                if claim is None:
                    continue
            statuses.append({"name": pod_claim["name"], "resourceClaimName": claim["metadata"]["name"]})
            changed = True
        if changed:
            latest = self.store.get(self.store.type_of(*PODS), namespace, pod_name)
            latest.setdefault("status", {})["resourceClaimStatuses"] = statuses
            self.store.update(
                self.store.type_of(*PODS),
                namespace,
                pod_name,
                latest,
                subresource="status",
                user=RESOURCE_CLAIM_CONTROLLER,
            )

    def _create_claim(
        self, pod: dict[str, Any], pod_claim_name: str, template_name: str
    ) -> dict[str, Any] | None:
        namespace = pod["metadata"]["namespace"]
        try:
            template = self.store.get(self.store.type_of(*TEMPLATES), namespace, template_name)
        except ApiError:
            return None  # Kubernetes keeps the pod pending until the template exists.
        template_meta = (template.get("spec") or {}).get("metadata") or {}
        annotations = dict(template_meta.get("annotations") or {})
        annotations[POD_CLAIM_NAME_ANNOTATION] = pod_claim_name
        claim = {
            "metadata": {
                "generateName": claim_generate_name(pod["metadata"]["name"], pod_claim_name),
                "namespace": namespace,
                "labels": dict(template_meta.get("labels") or {}),
                "annotations": annotations,
                "finalizers": [DELETE_PROTECTION_FINALIZER],
                "ownerReferences": [
                    {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "name": pod["metadata"]["name"],
                        "uid": pod["metadata"]["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": copy.deepcopy((template.get("spec") or {}).get("spec") or {}),
        }
        return self.store.create(
            self.store.type_of(*CLAIMS), namespace, claim, user=RESOURCE_CLAIM_CONTROLLER
        )

    def _release_claims(self, live_pod_uids: set[str]) -> None:
        claims_type = self.store.type_of(*CLAIMS)
        claims, _ = self.store.list_objects(claims_type, copies=False)  # read only: writes go to copies
        for claim in claims:
            status = claim.get("status") or {}
            reserved = status.get("reservedFor") or []
            kept = [r for r in reserved if r.get("resource") != "pods" or r.get("uid") in live_pod_uids]
            if kept != reserved:
                status = (
                    {**status, "reservedFor": kept}
                    if kept
                    else {k: v for k, v in status.items() if k != "reservedFor"}
                )
                claim = self._write_status(claim, status)
            if claim["metadata"].get("deletionTimestamp") and not kept:
                self._let_go(claim)

    def _write_status(self, claim: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
        """Replace the claim's status (its status subresource, as the controller); the claim as written."""
        namespace, name = claim["metadata"]["namespace"], claim["metadata"]["name"]
        return self.store.update(
            self.store.type_of(*CLAIMS),
            namespace,
            name,
            {**claim, "status": status},
            subresource="status",
            user=RESOURCE_CLAIM_CONTROLLER,
        )

    def _let_go(self, claim: dict[str, Any]) -> None:
        claims_type = self.store.type_of(*CLAIMS)
        namespace, name = claim["metadata"]["namespace"], claim["metadata"]["name"]
        if (claim.get("status") or {}).get("allocation"):
            status = {k: v for k, v in claim["status"].items() if k not in ("allocation", "devices")}
            claim = self._write_status(claim, status)
        finalizers = claim["metadata"].get("finalizers") or []
        if DELETE_PROTECTION_FINALIZER in finalizers:
            kept = [f for f in finalizers if f != DELETE_PROTECTION_FINALIZER]
            self.store.update(
                claims_type,
                namespace,
                name,
                {**claim, "metadata": {**claim["metadata"], "finalizers": kept}},
                user=RESOURCE_CLAIM_CONTROLLER,
            )
