"""The ResourceClaim-from-template stand-in: one claim per pod and template entry, named like Kubernetes."""

from __future__ import annotations

from cdctl.sim.apiserver.store import ObjectStore
from cdctl.sim.controllers.claimtemplates import (
    DELETE_PROTECTION_FINALIZER,
    POD_CLAIM_NAME_ANNOTATION,
    ClaimTemplateController,
    claim_generate_name,
)
from tests.sim.standins import add_pod, add_template, claims, get, kind


def test_creates_one_claim_per_pod_and_records_it() -> None:
    store = ObjectStore()
    add_template(store, "tmpl")
    pod = add_pod(store, "worker", "tmpl")
    controller = ClaimTemplateController(store)
    controller.reconcile()
    controller.reconcile()
    created = claims(store)
    assert len(created) == 1
    claim = created[0]
    assert claim["metadata"]["name"].startswith("worker-channel-")
    assert len(claim["metadata"]["name"]) == len("worker-channel-") + 5
    assert claim["metadata"]["annotations"][POD_CLAIM_NAME_ANNOTATION] == "channel"
    assert claim["metadata"]["labels"] == {"from-template": "tmpl"}
    assert claim["metadata"]["finalizers"] == [DELETE_PROTECTION_FINALIZER]
    owner = claim["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["uid"], owner["controller"]) == ("Pod", pod["metadata"]["uid"], True)
    assert claim["spec"]["devices"]["requests"][0]["name"] == "channel"
    status = get(store, "", "pods", "worker")["status"]["resourceClaimStatuses"]
    assert status == [{"name": "channel", "resourceClaimName": claim["metadata"]["name"]}]


def test_waits_for_a_missing_template() -> None:
    store = ObjectStore()
    add_pod(store, "worker", "later")
    controller = ClaimTemplateController(store)
    controller.reconcile()
    assert claims(store) == []
    add_template(store, "later")
    controller.reconcile()
    assert len(claims(store)) == 1


def test_long_names_are_truncated_before_the_random_suffix() -> None:
    assert len(claim_generate_name("p" * 60, "channel")) == 57


def test_pod_deletion_releases_and_removes_its_claim() -> None:
    store = ObjectStore()
    add_template(store, "tmpl")
    pod = add_pod(store, "worker", "tmpl")
    controller = ClaimTemplateController(store)
    controller.reconcile()
    claim = claims(store)[0]
    claim_type = kind(store, "resource.k8s.io", "resourceclaims")
    status = {
        "reservedFor": [{"resource": "pods", "name": "worker", "uid": pod["metadata"]["uid"]}],
        "allocation": {"devices": {"results": []}},
    }
    store.update(
        claim_type, "default", claim["metadata"]["name"], {**claim, "status": status}, subresource="status"
    )
    store.delete(kind(store, "", "pods"), "default", "worker")
    held = claims(store)[0]
    assert held["metadata"]["deletionTimestamp"], "garbage collection marks the claim; the finalizer holds it"
    controller.reconcile()
    assert claims(store) == []
