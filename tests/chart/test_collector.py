"""`cdctl collect` in the chart (collector.*): the reader ServiceAccount, whose tokens alone the components
accept (EVENT_LOG_READER), holds no permission itself; the Role an operator needs is exactly pods get/list,
pods/proxy get and a token of that one account; collector.subjects binds it; turned off, nothing of it is
rendered and the components neither serve their logs nor review tokens."""

from __future__ import annotations

from typing import Any

from helm_python import chart as hc

from cdctl.sim.rack.chart import collector_service_account, http_ports
from tests.chart.conftest import NAMESPACE, RELEASE, render_objects

NAME = f"{RELEASE}-collector"


def _named(objects: list[dict[str, Any]], kind: str, name: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]


def _env(objects: list[dict[str, Any]]) -> dict[str, dict[str, str]]:
    return {
        o["kind"]: {
            e["name"]: e.get("value", "") for e in o["spec"]["template"]["spec"]["containers"][0]["env"]
        }
        for o in objects
        if o["kind"] in ("Deployment", "StatefulSet", "DaemonSet")
    }


def test_by_default_the_reader_has_no_permission_and_the_role_is_exactly_what_collect_needs(
    helm_chart: hc.Chart,
) -> None:
    objects = render_objects(helm_chart)
    [account] = _named(objects, "ServiceAccount", NAME)
    assert account["automountServiceAccountToken"] is False
    assert not [
        b for b in objects if b["kind"] in ("RoleBinding", "ClusterRoleBinding")
        for s in b["subjects"] if s["name"] == NAME
    ]  # fmt: skip
    [role] = _named(objects, "Role", NAME)
    assert role["metadata"]["namespace"] == NAMESPACE
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]},
        {"apiGroups": [""], "resources": ["pods/proxy"], "verbs": ["get"]},
        {
            "apiGroups": [""],
            "resources": ["serviceaccounts/token"],
            "resourceNames": [NAME],
            "verbs": ["create"],
        },
    ]
    assert not _named(objects, "RoleBinding", NAME)
    assert set(_env(objects)) == {"StatefulSet", "DaemonSet"}
    for env in _env(objects).values():
        assert env["EVENT_LOG_READER"] == f"{NAMESPACE}/{NAME}"
    assert collector_service_account() == NAME
    assert http_ports() == {"controller": 8080, "kubelet-plugin": 8081}


def test_subjects_are_bound_to_the_role(helm_chart: hc.Chart) -> None:
    subjects = [
        {"kind": "User", "name": "alice"},
        {"kind": "Group", "name": "sre"},
        {"kind": "ServiceAccount", "name": "ops"},
        {"kind": "ServiceAccount", "name": "bot", "namespace": "ci"},
    ]
    [binding] = _named(render_objects(helm_chart, {"collector": {"subjects": subjects}}), "RoleBinding", NAME)
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": NAME}
    assert binding["subjects"] == [
        {"kind": "User", "name": "alice", "apiGroup": "rbac.authorization.k8s.io"},
        {"kind": "Group", "name": "sre", "apiGroup": "rbac.authorization.k8s.io"},
        {"kind": "ServiceAccount", "name": "ops", "namespace": NAMESPACE},
        {"kind": "ServiceAccount", "name": "bot", "namespace": "ci"},
    ]


def test_turned_off_nothing_serves_or_reviews(helm_chart: hc.Chart) -> None:
    objects = render_objects(helm_chart, {"collector": {"enabled": False}})
    assert not [o for o in objects if o["metadata"]["name"] == NAME]
    for env in _env(objects).values():
        assert "EVENT_LOG_READER" not in env
    for role in (o for o in objects if o["kind"] == "ClusterRole"):
        assert all("tokenreviews" not in rule["resources"] for rule in role["rules"])
    assert collector_service_account({"collector": {"enabled": False}}) == ""
