"""Request bodies in Kubernetes' protobuf encoding, decoded into the JSON shape the simulated server stores.

kubectl 1.32 and later send the built-in kinds of its typed clients as `application/vnd.kubernetes.protobuf`
(`kubectl create namespace`, `create configmap|secret|serviceaccount`, `create token`, and the DeleteOptions
of a typed delete). A real server decodes them with the types' generated.proto; the simulated one with the
field tables below, for exactly those kinds (written here rather than generated: the generated code for
k8s.io/api would be tens of thousands of lines for five messages). Any other kind is refused with 415 and a
message that names it, so a client never has a body half read. Called by cdctl.sim.apiserver.handlers.

The envelope: the magic `k8s\\0`, then a runtime.Unknown {typeMeta{apiVersion, kind}, raw, contentEncoding,
contentType} whose `raw` is the object's own message.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

from cdctl.sim.apiserver.errors import ApiError, BadRequest

CONTENT_TYPE = "application/vnd.kubernetes.protobuf"
MAGIC = b"k8s\x00"

Schema = dict[int, tuple[str, Any]]  # field number -> (JSON name, kind)


class UnsupportedMediaType(ApiError):
    code = 415
    reason = "UnsupportedMediaType"


def _string(raw: bytes) -> str:
    return raw.decode("utf-8")


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


TYPE_META: Schema = {1: ("apiVersion", "string"), 2: ("kind", "string")}
OWNER_REFERENCE: Schema = {
    1: ("kind", "string"),
    3: ("name", "string"),
    4: ("uid", "string"),
    5: ("apiVersion", "string"),
    6: ("controller", "bool"),
    7: ("blockOwnerDeletion", "bool"),
}
OBJECT_META: Schema = {
    1: ("name", "string"),
    2: ("generateName", "string"),
    3: ("namespace", "string"),
    5: ("uid", "string"),
    6: ("resourceVersion", "string"),
    7: ("generation", "int"),
    11: ("labels", ("map", "string")),
    12: ("annotations", ("map", "string")),
    13: ("ownerReferences", ("repeated", OWNER_REFERENCE)),
    14: ("finalizers", ("repeated", "string")),
}
OBJECT_REFERENCE: Schema = {
    1: ("kind", "string"),
    2: ("namespace", "string"),
    3: ("name", "string"),
    4: ("uid", "string"),
    5: ("apiVersion", "string"),
}
BOUND_OBJECT_REFERENCE: Schema = {
    1: ("kind", "string"),
    2: ("apiVersion", "string"),
    3: ("name", "string"),
    4: ("uid", "string"),
}
DELETE_OPTIONS: Schema = {
    1: ("gracePeriodSeconds", "int"),
    2: ("preconditions", {1: ("uid", "string"), 2: ("resourceVersion", "string")}),
    3: ("orphanDependents", "bool"),
    4: ("propagationPolicy", "string"),
    5: ("dryRun", ("repeated", "string")),
}
KINDS: dict[tuple[str, str], Schema] = {
    ("v1", "Namespace"): {
        1: ("metadata", OBJECT_META),
        2: ("spec", {1: ("finalizers", ("repeated", "string"))}),
    },
    ("v1", "ConfigMap"): {
        1: ("metadata", OBJECT_META),
        2: ("data", ("map", "string")),
        3: ("binaryData", ("map", "bytes")),
        4: ("immutable", "bool"),
    },
    ("v1", "Secret"): {
        1: ("metadata", OBJECT_META),
        2: ("data", ("map", "bytes")),
        3: ("type", "string"),
        4: ("stringData", ("map", "string")),
        5: ("immutable", "bool"),
    },
    ("v1", "ServiceAccount"): {
        1: ("metadata", OBJECT_META),
        2: ("secrets", ("repeated", OBJECT_REFERENCE)),
        3: ("imagePullSecrets", ("repeated", {1: ("name", "string")})),
        4: ("automountServiceAccountToken", "bool"),
    },
    ("authentication.k8s.io/v1", "TokenRequest"): {
        1: ("metadata", OBJECT_META),
        2: (
            "spec",
            {
                1: ("audiences", ("repeated", "string")),
                3: ("boundObjectRef", BOUND_OBJECT_REFERENCE),
                4: ("expirationSeconds", "int"),
            },
        ),
    },
    # The same message, under meta.k8s.io's name and the core group's.
    ("meta.k8s.io/v1", "DeleteOptions"): DELETE_OPTIONS,
    ("v1", "DeleteOptions"): DELETE_OPTIONS,
}


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        if at >= len(data):
            raise BadRequest("error decoding request body: protobuf: truncated varint")
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, at
        shift += 7
        if shift > 63:
            raise BadRequest("error decoding request body: protobuf: varint too long")


def _fields(data: bytes) -> list[tuple[int, int | bytes]]:
    """Each (field number, value) of a message: an int for varints, bytes for length-delimited fields."""
    out: list[tuple[int, int | bytes]] = []
    at = 0
    while at < len(data):
        key, at = _varint(data, at)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, at = _varint(data, at)
            out.append((number, value))
        elif wire == 2:
            length, at = _varint(data, at)
            if at + length > len(data):
                raise BadRequest("error decoding request body: protobuf: truncated field")
            out.append((number, data[at : at + length]))
            at += length
        elif wire in (1, 5):
            at += 8 if wire == 1 else 4  # fixed64/fixed32: no field of ours uses them
        else:
            raise BadRequest(f"error decoding request body: protobuf: unexpected wire type {wire}")
    return out


_SCALARS: dict[str, Callable[[Any], Any]] = {
    "string": _string,
    "bytes": _b64,
    "bool": bool,
    "int": lambda v: v - (1 << 64) if v >= 1 << 63 else v,
    "raw": bytes,
}


def _value(kind: Any, raw: int | bytes) -> Any:
    if isinstance(kind, dict):
        if not isinstance(raw, bytes):
            raise BadRequest("error decoding request body: protobuf: a message field is not length-delimited")
        return decode_message(raw, kind)
    if kind in ("string", "bytes", "raw") and not isinstance(raw, bytes):
        raise BadRequest("error decoding request body: protobuf: a string field is not length-delimited")
    if kind in ("bool", "int") and not isinstance(raw, int):
        raise BadRequest("error decoding request body: protobuf: a number field is not a varint")
    return _SCALARS[kind](raw)


def decode_message(data: bytes, schema: Schema) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for number, raw in _fields(data):
        if number not in schema:
            continue  # a field we do not store (status, managedFields, ...): the server would drop it too
        name, kind = schema[number]
        if isinstance(kind, tuple) and kind[0] == "repeated":
            out.setdefault(name, []).append(_value(kind[1], raw))
        elif isinstance(kind, tuple) and kind[0] == "map":
            if not isinstance(raw, bytes):
                raise BadRequest("error decoding request body: protobuf: a map entry is not length-delimited")
            entry = decode_message(raw, {1: ("key", "string"), 2: ("value", kind[1])})
            out.setdefault(name, {})[entry.get("key", "")] = entry.get("value", "")
        else:
            out[name] = _value(kind, raw)
    return out


def decode(body: bytes) -> dict[str, Any]:
    """The JSON object a protobuf request body encodes; 400 when it is malformed, 415 for a kind that the
    simulated server cannot read as protobuf."""
    if not body.startswith(MAGIC):
        raise BadRequest("error decoding request body: protobuf: missing the k8s envelope")
    envelope = decode_message(body[len(MAGIC) :], {1: ("typeMeta", TYPE_META), 2: ("raw", "raw")})
    type_meta = envelope.get("typeMeta") or {}
    api_version, kind = type_meta.get("apiVersion", ""), type_meta.get("kind", "")
    schema = KINDS.get((api_version, kind))
    if schema is None:
        raise UnsupportedMediaType(
            f"the simulated API server reads {CONTENT_TYPE} only for "
            f"{', '.join(sorted({k for _, k in KINDS}))}, not {kind or 'this body'} ({api_version}): "
            "send it as application/json"
        )
    obj = decode_message(envelope.get("raw", b""), schema)
    return {"apiVersion": api_version, "kind": kind, **obj}
