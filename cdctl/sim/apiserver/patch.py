"""The PATCH content types of the API server: JSON merge patch, JSON patch, strategic merge patch and apply.

`apply_patch(current, body, content_type, ...)` returns the patched object; called by
cdctl.sim.apiserver.store. Strategic merge knows the list merge keys of the built-in fields our components
patch (containers by name, conditions by type, ownerReferences by uid, finalizers as a set, ...). Server-side
apply is approximated as a merge patch that ignores managedFields.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import jsonpatch
import yaml

from cdctl.sim.apiserver.errors import BadRequest, Invalid, UnsupportedMediaType

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
PATCH_TYPES = (JSON_PATCH, MERGE_PATCH, STRATEGIC_MERGE_PATCH, APPLY_PATCH)
CUSTOM_RESOURCE_PATCH_TYPES = (JSON_PATCH, MERGE_PATCH, APPLY_PATCH)

# Field name -> merge key for lists that strategic merge patch merges instead of replacing.
_MERGE_KEYS: dict[str, str] = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "env": "name",
    "ports": "containerPort",
    "conditions": "type",
    "ownerReferences": "uid",
    "imagePullSecrets": "name",
    "resourceClaims": "name",
    "containerStatuses": "name",
    "initContainerStatuses": "name",
    "addresses": "type",
    "taints": "key",
}
# Lists of scalars that strategic merge patch treats as sets.
_SET_LISTS = frozenset({"finalizers"})


def parse_body(raw: bytes, content_type: str) -> Any:
    """Decode a PATCH body: YAML for apply (JSON is valid YAML), JSON otherwise."""
    try:
        if content_type == APPLY_PATCH:
            return yaml.safe_load(raw.decode())
        return json.loads(raw.decode() or "null")
    except (ValueError, yaml.YAMLError) as error:
        raise BadRequest(f"error decoding patch: {error}") from error


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _merge_keyed_list(current: list[Any], patch: list[Any], key: str) -> list[Any]:
    result = copy.deepcopy(current)
    for item in patch:
        if not isinstance(item, dict) or key not in item:
            result.append(copy.deepcopy(item))
            continue
        directive = item.get("$patch")
        index = next(
            (i for i, c in enumerate(result) if isinstance(c, dict) and c.get(key) == item[key]), None
        )
        if directive == "delete":
            if index is not None:
                del result[index]
        elif index is None:
            result.append(strategic_merge({}, {k: v for k, v in item.items() if k != "$patch"}))
        else:
            result[index] = strategic_merge(result[index], item)
    return result


def strategic_merge(target: Any, patch: Any) -> Any:
    """Strategic merge patch for the built-in kinds (merge keys from the table above, `$patch` directives)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if patch.get("$patch") == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    if patch.get("$patch") == "delete":
        return None
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            result[field] = [v for v in result.get(field) or [] if v not in value]
        elif key.startswith("$setElementOrder/") or key == "$retainKeys":
            continue
        elif value is None:
            result.pop(key, None)
        elif isinstance(value, list) and key in _MERGE_KEYS and isinstance(result.get(key), list):
            result[key] = _merge_keyed_list(result[key], value, _MERGE_KEYS[key])
        elif isinstance(value, list) and key in _SET_LISTS and isinstance(result.get(key), list):
            result[key] = result[key] + [v for v in value if v not in result[key]]
        elif isinstance(value, dict):
            merged = strategic_merge(result.get(key), value)
            if merged is None:
                result.pop(key, None)
            else:
                result[key] = merged
        else:
            result[key] = copy.deepcopy(value)
    return result


def apply_patch(current: dict[str, Any], body: Any, content_type: str, *, custom: bool) -> dict[str, Any]:
    """The object after applying `body` of `content_type`; `custom` objects refuse strategic merge (415)."""
    allowed = CUSTOM_RESOURCE_PATCH_TYPES if custom else PATCH_TYPES
    if content_type not in allowed:
        raise UnsupportedMediaType(
            "the body of the request was in an unknown format - accepted media types include: "
            + ", ".join(allowed)
        )
    if content_type == JSON_PATCH:
        if not isinstance(body, list):
            raise BadRequest("json: cannot unmarshal object into Go value of type []handlers.jsonPatchOp")
        try:
            patched = jsonpatch.apply_patch(current, body)
        except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as error:
            raise Invalid(
                f"the server rejected our request due to an error in our request: {error}"
            ) from error
    elif not isinstance(body, dict):
        raise BadRequest("patch body must be a JSON object")
    elif content_type == STRATEGIC_MERGE_PATCH:
        patched = strategic_merge(current, body)
    else:
        patched = merge_patch(current, body)
    if not isinstance(patched, dict):
        raise Invalid("the patch did not produce an object")
    return patched
