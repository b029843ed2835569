"""RBAC for the simulated API server: service-account requests are authorized against loaded roles.

Kubernetes' RBAC authorizer, reduced to what the chart uses: Roles and ClusterRoles, bound by RoleBindings
(grants in one namespace) and ClusterRoleBindings (everywhere), rules of apiGroups x resources (with
`resource/subresource`) x verbs, `*` wildcards and resourceNames. The verb of a request is derived from its
method and path as the real server does (get/list/watch/create/update/patch/delete/deletecollection).

A client whose bearer token is `system:serviceaccount:<namespace>:<name>` (see `service_account_token`;
cdctl.sim.apiserver.identity, also for tokens bound to a pod, and for tokens the TokenRequest API issued) is
that service account, and one whose token is `sim-user:<name>` (`user_token`) that user, in its groups:
bindings name them as ServiceAccount, User and Group subjects. Every other token is the cluster admin, so the
simulator's own stand-ins and tests are never restricted. Nothing is enforced until `load()` is given the
objects (tests load the chart's rendered RBAC, so a component that makes a request its role does not grant
fails there as on a real cluster). Each refusal is kept in `denials`. Used by cdctl.sim.apiserver.handlers
(one check before each request) and the tests.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from cdctl.sim.apiserver.errors import Forbidden, Unauthorized
from cdctl.sim.apiserver.identity import (
    ADMIN,
    SERVICE_ACCOUNT_PREFIX,
    TokenError,
    service_account_token,
    user_for_token,
)
from cdctl.sim.apiserver.queryparams import is_true

__all__ = [
    "SERVICE_ACCOUNT_PREFIX",
    "Rbac",
    "RequestAttributes",
    "request_attributes",
    "service_account_token",
]


@dataclass(frozen=True)
class RequestAttributes:
    """What RBAC decides on: verb, API group, resource (with subresource), namespace ('' if none), name."""

    verb: str
    group: str
    resource: str
    namespace: str
    name: str

    def describe(self) -> str:
        scope = f'in the namespace "{self.namespace}"' if self.namespace else "at the cluster scope"
        group = f'in API group "{self.group}"'
        return f'cannot {self.verb} resource "{self.resource}" {group} {scope}'


def request_attributes(method: str, path: str, query: Mapping[str, str]) -> RequestAttributes | None:
    """The RBAC attributes of a resource request; None for discovery and other non-resource paths."""
    parts = [p for p in path.split("/") if p]
    if parts[:2] == ["api", "v1"]:
        group, rest = "", parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, rest = parts[1], parts[3:]
    else:
        return None
    if not rest:
        return None  # a group version's discovery document
    namespace = ""
    if rest[0] == "namespaces" and len(rest) >= 3:
        namespace, rest = rest[1], rest[2:]
    resource, name = rest[0], rest[1] if len(rest) > 1 else ""
    if len(rest) > 2:
        resource = f"{resource}/{rest[2]}"
    if resource == "namespaces" and name and len(rest) == 2:
        namespace = name  # a namespace object is authorized within itself, as Kubernetes does
    verb = {"POST": "create", "PUT": "update", "PATCH": "patch"}.get(method.upper())
    if verb is None:
        if method.upper() == "DELETE":
            verb = "delete" if name else "deletecollection"
        elif name:
            verb = "get"
        else:
            verb = "watch" if is_true(query.get("watch")) else "list"
    return RequestAttributes(verb, group, resource, namespace, name)


@dataclass(frozen=True)
class _Rule:
    groups: frozenset[str]
    resources: frozenset[str]
    verbs: frozenset[str]
    names: frozenset[str]

    def allows(self, attrs: RequestAttributes) -> bool:
        return (
            _has(self.groups, attrs.group)
            and _has(self.resources, attrs.resource)
            and _has(self.verbs, attrs.verb)
            and (not self.names or attrs.name in self.names)
        )


def _has(values: frozenset[str], value: str) -> bool:
    return "*" in values or value in values


@dataclass
class Rbac:
    """Grants per service account: (namespace or '' for everywhere, rule)."""

    enforcing: bool = False
    grants: dict[str, list[tuple[str, _Rule]]] = field(default_factory=dict)
    denials: list[str] = field(default_factory=list)

    def load(self, objects: Iterable[Mapping[str, Any]]) -> None:
        """Enforce the Roles, ClusterRoles and bindings among `objects` (other kinds are ignored)."""
        objects = list(objects)
        roles: dict[tuple[str, str, str], list[_Rule]] = {}
        for obj in objects:
            if obj.get("kind") in {"Role", "ClusterRole"}:
                meta = obj["metadata"]
                namespace = meta.get("namespace", "") if obj["kind"] == "Role" else ""
                roles[(obj["kind"], namespace, meta["name"])] = [_rule(r) for r in obj.get("rules") or []]
        grants: dict[str, list[tuple[str, _Rule]]] = {}
        for obj in objects:
            if obj.get("kind") not in {"RoleBinding", "ClusterRoleBinding"}:
                continue
            where = obj["metadata"].get("namespace", "") if obj["kind"] == "RoleBinding" else ""
            ref = obj["roleRef"]
            rules = roles.get((ref["kind"], where if ref["kind"] == "Role" else "", ref["name"]), [])
            for subject in obj.get("subjects") or []:
                key = _subject_key(subject, where)
                if key:
                    grants.setdefault(key, []).extend((where, rule) for rule in rules)
        self.grants, self.enforcing = grants, True

    def check(self, token: str, attrs: RequestAttributes) -> Forbidden | Unauthorized | None:
        """None when allowed; the API server's 403 otherwise (and the refusal is recorded). A token bound to a
        pod has its service account's grants, a user's token its own and its groups'; a malformed, forged
        or expired one is a 401."""
        if not self.enforcing:
            return None
        try:
            user = user_for_token(token)
        except TokenError as error:
            return Unauthorized(str(error))
        if user is ADMIN:
            return None
        token = user.username
        keys = [token, *(f"{GROUP_KEY}{group}" for group in user.groups)]
        for key in keys:
            for where, rule in self.grants.get(key, ()):
                if (not where or where == attrs.namespace) and rule.allows(attrs):
                    return None
        target = f"{attrs.resource.split('/')[0]}{'.' + attrs.group if attrs.group else ''}"
        named = f' "{attrs.name}"' if attrs.name else ""
        message = f'{target}{named} is forbidden: User "{token}" {attrs.describe()}'
        self.denials.append(message)
        return Forbidden(message)

    def check_request(
        self, authorization: str | None, method: str, path: str, query: Mapping[str, str]
    ) -> Forbidden | Unauthorized | None:
        if not self.enforcing:
            return None
        attrs = request_attributes(method, path, query)
        if attrs is None:
            return None  # discovery: every authenticated user may read it
        token = (authorization or "").removeprefix("Bearer ").strip()
        return self.check(token, attrs)


GROUP_KEY = "group:"


def _subject_key(subject: Mapping[str, Any], where: str) -> str:
    """The grants key of a binding's subject: the service account's or user's name, or the group's."""
    kind, name = subject.get("kind"), str(subject.get("name", ""))
    if kind == "ServiceAccount":
        return service_account_token(subject.get("namespace", where), name)
    if kind == "User":
        return name
    if kind == "Group":
        return f"{GROUP_KEY}{name}"
    return ""


def _rule(raw: Mapping[str, Any]) -> _Rule:
    return _Rule(
        frozenset(raw.get("apiGroups") or ()),
        frozenset(raw.get("resources") or ()),
        frozenset(raw.get("verbs") or ()),
        frozenset(raw.get("resourceNames") or ()),
    )
