"""What `cdctl explain` finds in a real controller's log when the API server throttles and fails its writes:
the domain no node has joined yet is explained by the controller's failed actions (api-throttled, api-error),
each citing the DomainActionFailed the controller recorded."""

from __future__ import annotations

from pathlib import Path

from cdctl.projections.explainload import load_explanations
from cdctl.projections.timeline import EventSource
from cdctl.store.sqlite import SqliteEventStore
from tests.controller.harness import DRIVER_NAMESPACE, USER_NAMESPACE, Cluster, eventually


async def test_throttled_and_failed_writes_are_the_cause_explain_gives(tmp_path: Path) -> None:
    db = tmp_path / "controller.db"
    async with Cluster(tmp_path) as cluster:
        task, _ = await cluster.start_controller(db_path=str(db))
        cluster.server.faults.fail_next(429, 429, 500)
        uid = cluster.create_domain("cd1")["metadata"]["uid"]
        await eventually(
            lambda: cluster.get("apps", "daemonsets", DRIVER_NAMESPACE, f"computedomain-daemon-{uid}")
        )
        assert cluster.server.faults.injected == 3
        await cluster.stop_controller(task)
    async with await SqliteEventStore.open(db, read_only=True) as store:
        events = EventSource(lambda sql, params: store.query(sql, params), False, str(db))
        [explanation] = await load_explanations(events, f"computedomain/{USER_NAMESPACE}/cd1")
    codes = [cause.code for cause in explanation.chain]
    assert "api-throttled" in codes and "api-error" in codes, explanation.text()
    assert all(c.evidence is not None and c.evidence.type == "DomainActionFailed" for c in explanation.chain)
    assert any("no node has joined it in this file" in text for text, _ in explanation.facts)


async def test_a_write_an_admission_policy_refuses_is_the_cause_explain_gives(tmp_path: Path) -> None:
    """A cluster's own policy (a change freeze on DaemonSets) refuses the controller's create until its
    binding goes. The controller does not watch policies, so it re-checks a domain refused for good; explain
    names the policy's refusal, citing the controller's DomainActionFailed."""
    db = tmp_path / "controller.db"
    group = "admissionregistration.k8s.io"
    rules = [
        {"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["daemonsets"]}
    ]
    freeze = {
        "apiVersion": f"{group}/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": "change-freeze"},
        "spec": {
            "matchConstraints": {"resourceRules": rules},
            "validations": [{"expression": "false", "message": "DaemonSets are frozen for maintenance"}],
        },
    }
    binding = {
        "apiVersion": f"{group}/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": "change-freeze"},
        "spec": {"policyName": "change-freeze", "validationActions": ["Deny"]},
    }
    async with Cluster(tmp_path) as cluster:
        store = cluster.server.store
        store.create(cluster.type_of(group, "validatingadmissionpolicies"), "", freeze)
        store.create(cluster.type_of(group, "validatingadmissionpolicybindings"), "", binding)
        task, manager = await cluster.start_controller(db_path=str(db), recheck_failed_s=0.5)
        uid = cluster.create_domain("cd1")["metadata"]["uid"]
        await eventually(lambda: manager.queue.parked() == [uid])  # refused for good: parked, re-checked
        await eventually(lambda: len(store.policies.denials) >= 2)  # ... and refused again
        store.delete(cluster.type_of(group, "validatingadmissionpolicybindings"), "", "change-freeze")
        await eventually(
            lambda: cluster.get("apps", "daemonsets", DRIVER_NAMESPACE, f"computedomain-daemon-{uid}")
        )
        await cluster.stop_controller(task)
    async with await SqliteEventStore.open(db, read_only=True) as store:
        events = EventSource(lambda sql, params: store.query(sql, params), False, str(db))
        [explanation] = await load_explanations(events, f"computedomain/{USER_NAMESPACE}/cd1")
    refused = [cause for cause in explanation.chain if cause.code == "admission-refused"]
    assert refused, explanation.text()
    assert "ValidatingAdmissionPolicy 'change-freeze'" in refused[0].text, refused[0].text
    assert "DaemonSets are frozen for maintenance" in refused[0].text
    assert refused[0].evidence is not None and refused[0].evidence.type == "DomainActionFailed"
