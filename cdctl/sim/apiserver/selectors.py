"""Label and field selectors with the API server's syntax and semantics.

`parse_label_selector("a=b,c!=d,e in (x,y),f notin (z),g,!h")` and `parse_field_selector("spec.nodeName=n1")`
return matchers used by the object store for list, watch and deletecollection. Called by
cdctl.sim.apiserver.store and the HTTP handlers; stand-ins use them to match node selectors.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from cdctl.sim.apiserver.errors import BadRequest
from cdctl.sim.apiserver.resources import ResourceType

_TOKEN_RE = re.compile(r"\s*(\(|\)|,|!=|==|=|!|[^\s(),!=]+)")


@dataclass(frozen=True)
class LabelRequirement:
    key: str
    operator: str  # "=", "!=", "in", "notin", "exists", "!exists"
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.operator == "exists":
            return self.key in labels
        if self.operator == "!exists":
            return self.key not in labels
        if self.operator in ("=", "in"):
            return self.key in labels and labels[self.key] in self.values
        # "!=" and "notin" match objects without the label, as the API server does.
        return labels.get(self.key) not in self.values


@dataclass(frozen=True)
class LabelSelector:
    requirements: tuple[LabelRequirement, ...]

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        labels = labels or {}
        return all(r.matches(labels) for r in self.requirements)


def _tokens(text: str) -> list[str]:
    tokens: list[str] = []
    position = 0
    text = text.strip()
    while position < len(text):
        match = _TOKEN_RE.match(text, position)
        if not match or not match.group(1):
            raise BadRequest(f"unable to parse requirement: invalid label selector {text!r}")
        tokens.append(match.group(1))
        position = match.end()
    return tokens


def parse_label_selector(text: str | None) -> LabelSelector:
    """Parse the `labelSelector` query syntax; raises BadRequest on malformed input."""
    if not text or not text.strip():
        return LabelSelector(())
    tokens = _tokens(text)
    requirements: list[LabelRequirement] = []
    index = 0

    def take() -> str:
        nonlocal index
        if index >= len(tokens):
            raise BadRequest(f"unable to parse requirement: unexpected end of label selector {text!r}")
        token = tokens[index]
        index += 1
        return token

    while index < len(tokens):
        token = take()
        if token == "!":
            requirements.append(LabelRequirement(take(), "!exists"))
        else:
            key = token
            following = tokens[index] if index < len(tokens) else ","
            if following == ",":
                requirements.append(LabelRequirement(key, "exists"))
            elif following in ("=", "==", "!="):
                take()
                operator = "!=" if following == "!=" else "="
                value = tokens[index] if index < len(tokens) and tokens[index] != "," else ""
                if value:
                    take()
                requirements.append(LabelRequirement(key, operator, (value,)))
            elif following in ("in", "notin"):
                take()
                if take() != "(":
                    raise BadRequest(f"unable to parse requirement: expected '(' in {text!r}")
                values: list[str] = []
                while (value := take()) != ")":
                    if value != ",":
                        values.append(value)
                requirements.append(LabelRequirement(key, following, tuple(values)))
            else:
                raise BadRequest(f"unable to parse requirement: unexpected {following!r} in {text!r}")
        if index < len(tokens) and take() != ",":
            raise BadRequest(f"unable to parse requirement: expected ',' in {text!r}")
    return LabelSelector(tuple(requirements))


def selector_from_match_labels(match_labels: Mapping[str, str] | None) -> LabelSelector:
    return LabelSelector(tuple(LabelRequirement(k, "=", (v,)) for k, v in (match_labels or {}).items()))


def field_value(obj: Mapping[str, Any], path: str) -> str:
    """The string form of a dotted field, as field selectors compare it ("" when absent)."""
    current: Any = obj
    for part in path.split("."):
        if not isinstance(current, Mapping):
            return ""
        current = current.get(part)
    if current is None:
        return ""
    if isinstance(current, bool):
        return "true" if current else "false"
    return str(current)


@dataclass(frozen=True)
class FieldRequirement:
    path: str
    equal: bool
    value: str


@dataclass(frozen=True)
class FieldSelector:
    requirements: tuple[FieldRequirement, ...]

    def matches(self, obj: Mapping[str, Any]) -> bool:
        return all((field_value(obj, r.path) == r.value) == r.equal for r in self.requirements)

    def value_of(self, path: str) -> str | None:
        """The value an equality requirement pins `path` to, if any."""
        for requirement in self.requirements:
            if requirement.path == path and requirement.equal:
                return requirement.value
        return None


def parse_field_selector(text: str | None, resource_type: ResourceType) -> FieldSelector:
    """Parse `fieldSelector`; fields the resource does not support are a BadRequest, like the API server."""
    if not text or not text.strip():
        return FieldSelector(())
    requirements: list[FieldRequirement] = []
    for term in text.split(","):
        term = term.strip()
        if not term:
            continue
        operator = next((op for op in ("!=", "==", "=") if op in term), None)
        if operator is None:
            raise BadRequest(f"invalid selector: {text!r}; can't understand {term!r}")
        path, value = term.split(operator, 1)
        equal = operator != "!="
        path = path.strip()
        if not resource_type.supports_field(path):
            raise BadRequest(
                f'field label not supported: {path}: "{path}" is not a known field selector: '
                f"only {', '.join(('metadata.name', 'metadata.namespace', *resource_type.field_selectors))}"
            )
        requirements.append(FieldRequirement(path, equal, value.strip()))
    return FieldSelector(tuple(requirements))


ObjectFilter = Callable[[Mapping[str, Any]], bool]


def object_filter(labels: LabelSelector, fields: FieldSelector) -> ObjectFilter:
    def matches(obj: Mapping[str, Any]) -> bool:
        return labels.matches((obj.get("metadata") or {}).get("labels")) and fields.matches(obj)

    return matches
