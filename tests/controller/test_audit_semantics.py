"""An action that did not do what it meant is recorded as failed, with the reason, and shows on the domain.

The workload template's name held by someone else's object: the create is DomainActionFailed naming who
holds it (never DomainActionSucceeded "already exists"), a warning is logged, one Kubernetes Event counts
the repeats, and the domain's status is NotReady with a Ready=False condition giving the reason for as long as
it lasts, in both modes, even with every daemon Ready. The attack: a tenant who may create templates in the
domain's namespace makes one with the template's name first, even carrying the domain's labels, and still
cannot get the domain to go Ready over it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from cdctl.controller import render, resourceclaimtemplate
from cdctl.domain.computedomains import (
    LABEL_COMPUTE_DOMAIN,
    DomainActionFailed,
    DomainActionSucceeded,
)
from cdctl.domain.events import decode
from cdctl.k8s import kube_events
from cdctl.store.memory import InMemoryEventStore
from tests.controller.harness import USER_NAMESPACE, Cluster, eventually, eventually_async

RCT = ("resource.k8s.io", "resourceclaimtemplates")
FOREIGN_SPEC = {"spec": {"devices": {"requests": []}}}


def status_of(cluster: Cluster, name: str) -> dict[str, Any]:
    return dict((cluster.domain(name) or {}).get("status") or {})


def conflict_condition(status: dict[str, Any]) -> dict[str, Any] | None:
    return next(
        (c for c in status.get("conditions") or [] if c["reason"] == "ResourceClaimTemplateConflict"), None
    )


def conflict_events(cluster: Cluster) -> list[dict[str, Any]]:
    return [
        e
        for e in cluster.list("", "events", USER_NAMESPACE)
        if e.get("reason") == "ResourceClaimTemplateConflict"
    ]


async def _at_least(count: int, found: Any) -> list[Any]:
    got: list[Any] = await found()
    return got if len(got) >= count else []


@pytest.fixture(autouse=True)
def quick_retry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(resourceclaimtemplate, "CONFLICT_RETRY_S", 0.2)
    monkeypatch.setattr(kube_events, "PATCH_EVERY_S", 0.0)


@pytest.mark.parametrize("gates", ["", "HostManagedIMEX=true"])
async def test_a_taken_template_name_fails_the_create_and_holds_the_domain_not_ready(
    tmp_path: Path, gates: str
) -> None:
    async with Cluster(tmp_path) as cluster:
        foreign = cluster.server.store.create(
            cluster.type_of(*RCT), USER_NAMESPACE, {"metadata": {"name": "taken"}, "spec": FOREIGN_SPEC}
        )
        log = InMemoryEventStore()
        with capture_logs() as logs:
            await cluster.start_controller(store=log, gates=gates)
            cd = cluster.create_domain("cd1", template="taken")
            uid = cd["metadata"]["uid"]
            condition = await eventually(lambda: conflict_condition(status_of(cluster, "cd1")))
        assert status_of(cluster, "cd1")["status"] == "NotReady"
        assert condition["type"] == "Ready" and condition["status"] == "False"
        assert (
            "team-a/taken already exists and was not created for this ComputeDomain" in condition["message"]
        )

        async def outcomes() -> list[Any]:
            events = [decode(e) for e in await log.read_stream(f"domain/{uid}")]
            creates = [e for e in events if getattr(e, "action", "") == "create" and e.name == "taken"]
            return creates if len([e for e in creates if isinstance(e, DomainActionFailed)]) >= 3 else []

        creates = await eventually_async(outcomes)
        assert not [e for e in creates if isinstance(e, DomainActionSucceeded)]
        failed = next(e for e in creates if isinstance(e, DomainActionFailed))
        assert (
            failed.error
            == f"already exists and is not this ComputeDomain's (uid {foreign['metadata']['uid']})"
        )
        warnings = [e for e in logs if e["log_level"] == "warning" and e["event"] == "create failed"]
        assert warnings and warnings[0]["object"] == "team-a/taken"
        # Every retry is counted on one Event, not posted again.
        await eventually(lambda: [e["count"] for e in conflict_events(cluster)] > [1])
        assert len(conflict_events(cluster)) == 1

        # The name freed, the domain's own template is made and the reason goes with the conflict.
        cluster.server.store.delete(cluster.type_of(*RCT), USER_NAMESPACE, "taken")
        await eventually(lambda: status_of(cluster, "cd1").get("status") == "Ready")
        assert "conditions" not in status_of(cluster, "cd1")
        labels = cluster.get(*RCT, USER_NAMESPACE, "taken")["metadata"]["labels"]  # type: ignore[index]
        assert labels[LABEL_COMPUTE_DOMAIN] == uid


async def test_a_tenant_template_with_the_domains_labels_cannot_make_it_ready(tmp_path: Path) -> None:
    async with Cluster(tmp_path) as cluster:
        cd = cluster.create_domain("cd1", template="victim-channel")  # before the controller sees it
        uid = cd["metadata"]["uid"]
        # The template the controller would make, but for another domain's channel, with the domain's labels.
        decoy = render.workload_claim_template(cd, "v1")
        decoy["spec"]["spec"]["devices"]["config"][0]["opaque"]["parameters"]["domainID"] = (
            "someone-elses-domain"
        )
        del decoy["metadata"]["finalizers"]
        cluster.server.store.create(cluster.type_of(*RCT), USER_NAMESPACE, decoy)
        log = InMemoryEventStore()
        await cluster.start_controller(store=log)
        condition = await eventually(lambda: conflict_condition(status_of(cluster, "cd1")))
        assert "already exists and was not created for this ComputeDomain" in condition["message"]

        async def checks() -> list[DomainActionFailed]:
            events = [decode(e) for e in await log.read_stream(f"domain/{uid}")]
            return [e for e in events if isinstance(e, DomainActionFailed) and e.action == "check"]

        # Reconciled again and again (numNodes 0: it would be Ready at once but for the tenant's template).
        check, *_ = await eventually_async(lambda: _at_least(3, checks))
        assert check.name == "victim-channel" and "not what it would create" in check.error
        assert status_of(cluster, "cd1")["status"] == "NotReady"
        template = cluster.get(*RCT, USER_NAMESPACE, "victim-channel")
        assert template is not None
        assert template["spec"]["spec"]["devices"]["config"][0]["opaque"]["parameters"]["domainID"] == (
            "someone-elses-domain"
        )
