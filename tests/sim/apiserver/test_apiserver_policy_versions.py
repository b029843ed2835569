"""What a ValidatingAdmissionPolicy sees of a write in the simulated API server, as on a real one: the object
in the version the client wrote (a rule naming another version sees it converted, matchPolicy Equivalent, or
not at all under Exact), `request.name` empty for a create by generateName, CEL's type names, Kubernetes'
list `indexOf`, and a message falling back when its expression gives a line break. A policy naming a function
the simulator does not evaluate, or a rule without apiVersions, is refused when written."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cdctl.k8s.errors import KubeApiError
from cdctl.k8s.plugincluster import connect, disconnect
from cdctl.sim.apiserver.errors import ApiError, Invalid
from cdctl.sim.apiserver.server import ApiServer
from cdctl.sim.apiserver.store import ObjectStore
from tests.sim.apiserver.test_apiserver_policies import binding, create_pod, pod, refusal

GROUP = "admissionregistration.k8s.io"
RESOURCE = "resource.k8s.io"
CLAIMS_V1 = f"/apis/{RESOURCE}/v1/namespaces/default/resourceclaims"
CLAIMS_V1BETA1 = f"/apis/{RESOURCE}/v1beta1/namespaces/default/resourceclaims"


def claim_policy(
    versions: list[str], validation: dict[str, Any], match_policy: str | None = None
) -> dict[str, Any]:
    rule = {
        "apiGroups": [RESOURCE],
        "apiVersions": versions,
        "operations": ["CREATE"],
        "resources": ["resourceclaims"],
    }
    constraints: dict[str, Any] = {"resourceRules": [rule]}
    if match_policy:
        constraints["matchPolicy"] = match_policy
    return {
        "apiVersion": f"{GROUP}/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": "p"},
        "spec": {"matchConstraints": constraints, "validations": [validation]},
    }


def install(store: ObjectStore, policy: dict[str, Any]) -> None:
    store.create(store.type_of(GROUP, "validatingadmissionpolicies"), "", policy)
    store.create(store.type_of(GROUP, "validatingadmissionpolicybindings"), "", binding("p", ["Deny"]))


# One claim as each version writes it: v1 nests a request's fields under `exactly`, v1beta1 keeps them flat.
V1_CLAIM = {
    "metadata": {"name": "c"},
    "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "x", "count": 2}}]}},
}
V1BETA1_CLAIM = {
    "metadata": {"name": "c"},
    "spec": {"devices": {"requests": [{"name": "r", "deviceClassName": "x", "count": 2}]}},
}
# Refuses, and says which shape and which version it saw.
SHAPE = {
    "expression": "false",
    "messageExpression": (
        "(has(object.spec.devices.requests[0].exactly) ? 'nested' : 'flat') + ' in ' + "
        "request.resource.version + ' written as ' + request.requestResource.version + ' ' + "
        "object.apiVersion"
    ),
}


async def _refusal(server: ApiServer, tmp_path: Path, path: str, body: dict[str, Any]) -> str:
    api = await connect(str(server.write_kubeconfig(tmp_path / "kc")), 0, 0)
    try:
        with pytest.raises(KubeApiError) as caught:
            await api.create(path, body)
    finally:
        await disconnect(api)
    assert caught.value.status == 422
    return str(caught.value)


async def test_a_policy_sees_the_object_in_the_version_it_was_written_in(tmp_path: Path) -> None:
    async with ApiServer() as server:
        install(server.store, claim_policy(["*"], SHAPE))
        message = await _refusal(server, tmp_path, CLAIMS_V1BETA1, V1BETA1_CLAIM)
        assert "flat in v1beta1 written as v1beta1 resource.k8s.io/v1beta1" in message
        message = await _refusal(server, tmp_path, CLAIMS_V1, V1_CLAIM)
        assert "nested in v1 written as v1 resource.k8s.io/v1" in message


async def test_an_equivalent_version_is_converted_to_the_one_the_rule_names(tmp_path: Path) -> None:
    async with ApiServer() as server:
        install(server.store, claim_policy(["v1"], SHAPE))
        message = await _refusal(server, tmp_path, CLAIMS_V1BETA1, V1BETA1_CLAIM)
        assert "nested in v1 written as v1beta1 resource.k8s.io/v1" in message


async def test_under_exact_matching_another_version_is_not_seen(tmp_path: Path) -> None:
    async with ApiServer() as server:
        install(server.store, claim_policy(["v1"], SHAPE, match_policy="Exact"))
        api = await connect(str(server.write_kubeconfig(tmp_path / "kc")), 0, 0)
        try:
            await api.create(CLAIMS_V1BETA1, V1BETA1_CLAIM)  # not matched: created
        finally:
            await disconnect(api)
        await _refusal(server, tmp_path, CLAIMS_V1, {**V1_CLAIM, "metadata": {"name": "d"}})


def test_request_name_is_the_requests_and_object_name_the_generated_one() -> None:
    store = ObjectStore()
    install(
        store,
        claim_policy(
            ["*"],
            {"expression": "false", "messageExpression": "'[' + request.name + '] ' + object.metadata.name"},
        ),
    )
    claims = store.type_of(RESOURCE, "resourceclaims")
    generated = refusal(lambda: store.create(claims, "default", {"metadata": {"generateName": "w-"}}))
    assert "denied request: [] w-" in generated.message
    named = refusal(lambda: store.create(claims, "default", {"metadata": {"name": "n"}}))
    assert named.message.endswith("denied request: [n] n")


def _pod_policy(validation: dict[str, Any]) -> dict[str, Any]:
    rule = {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}
    return {
        "apiVersion": f"{GROUP}/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": "p"},
        "spec": {"matchConstraints": {"resourceRules": [rule]}, "validations": [validation]},
    }


def test_type_names_and_the_list_library_are_evaluated() -> None:
    store = ObjectStore()
    expression = (
        "type(object.metadata.labels) == map && type(object.metadata.name) == string && "
        "!(type(object.metadata.labels) == list) && "
        "['x', 'bad', 'y', 'bad'].indexOf('bad') == 1 && [true, 1].indexOf(1) == 1 && "
        "['a'].indexOf('z') == -1 && 'hello'.indexOf('l') == 2 && ['bad', 'bad'].lastIndexOf('bad') == 1"
    )
    install(store, _pod_policy({"expression": expression}))
    create_pod(store, pod("ok", {"a": "1"}))
    message = "'label ' + string(['a', 'b', 'c'].indexOf(object.metadata.labels['k']))"
    store = ObjectStore()
    install(store, _pod_policy({"expression": "false", "messageExpression": message}))
    assert refusal(lambda: create_pod(store, pod("a", {"k": "c"}))).message.endswith("label 2")


def test_a_message_expression_with_a_line_break_falls_back_to_the_message() -> None:
    store = ObjectStore()
    install(
        store,
        _pod_policy({"expression": "false", "messageExpression": "'two\\nlines'", "message": "static"}),
    )
    assert refusal(lambda: create_pod(store, pod("a"))).message.endswith("denied request: static")


@pytest.mark.parametrize(
    ("policy", "where"),
    [
        (_pod_policy({"expression": "object.metadata.name.lowerAscii() == 'a'"}), "lowerAscii"),
        (_pod_policy({"expression": "true", "messageExpression": "'a'.format([])"}), "format"),
        (claim_policy([], {"expression": "true"}), "apiVersions: Required value"),
        (claim_policy(["*"], {"expression": "true"}, match_policy="Fuzzy"), "matchPolicy"),
    ],
)
def test_what_the_simulator_does_not_evaluate_is_refused_when_written(
    policy: dict[str, Any], where: str
) -> None:
    store = ObjectStore()
    with pytest.raises(Invalid) as caught:
        store.create(store.type_of(GROUP, "validatingadmissionpolicies"), "", policy)
    assert where in caught.value.message
    assert store.policies.policies == {}


def test_admitted_counts_what_a_policy_let_through_per_user() -> None:
    store = ObjectStore()
    install(store, _pod_policy({"expression": "object.metadata.name != 'no'"}))
    create_pod(store, pod("yes"))
    with pytest.raises(ApiError):
        create_pod(store, pod("no"))
    assert dict(store.policies.admitted) == {("p", "kubernetes-admin"): 1}
