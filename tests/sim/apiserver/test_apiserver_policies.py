"""ValidatingAdmissionPolicies in the simulated API server: which writes a policy sees (resource rules,
operations, subresources), matchConditions, lazy variables, messages, failurePolicy, binding actions, the
refusal of a policy the simulator cannot run, and a denial as a real client sees it (422 naming the
policy)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cdctl.k8s.errors import KubeApiError
from cdctl.k8s.plugincluster import connect, disconnect
from cdctl.sim.apiserver.errors import ApiError, Invalid
from cdctl.sim.apiserver.identity import (
    ADMIN,
    NODE_NAME_CLAIM,
    POD_NAME_CLAIM,
    service_account_token,
    user_for_token,
)
from cdctl.sim.apiserver.server import ApiServer
from cdctl.sim.apiserver.store import ObjectStore

GROUP = "admissionregistration.k8s.io"


def policy(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    rules = [
        {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["pods"]}
    ]
    body = {"matchConstraints": {"resourceRules": rules}, **spec}
    return {
        "apiVersion": f"{GROUP}/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": body,
    }


def binding(name: str, actions: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {"policyName": name, "validationActions": actions},
    }


def install(store: ObjectStore, spec: dict[str, Any], actions: tuple[str, ...] = ("Deny",)) -> None:
    store.create(store.type_of(GROUP, "validatingadmissionpolicies"), "", policy("p", spec))
    store.create(store.type_of(GROUP, "validatingadmissionpolicybindings"), "", binding("p", list(actions)))


NO_FOO = {
    "validations": [{"expression": "!has(object.metadata.labels) || !('foo' in object.metadata.labels)"}]
}


def pod(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels or {}}, "spec": {"containers": []}}


def create_pod(store: ObjectStore, body: dict[str, Any], user: Any = None) -> dict[str, Any]:
    return store.create(store.type_of("", "pods"), "default", body, user=user)


def refusal(call: Any) -> ApiError:
    with pytest.raises(ApiError) as caught:
        call()
    return caught.value


def test_a_bound_policy_refuses_with_the_real_servers_status() -> None:
    store = ObjectStore()
    install(store, NO_FOO)
    error = refusal(lambda: create_pod(store, pod("a", {"foo": "1"})))
    assert (error.code, error.reason) == (422, "Invalid")
    assert error.message == (
        "pods \"a\" is forbidden: ValidatingAdmissionPolicy 'p' with binding 'p' denied request: "
        "failed expression: !has(object.metadata.labels) || !('foo' in object.metadata.labels)"
    )
    create_pod(store, pod("b"))  # passes
    assert len(store.policies.denials) == 1


def test_policies_see_only_their_resources_operations_and_subresources() -> None:
    store = ObjectStore()
    install(store, NO_FOO)
    created = create_pod(store, pod("a"))
    pods = store.type_of("", "pods")
    labelled = {**created, "metadata": {**created["metadata"], "labels": {"foo": "1"}}}
    # UPDATE of the pod is matched; its status subresource ("pods" does not cover "pods/status") is not.
    assert refusal(lambda: store.update(pods, "default", "a", labelled)).code == 422
    store.update(pods, "default", "a", {**created, "status": {"phase": "Running"}}, subresource="status")
    store.delete(pods, "default", "a")  # DELETE is not among the operations
    node = {"metadata": {"name": "n", "labels": {"foo": "1"}}}
    store.create(store.type_of("", "nodes"), "", node)  # another resource


def test_a_policy_without_a_binding_or_with_warn_and_audit_refuses_nothing() -> None:
    store = ObjectStore()
    store.create(store.type_of(GROUP, "validatingadmissionpolicies"), "", policy("p", NO_FOO))
    create_pod(store, pod("a", {"foo": "1"}))
    store.create(
        store.type_of(GROUP, "validatingadmissionpolicybindings"), "", binding("p", ["Warn", "Audit"])
    )
    create_pod(store, pod("b", {"foo": "1"}))
    assert len(store.policies.warnings) == len(store.policies.audits) == 1
    assert store.policies.denials == []


def test_match_conditions_false_skips_and_an_error_follows_the_failure_policy() -> None:
    conditions = [
        {"name": "named-a", "expression": "object.metadata.name == 'a'"},
        {"name": "broken", "expression": "object.spec.missing == 1"},
    ]
    for failure, refused in (("Fail", True), ("Ignore", False)):
        store = ObjectStore()
        install(store, {"failurePolicy": failure, "matchConditions": conditions, **NO_FOO})
        create_pod(store, pod("b", {"foo": "1"}))  # the first condition is false: not applied, no error
        if refused:
            error = refusal(lambda store=store: create_pod(store, pod("a")))  # type: ignore[misc]
            assert "failed to evaluate matchCondition 'broken'" in error.message
        else:
            create_pod(store, pod("a", {"foo": "1"}))


def test_validation_errors_deny_under_fail_and_are_skipped_under_ignore() -> None:
    spec = {"validations": [{"expression": "object.spec.nodeName == 'n'"}]}
    store = ObjectStore()
    install(store, spec)
    error = refusal(lambda: create_pod(store, pod("a")))
    assert "expression 'object.spec.nodeName == 'n'' resulted in error" in error.message
    store = ObjectStore()
    install(store, {"failurePolicy": "Ignore", **spec})
    create_pod(store, pod("a"))


def test_variables_are_evaluated_when_referenced_and_messages_prefer_the_expression() -> None:
    spec = {
        "variables": [
            {"name": "broken", "expression": "object.spec.missing"},
            {"name": "labels", "expression": "has(object.metadata.labels) ? object.metadata.labels : {}"},
            {"name": "foo", "expression": "'foo' in variables.labels ? variables.labels['foo'] : ''"},
        ],
        "validations": [
            {
                "expression": "variables.foo == ''",
                "messageExpression": "'label foo is ' + variables.foo",
                "message": "static",
            },
            {"expression": "variables.foo != 'x' || variables.broken", "message": "unused"},
        ],
    }
    store = ObjectStore()
    install(store, spec)
    create_pod(store, pod("a"))  # `variables.broken` sits in a branch CEL does not take
    assert refusal(lambda: create_pod(store, pod("b", {"foo": "bar"}))).message.endswith("label foo is bar")
    # A messageExpression that fails falls back to the message.
    spec["validations"][0]["messageExpression"] = "variables.broken"
    store = ObjectStore()
    install(store, spec)
    assert refusal(lambda: create_pod(store, pod("b", {"foo": "bar"}))).message.endswith(
        "denied request: static"
    )


def test_a_variable_that_fails_fails_the_expressions_that_use_it() -> None:
    spec = {
        "variables": [{"name": "broken", "expression": "object.spec.missing"}],
        "validations": [{"expression": "variables.broken == 1"}],
    }
    store = ObjectStore()
    install(store, spec)
    assert "variable 'broken'" in refusal(lambda: create_pod(store, pod("a"))).message


def test_a_validation_reason_picks_the_http_code() -> None:
    store = ObjectStore()
    install(store, {"validations": [{"expression": "false", "reason": "Forbidden", "message": "no"}]})
    error = refusal(lambda: create_pod(store, pod("a")))
    assert (error.code, error.reason) == (403, "Forbidden")


def test_policies_apply_to_every_identity_and_see_the_users_bound_claims() -> None:
    store = ObjectStore()
    spec = {
        "matchConditions": [
            {"name": "sa", "expression": "request.userInfo.username.startsWith('system:serviceaccount:')"}
        ],
        "validations": [
            {
                "expression": f"'{NODE_NAME_CLAIM}' in request.userInfo.extra && "
                f"request.userInfo.extra['{NODE_NAME_CLAIM}'][0] == object.spec.nodeName",
                "messageExpression": "'user ' + request.userInfo.username + ' on ' + request.operation",
            }
        ],
    }
    install(store, spec)
    bound = user_for_token(service_account_token("ns", "sa", pod="p", pod_uid="u", node="n1"))
    assert bound.extra[NODE_NAME_CLAIM] == ("n1",)
    create_pod(store, {**pod("a"), "spec": {"nodeName": "n1"}}, bound)
    error = refusal(lambda: create_pod(store, {**pod("b"), "spec": {"nodeName": "n2"}}, bound))
    assert error.message.endswith("user system:serviceaccount:ns:sa on CREATE")
    create_pod(
        store, {**pod("c"), "spec": {"nodeName": "n2"}}, ADMIN
    )  # the condition keeps to service accounts
    store = ObjectStore()
    install(store, {"validations": [{"expression": "false"}]})
    assert refusal(lambda: create_pod(store, pod("a"), ADMIN)).code == 422  # no condition: the admin too


@pytest.mark.parametrize(
    ("spec", "where"),
    [
        (
            {"validations": [{"expression": "object.metadata.labels[?'a'].orValue('') == ''"}]},
            "validations[0]",
        ),
        ({"validations": [{"expression": "variables.nope"}]}, "validations[0].expression"),
        ({"validations": [{"expression": "params.x == 1 && authorizer.x"}]}, "validations[0].expression"),
        ({"validations": [{"expression": "true", "messageExpression": "'a' +"}]}, "messageExpression"),
        ({"matchConditions": [{"name": "c", "expression": "object.?x"}], **NO_FOO}, "matchConditions[0]"),
        ({"variables": [{"name": "v", "expression": "x["}], **NO_FOO}, "variables[0]"),
        ({"paramKind": {"apiVersion": "v1", "kind": "ConfigMap"}, **NO_FOO}, "spec.paramKind"),
        ({"validations": []}, "spec.validations"),
    ],
)
def test_a_policy_the_simulator_cannot_run_is_refused_when_written(spec: dict[str, Any], where: str) -> None:
    store = ObjectStore()
    with pytest.raises(Invalid) as caught:
        store.create(store.type_of(GROUP, "validatingadmissionpolicies"), "", policy("p", spec))
    assert where in caught.value.message
    assert store.policies.policies == {}


async def test_a_denial_reaches_the_client_as_a_422_from_the_bound_identity(tmp_path: Path) -> None:
    async with ApiServer() as server:
        spec = {
            "matchConditions": [
                {"name": "sa", "expression": "request.userInfo.username == 'system:serviceaccount:ns:sa'"}
            ],
            "validations": [
                {"expression": f"object.metadata.name == request.userInfo.extra['{POD_NAME_CLAIM}'][0]"}
            ],
        }
        install(server.store, spec)
        token = service_account_token("ns", "sa", pod="mine", node="n1")
        api = await connect(str(server.write_kubeconfig(tmp_path / "kc", token)), 0, 0)
        try:
            await api.create("/api/v1/namespaces/default/pods", pod("mine"))
            with pytest.raises(KubeApiError) as caught:
                await api.create("/api/v1/namespaces/default/pods", pod("theirs"))
        finally:
            await disconnect(api)
        assert caught.value.status == 422
        assert "ValidatingAdmissionPolicy 'p' with binding 'p' denied request" in str(caught.value)
