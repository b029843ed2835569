"""What kubectl needs of an API server beyond JSON CRUD, against the simulated one: protobuf request bodies
(kubectl 1.32+ sends its typed clients' kinds so), the OpenAPI v3 documents `kubectl apply` validates with,
and the server-side field validation it then asks for."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from cdctl.sim.apiserver import protobuf
from cdctl.sim.apiserver.errors import BadRequest
from cdctl.sim.apiserver.server import KUBECONFIG_TOKEN, ApiServer
from cdctl.sim.rack import chart

PROTOBUF = {
    "Content-Type": protobuf.CONTENT_TYPE,
    "Accept": "application/vnd.kubernetes.protobuf,application/json",
}


def varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def field(number: int, value: bytes | str | int) -> bytes:
    if isinstance(value, int):
        return varint(number << 3) + varint(value)
    data = value.encode() if isinstance(value, str) else value
    return varint(number << 3 | 2) + varint(len(data)) + data


def envelope(api_version: str, kind: str, raw: bytes) -> bytes:
    type_meta = field(1, api_version) + field(2, kind)
    return protobuf.MAGIC + field(1, type_meta) + field(2, raw)


def namespace_message(name: str, labels: dict[str, str]) -> bytes:
    meta = field(1, name) + b"".join(field(11, field(1, k) + field(2, v)) for k, v in labels.items())
    return field(1, meta) + field(2, field(1, "kubernetes"))


@pytest.fixture
async def http() -> AsyncIterator[tuple[ApiServer, aiohttp.ClientSession]]:
    async with ApiServer() as server:
        for crd in chart.crds():
            server.store.create(
                server.store.type_of("apiextensions.k8s.io", "customresourcedefinitions"), "", crd
            )
        headers = {"Authorization": f"Bearer {KUBECONFIG_TOKEN}"}
        async with aiohttp.ClientSession(headers=headers) as session:
            yield server, session


def test_a_namespace_sent_as_protobuf_decodes_to_its_json() -> None:
    body = envelope("v1", "Namespace", namespace_message("team-b", {"tier": "gpu", "a": "b"}))
    assert protobuf.decode(body) == {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": "team-b", "labels": {"tier": "gpu", "a": "b"}},
        "spec": {"finalizers": ["kubernetes"]},
    }


def test_delete_options_and_token_requests_decode() -> None:
    options = field(1, 30) + field(2, field(1, "uid-1")) + field(4, "Foreground") + field(5, "All")
    assert protobuf.decode(envelope("meta.k8s.io/v1", "DeleteOptions", options)) == {
        "apiVersion": "meta.k8s.io/v1",
        "kind": "DeleteOptions",
        "gracePeriodSeconds": 30,
        "preconditions": {"uid": "uid-1"},
        "propagationPolicy": "Foreground",
        "dryRun": ["All"],
    }
    bound = field(1, "Pod") + field(3, "plugin-x")
    spec = field(1, "api") + field(3, bound) + field(4, 3600)
    decoded = protobuf.decode(envelope("authentication.k8s.io/v1", "TokenRequest", field(2, spec)))
    assert decoded["spec"] == {"audiences": ["api"], "boundObjectRef": {"kind": "Pod", "name": "plugin-x"},
                               "expirationSeconds": 3600}  # fmt: skip


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b'{"kind": "Namespace"}', "missing the k8s envelope"),
        (protobuf.MAGIC + b"\x0a\xff", "truncated"),
        (envelope("v1", "Namespace", b"\x0a\x05ab"), "truncated field"),
        (envelope("v1", "Namespace", field(1, 7)), "not length-delimited"),
        (envelope("v1", "Namespace", b"\x0b"), "unexpected wire type 3"),
        (protobuf.MAGIC + b"\x0a" + b"\xff" * 11, "varint too long"),
    ],
)
def test_a_malformed_body_is_a_400_that_says_what_is_wrong(body: bytes, says: str) -> None:
    with pytest.raises(BadRequest, match=says):
        protobuf.decode(body)


async def test_kubectl_create_namespace_as_protobuf_creates_it(
    http: tuple[ApiServer, aiohttp.ClientSession],
) -> None:
    server, session = http
    body = envelope("v1", "Namespace", namespace_message("team-b", {"tier": "gpu"}))
    async with session.post(server.url + "/api/v1/namespaces", data=body, headers=PROTOBUF) as answer:
        assert answer.status == 201, await answer.text()
        created: dict[str, Any] = await answer.json()
    assert created["metadata"]["labels"] == {"tier": "gpu"} and created["status"] == {"phase": "Active"}


async def test_a_kind_it_cannot_read_as_protobuf_is_a_415_naming_it(
    http: tuple[ApiServer, aiohttp.ClientSession],
) -> None:
    server, session = http
    body = envelope("apps/v1", "Deployment", field(1, field(1, "d")))
    async with session.post(
        server.url + "/apis/apps/v1/namespaces/default/deployments", data=body, headers=PROTOBUF
    ) as a:
        assert a.status == 415
        status = await a.json()
    assert status["reason"] == "UnsupportedMediaType" and "not Deployment (apps/v1)" in status["message"]


async def test_openapi_v3_says_every_kind_takes_server_side_field_validation(
    http: tuple[ApiServer, aiohttp.ClientSession],
) -> None:
    """What kubectl's QueryParamVerifierV3 reads: the root's URL for the group-version, then a PATCH operation
    with the kind's x-kubernetes-group-version-kind and a `fieldValidation` query parameter."""
    server, session = http
    async with session.get(server.url + "/openapi/v3") as answer:
        paths = (await answer.json())["paths"]
    assert {"api/v1", "apis/apps/v1", "apis/resource.k8s.io/v1", "apis/resource.nvidia.com/v1beta1"} <= set(
        paths
    )
    url = paths["apis/resource.nvidia.com/v1beta1"]["serverRelativeURL"]
    assert url.startswith("/openapi/v3/apis/resource.nvidia.com/v1beta1?hash=")
    async with session.get(server.url + url) as answer:
        document = await answer.json()
    patch = document["paths"][
        "/apis/resource.nvidia.com/v1beta1/namespaces/{namespace}/computedomains/{name}"
    ]["patch"]
    assert patch["x-kubernetes-group-version-kind"] == {
        "group": "resource.nvidia.com", "version": "v1beta1", "kind": "ComputeDomain"}  # fmt: skip
    assert {"name": "fieldValidation", "in": "query"}.items() <= patch["parameters"][0].items()
    async with session.get(server.url + "/openapi/v3/apis/nothing.example/v1") as answer:
        assert answer.status == 404


async def test_strict_field_validation_refuses_an_unknown_field_of_a_custom_object(
    http: tuple[ApiServer, aiohttp.ClientSession],
) -> None:
    """A typo in a ComputeDomain is refused under kubectl's default (Strict), as a real server refuses it,
    and dropped without it."""
    server, session = http
    spec = {"numNodes": 2, "numNode": 3, "channel": {"resourceClaimTemplate": {"name": "c"}}}
    domain = {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "ComputeDomain",
              "metadata": {"name": "cd1", "namespace": "default"}, "spec": spec}  # fmt: skip
    url = server.url + "/apis/resource.nvidia.com/v1beta1/namespaces/default/computedomains"
    async with session.post(url + "?fieldValidation=Strict", json=domain) as answer:
        assert answer.status == 400
        message = (await answer.json())["message"]
    assert message == (
        'ComputeDomain in version "v1beta1" cannot be handled as a ComputeDomain: '
        'strict decoding error: unknown field "spec.numNode"'
    )
    async with session.post(url, json=domain) as answer:
        assert answer.status == 201
        assert "numNode" not in (await answer.json())["spec"]
