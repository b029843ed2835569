"""CustomResourceDefinitions: serving their resources, schema defaults, validation and CEL validation rules.

The object store (cdctl.sim.apiserver.store) calls `resource_types_for` when a CRD is written,
`accepted_status` to fill its status, and `admit_custom_object` on every create/update of a custom object.
Unknown fields are pruned (unless `x-kubernetes-preserve-unknown-fields`), defaults come from the
openAPIV3Schema `default` keywords, structural validation uses jsonschema (types, required, enum, bounds), and
`x-kubernetes-validations` rules are evaluated with CEL, transition rules (those using `oldSelf`) on update
only, which is how the immutable-spec rule `self == oldSelf` behaves on a real API server.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import cel
import jsonschema

from cdctl.sim.apiserver.errors import BadRequest, Invalid
from cdctl.sim.apiserver.resources import ResourceType

_SCHEMA_EXTENSION_KEYS = ("x-kubernetes-validations", "x-kubernetes-preserve-unknown-fields", "nullable")


def resource_types_for(crd: dict[str, Any]) -> list[ResourceType]:
    """The resource types a CRD serves (one per served version)."""
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    versions = [v for v in spec.get("versions") or [] if v.get("served", True)]
    storage = next((v["name"] for v in spec.get("versions") or [] if v.get("storage")), None)
    if storage is None and versions:
        storage = versions[0]["name"]
    types = []
    for version in versions:
        schema = (version.get("schema") or {}).get("openAPIV3Schema")
        selectable = tuple(
            str(f.get("jsonPath", "")).lstrip(".") for f in version.get("selectableFields") or []
        )
        types.append(
            ResourceType(
                group=spec.get("group", ""),
                version=version["name"],
                plural=names.get("plural", ""),
                kind=names.get("kind", ""),
                namespaced=spec.get("scope", "Namespaced") == "Namespaced",
                storage_version=storage or version["name"],
                status_subresource="status" in (version.get("subresources") or {}),
                short_names=tuple(names.get("shortNames") or ()),
                categories=tuple(names.get("categories") or ()),
                field_selectors=selectable,
                schema=schema,
                builtin=False,
                printer_columns=tuple(version.get("additionalPrinterColumns") or ()),
            )
        )
    return types


def validate_definition(crd: dict[str, Any]) -> None:
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    group = spec.get("group")
    if not group or not names.get("plural") or not names.get("kind") or not spec.get("versions"):
        raise Invalid(
            "CustomResourceDefinition is invalid: spec.group, spec.names and spec.versions are required"
        )
    expected = f"{names['plural']}.{group}"
    name = (crd.get("metadata") or {}).get("name")
    if name != expected:
        raise Invalid(
            f'CustomResourceDefinition.apiextensions.k8s.io "{name}" is invalid: metadata.name: '
            f'Invalid value: "{name}": must be spec.names.plural+"."+spec.group'
        )


def accepted_status(crd: dict[str, Any], now: str) -> dict[str, Any]:
    spec = crd.get("spec") or {}
    names = dict(spec.get("names") or {})
    names.setdefault("singular", str(names.get("kind", "")).lower())
    names.setdefault("listKind", f"{names.get('kind', '')}List")
    condition = {"status": "True", "lastTransitionTime": now}
    return {
        "acceptedNames": names,
        "conditions": [
            {**condition, "type": "NamesAccepted", "reason": "NoConflicts", "message": "no conflicts found"},
            {
                **condition,
                "type": "Established",
                "reason": "InitialNamesAccepted",
                "message": "the initial names have been accepted",
            },
        ],
        "storedVersions": [v["name"] for v in spec.get("versions") or [] if v.get("storage")],
    }


_ROOT_FIELDS = ("apiVersion", "kind", "metadata")


def prune(
    value: Any,
    schema: dict[str, Any] | None,
    *,
    root: bool = False,
    pruned: list[str] | None = None,
    path: str = "",
) -> Any:
    """Drop fields the structural schema does not specify, as the API server does for custom objects; the
    path of each dropped field is added to `pruned` (`spec.numNode`, `spec.items[0].x`)."""
    if not schema:
        return value
    if isinstance(value, dict):
        properties = schema.get("properties") or {}
        additional = schema.get("additionalProperties")
        keep_unknown = bool(schema.get("x-kubernetes-preserve-unknown-fields")) or additional is True
        for key in list(value):
            where = f"{path}.{key}" if path else str(key)
            if root and key in _ROOT_FIELDS:
                continue
            if key in properties:
                value[key] = prune(value[key], properties[key], pruned=pruned, path=where)
            elif isinstance(additional, dict):
                value[key] = prune(value[key], additional, pruned=pruned, path=where)
            elif not keep_unknown:
                del value[key]
                if pruned is not None:
                    pruned.append(where)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [
            prune(item, schema["items"], pruned=pruned, path=f"{path}[{index}]")
            for index, item in enumerate(value)
        ]
    return value


def apply_defaults(value: Any, schema: dict[str, Any] | None) -> Any:
    """Fill `default`s of absent properties, recursing into present and defaulted values."""
    if not schema:
        return value
    if isinstance(value, dict):
        for name, prop in (schema.get("properties") or {}).items():
            if name not in value and "default" in prop:
                value[name] = copy.deepcopy(prop["default"])
            if name in value:
                value[name] = apply_defaults(value[name], prop)
        additional = schema.get("additionalProperties")
        if isinstance(additional, dict):
            for key in value:
                value[key] = apply_defaults(value[key], additional)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [apply_defaults(item, schema["items"]) for item in value]
    return value


def _json_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """The OpenAPI schema as plain JSON Schema (drops Kubernetes extensions, maps `nullable`)."""
    converted: dict[str, Any] = {}
    for key, value in schema.items():
        if key in _SCHEMA_EXTENSION_KEYS or key.startswith("x-kubernetes-"):
            continue
        if key == "properties":
            converted[key] = {n: _json_schema(p) for n, p in value.items()}
        elif key in ("items", "additionalProperties") and isinstance(value, dict):
            converted[key] = _json_schema(value)
        elif key in ("allOf", "anyOf", "oneOf"):
            converted[key] = [_json_schema(s) for s in value]
        elif key == "not":
            converted[key] = _json_schema(value)
        else:
            converted[key] = value
    if schema.get("x-kubernetes-int-or-string"):
        converted.pop("type", None)
        converted["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if schema.get("nullable") and "type" in converted:
        converted["type"] = [converted["type"], "null"]
    return converted


def _rules(
    schema: dict[str, Any], new: Any, old: Any, path: str
) -> Iterator[tuple[str, dict[str, Any], Any, Any]]:
    for rule in schema.get("x-kubernetes-validations") or []:
        yield path, rule, new, old
    if isinstance(new, dict):
        for name, prop in (schema.get("properties") or {}).items():
            if name in new:
                old_child = old.get(name) if isinstance(old, dict) else None
                yield from _rules(prop, new[name], old_child, f"{path}.{name}" if path else name)


def _evaluate_rules(kind: str, name: str, schema: dict[str, Any], new: dict[str, Any], old: Any) -> list[str]:
    failures = []
    for path, rule, new_value, old_value in _rules(schema, new, old, ""):
        expression = rule.get("rule", "")
        is_transition = "oldSelf" in expression
        if is_transition and old_value is None:
            continue
        context: dict[str, Any] = {"self": new_value}
        if is_transition:
            context["oldSelf"] = old_value
        try:
            passed = cel.evaluate(expression, context)
        except Exception as error:
            failures.append(
                f"{path or '<root>'}: Invalid value: rule {expression!r} failed to evaluate: {error}"
            )
            continue
        if passed is not True:
            message = rule.get("message") or f"failed rule: {expression}"
            failures.append(f'{path or "<root>"}: Invalid value: "object": {message}')
    return failures


def admit_custom_object(
    resource_type: ResourceType, new: dict[str, Any], old: dict[str, Any] | None, *, strict: bool = False
) -> dict[str, Any]:
    """Default and validate a custom object against its version's schema; raises Invalid (422). Unknown
    fields are dropped, or with `strict` (the request's `fieldValidation=Strict`, which kubectl sends)
    refused with 400 as a real server refuses them."""
    schema = resource_type.schema
    if not schema:
        return new
    unknown: list[str] = []
    new = apply_defaults(prune(new, schema, root=True, pruned=unknown), schema)
    if strict and unknown:
        kind = resource_type.kind
        fields = ", ".join(f'unknown field "{path}"' for path in unknown)
        raise BadRequest(
            f'{kind} in version "{resource_type.version}" cannot be handled as a {kind}: '
            f"strict decoding error: {fields}"
        )
    name = (new.get("metadata") or {}).get("name", "")
    qualified = f"{resource_type.kind}.{resource_type.group}"
    failures = []
    validator = jsonschema.Draft7Validator(_json_schema(schema))
    body = {k: v for k, v in new.items() if k not in ("metadata", "apiVersion", "kind")}
    for error in sorted(validator.iter_errors(body), key=lambda e: list(e.path)):
        location = ".".join(str(p) for p in error.path) or "<root>"
        failures.append(f"{location}: Invalid value: {error.message}")
    failures += _evaluate_rules(resource_type.kind, name, schema, new, old)
    if failures:
        raise Invalid(
            f'{qualified} "{name}" is invalid: {"; ".join(failures)}',
            details={"name": name, "group": resource_type.group, "kind": resource_type.kind},
        )
    return new
