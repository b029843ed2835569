"""ValidatingAdmissionPolicies (admissionregistration.k8s.io/v1) enforced by the simulated API server.

The object store (cdctl.sim.apiserver.store) calls `admit(request)` on every CREATE, UPDATE (a PATCH is an
UPDATE) and DELETE, after the object's own validation, and `observe()` when a policy or binding is written.
Writing a policy compiles it (cdctl.sim.apiserver.policycel): an expression the simulator cannot compile, or a
feature it does not evaluate (paramKind, selectors, the authorizer), is refused with 422 so no policy is
silently left unenforced. The real server's semantics:

- `matchConstraints.resourceRules` / `excludeResourceRules`: apiGroups, apiVersions, operations and
  resources (`*`, `pods/status`, `pods/*`, `*/*`), scope. A request is seen in the version it was written in
  (`object`, `oldObject`, `request.resource` and `request.kind` of that version); under matchPolicy
  Equivalent (the default) a request in a version no rule names still matches a rule naming another served
  version of the resource, and is then seen converted to it (`request.requestResource` and
  `request.requestKind` keep what the client wrote). `request.name` is the name in the request: empty for a
  create by generateName, while `object.metadata.name` holds the generated name.
- `matchConditions`: any false skips the policy; otherwise an error applies the failurePolicy.
- `validations`: each must be true; false denies with `messageExpression`, else `message`, else
  `failed expression: <expr>` (a messageExpression that fails, or gives a blank string or one with a line
  break, falls back the same way); an error denies under failurePolicy Fail (the default) and is skipped under
  Ignore. `reason` picks the HTTP code (Invalid 422 by default, Forbidden 403, Unauthorized 401,
  RequestEntityTooLarge 413).
- A policy applies only through its bindings; `validationActions` Deny refuses the request, Warn and Audit
  only record the message (in `warnings` and `audits`; no warning header is sent). `admitted` counts, per
  (policy, username), the requests a policy applied to and let through, so a test can tell a policy that
  passed a write from one that never saw it.

Policies apply to every identity, the cluster admin included: a policy keeps to one component by matching
`request.userInfo.username` in its matchConditions. In-process writes of the simulator's stand-ins are made
as the admin (cdctl.sim.apiserver.identity.ADMIN).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from cdctl.sim.apiserver.conversion import convert
from cdctl.sim.apiserver.errors import ApiError, Invalid
from cdctl.sim.apiserver.identity import ADMIN, UserInfo
from cdctl.sim.apiserver.policycel import (
    Activation,
    EvaluationError,
    Expression,
    PolicyCompileError,
    compile_expression,
)
from cdctl.sim.apiserver.resources import ResourceRegistry, ResourceType, version_priority

GROUP = "admissionregistration.k8s.io"
POLICY_KEY = (GROUP, "validatingadmissionpolicies")
BINDING_KEY = (GROUP, "validatingadmissionpolicybindings")
_REASON_CODES = {"Invalid": 422, "Forbidden": 403, "Unauthorized": 401, "RequestEntityTooLarge": 413}
_ACTIONS = frozenset({"Deny", "Warn", "Audit"})
_MATCH_POLICIES = ("Equivalent", "Exact")


class PolicyDenied(ApiError):
    """A request a ValidatingAdmissionPolicy refused (422 Invalid unless the validation names a reason)."""

    code = 422
    reason = "Invalid"


@dataclass(frozen=True)
class AdmissionRequest:
    """What admission sees of one write: `obj` and `old` in the version of `resource_type`."""

    operation: str  # CREATE, UPDATE or DELETE
    resource_type: ResourceType
    namespace: str
    name: str  # as in the request: "" for a create by generateName
    obj: Mapping[str, Any] | None
    old: Mapping[str, Any] | None
    subresource: str = ""
    user: UserInfo = ADMIN
    dry_run: bool = False
    requested: ResourceType | None = None  # the version written, when a policy sees an equivalent one

    def as_cel(self) -> dict[str, Any]:
        rt, original = self.resource_type, self.requested or self.resource_type
        return {
            "operation": self.operation,
            "userInfo": self.user.as_cel(),
            "namespace": self.namespace,
            "name": self.name,
            "resource": {"group": rt.group, "version": rt.version, "resource": rt.plural},
            "subResource": self.subresource,
            "kind": {"group": rt.group, "version": rt.version, "kind": rt.kind},
            "requestResource": {
                "group": original.group,
                "version": original.version,
                "resource": original.plural,
            },
            "requestSubResource": self.subresource,
            "requestKind": {"group": original.group, "version": original.version, "kind": original.kind},
            "dryRun": self.dry_run,
        }

    def in_version(self, target: ResourceType) -> AdmissionRequest:
        """The request as a policy matching `target`, another served version of its resource, sees it."""
        source = self.resource_type
        return replace(
            self,
            resource_type=target,
            obj=None if self.obj is None else convert(dict(self.obj), source, target),
            old=None if self.old is None else convert(dict(self.old), source, target),
            requested=self.requested or source,
        )


@dataclass(frozen=True)
class _Rule:
    groups: frozenset[str]
    versions: frozenset[str]
    operations: frozenset[str]
    resources: frozenset[str]
    scope: str

    def matches(self, request: AdmissionRequest, *, any_version: bool = False) -> bool:
        """Whether the rule covers the request (`any_version`: whatever its version)."""
        rt = request.resource_type
        if not ({"*", rt.group} & self.groups and {"*", request.operation} & self.operations):
            return False
        if not any_version and not {"*", rt.version} & self.versions:
            return False
        if (self.scope == "Cluster" and rt.namespaced) or (self.scope == "Namespaced" and not rt.namespaced):
            return False
        if request.subresource:
            wanted = {
                f"{rt.plural}/{request.subresource}",
                f"{rt.plural}/*",
                f"*/{request.subresource}",
                "*/*",
            }
        else:
            wanted = {rt.plural, "*"}
        return bool(wanted & self.resources)


@dataclass(frozen=True)
class _Validation:
    expression: Expression
    message: str
    message_expression: Expression | None
    reason: str


@dataclass(frozen=True)
class Policy:
    """A compiled ValidatingAdmissionPolicy."""

    name: str
    failure_policy: str
    rules: tuple[_Rule, ...]
    excluded: tuple[_Rule, ...]
    conditions: tuple[tuple[str, Expression], ...]
    variables: Mapping[str, Expression]
    validations: tuple[_Validation, ...]
    match_policy: str = "Equivalent"

    def _match(
        self, rules: tuple[_Rule, ...], request: AdmissionRequest, registry: ResourceRegistry | None
    ) -> AdmissionRequest | None:
        if any(rule.matches(request) for rule in rules):
            return request
        if self.match_policy != "Equivalent" or registry is None:
            return None
        if not any(rule.matches(request, any_version=True) for rule in rules):
            return None
        rt = request.resource_type
        others = sorted(
            (
                t
                for t in registry.types()
                if t.group == rt.group and t.plural == rt.plural and t.version != rt.version
            ),
            key=lambda t: version_priority(t.version),
        )
        for other in others:
            seen = request.in_version(other)
            if any(rule.matches(seen) for rule in rules):
                return seen
        return None

    def match(
        self, request: AdmissionRequest, registry: ResourceRegistry | None = None
    ) -> AdmissionRequest | None:
        """The request as this policy sees it (in the version its rules match), or None when it does not
        apply. `registry` gives the equivalent versions (none without it)."""
        if self._match(self.excluded, request, registry) is not None:
            return None
        return self._match(self.rules, request, registry)

    def decide(self, request: AdmissionRequest) -> tuple[str, str] | None:
        """None when the request passes (or the policy does not apply); else (reason, message)."""
        return self.evaluate(request)[1]

    def evaluate(self, request: AdmissionRequest) -> tuple[bool, tuple[str, str] | None]:
        """(whether the matchConditions let the policy apply, the refusal or None)."""
        activation = Activation(
            {"object": request.obj, "oldObject": request.old, "request": request.as_cel()}, self.variables
        )
        failed: str | None = None
        for name, condition in self.conditions:
            try:
                if not activation.evaluate_bool(condition):
                    return False, None
            except EvaluationError as error:
                failed = failed or f"failed to evaluate matchCondition {name!r}: {error}"
        if failed is not None:
            return (True, ("Invalid", failed)) if self.failure_policy == "Fail" else (False, None)
        for validation in self.validations:
            try:
                passed = activation.evaluate_bool(validation.expression)
            except EvaluationError as error:
                if self.failure_policy == "Fail":
                    return True, (
                        validation.reason,
                        f"expression '{validation.expression.source}' resulted in error: {error}",
                    )
                continue
            if not passed:
                return True, (validation.reason, _message(activation, validation))
        return True, None


def _message(activation: Activation, validation: _Validation) -> str:
    if validation.message_expression is not None:
        try:
            text = activation.evaluate(validation.message_expression)
        except EvaluationError:
            text = None
        if isinstance(text, str) and text.strip() and "\n" not in text:
            return text.strip()
    return validation.message or f"failed expression: {validation.expression.source.strip()}"


def _rules(raw: Any) -> tuple[_Rule, ...]:
    rules = []
    for rule in raw or ():
        for key in ("apiGroups", "apiVersions", "operations", "resources"):
            if not rule.get(key):
                raise PolicyCompileError(f"{key}: Required value")
        rules.append(
            _Rule(
                frozenset(rule["apiGroups"]),
                frozenset(rule["apiVersions"]),
                frozenset(rule["operations"]),
                frozenset(rule["resources"]),
                str(rule.get("scope") or "*"),
            )
        )
    return tuple(rules)


def _unsupported(field_path: str, value: Any) -> None:
    if value:
        raise PolicyCompileError(f"{field_path}: not evaluated by the simulated API server")


def compile_policy(obj: Mapping[str, Any]) -> Policy:
    """Compile a ValidatingAdmissionPolicy; raises Invalid (422) naming the field that cannot be run."""
    name = str((obj.get("metadata") or {}).get("name", ""))
    spec = obj.get("spec") or {}
    where = "spec"
    try:
        constraints = spec.get("matchConstraints") or {}
        for key in ("namespaceSelector", "objectSelector"):
            where = f"spec.matchConstraints.{key}"
            _unsupported(
                where,
                (constraints.get(key) or {}).get("matchLabels")
                or (constraints.get(key) or {}).get("matchExpressions"),
            )
        where = "spec.paramKind"
        _unsupported(where, spec.get("paramKind"))
        where = "spec.matchConstraints.matchPolicy"
        match_policy = str(constraints.get("matchPolicy") or "Equivalent")
        if match_policy not in _MATCH_POLICIES:
            raise PolicyCompileError(f'Unsupported value: "{match_policy}"')
        where = "spec.matchConstraints.resourceRules"
        rules = _rules(constraints.get("resourceRules"))
        if not rules:
            raise PolicyCompileError("Required value")
        where = "spec.matchConstraints.excludeResourceRules"
        excluded = _rules(constraints.get("excludeResourceRules"))
        where = "spec.failurePolicy"
        failure_policy = str(spec.get("failurePolicy") or "Fail")
        if failure_policy not in ("Fail", "Ignore"):
            raise PolicyCompileError(f'Unsupported value: "{failure_policy}"')
        declared: dict[str, Expression] = {}
        for index, variable in enumerate(spec.get("variables") or ()):
            where = f"spec.variables[{index}].expression"
            declared[str(variable["name"])] = compile_expression(
                str(variable["expression"]), frozenset(declared)
            )
        names = frozenset(declared)
        conditions = []
        for index, condition in enumerate(spec.get("matchConditions") or ()):
            where = f"spec.matchConditions[{index}].expression"
            conditions.append(
                (str(condition["name"]), compile_expression(str(condition["expression"]), frozenset()))
            )
        validations = []
        if not spec.get("validations"):
            where = "spec.validations"
            raise PolicyCompileError("Required value: a policy needs validations")
        for index, validation in enumerate(spec["validations"]):
            where = f"spec.validations[{index}].expression"
            expression = compile_expression(str(validation["expression"]), names)
            where = f"spec.validations[{index}].messageExpression"
            raw_message = validation.get("messageExpression")
            message_expression = compile_expression(str(raw_message), names) if raw_message else None
            where = f"spec.validations[{index}].reason"
            reason = str(validation.get("reason") or "Invalid")
            if reason not in _REASON_CODES:
                raise PolicyCompileError(f'Unsupported value: "{reason}"')
            validations.append(
                _Validation(expression, str(validation.get("message") or ""), message_expression, reason)
            )
    except (KeyError, TypeError, AttributeError) as error:
        raise _invalid("ValidatingAdmissionPolicy", name, where, f"malformed: {error}") from error
    except PolicyCompileError as error:
        raise _invalid("ValidatingAdmissionPolicy", name, where, str(error)) from error
    return Policy(
        name, failure_policy, rules, excluded, tuple(conditions), declared, tuple(validations), match_policy
    )


@dataclass(frozen=True)
class Binding:
    name: str
    policy: str
    actions: frozenset[str]


def compile_binding(obj: Mapping[str, Any]) -> Binding:
    """Check a ValidatingAdmissionPolicyBinding; raises Invalid for what the simulator does not evaluate."""
    name = str((obj.get("metadata") or {}).get("name", ""))
    spec = obj.get("spec") or {}
    actions = frozenset(spec.get("validationActions") or ())
    if not spec.get("policyName"):
        raise _invalid("ValidatingAdmissionPolicyBinding", name, "spec.policyName", "Required value")
    if not actions or not actions <= _ACTIONS:
        raise _invalid(
            "ValidatingAdmissionPolicyBinding", name, "spec.validationActions", f"{sorted(actions)}"
        )
    for key in ("paramRef", "matchResources"):
        if spec.get(key):
            raise _invalid(
                "ValidatingAdmissionPolicyBinding",
                name,
                f"spec.{key}",
                "not evaluated by the simulated API server",
            )
    return Binding(name, str(spec["policyName"]), actions)


def _invalid(kind: str, name: str, where: str, detail: str) -> Invalid:
    return Invalid(f'{kind}.{GROUP} "{name}" is invalid: {where}: Invalid value: {detail}')


@dataclass
class AdmissionPolicies:
    """The policies and bindings stored in the server, compiled; what they decided is kept for tests."""

    policies: dict[str, Policy] = field(default_factory=dict)
    bindings: dict[str, Binding] = field(default_factory=dict)
    registry: ResourceRegistry | None = None  # the served versions, for matchPolicy Equivalent
    denials: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    audits: list[str] = field(default_factory=list)
    admitted: Counter[tuple[str, str]] = field(default_factory=Counter)

    def check_definition(self, storage_key: tuple[str, str], obj: Mapping[str, Any]) -> None:
        """Refuse (422) a policy or binding the simulator cannot enforce, before it is stored."""
        if storage_key == POLICY_KEY:
            compile_policy(obj)
        elif storage_key == BINDING_KEY:
            compile_binding(obj)

    def observe(self, storage_key: tuple[str, str], obj: Mapping[str, Any], deleted: bool) -> None:
        """Follow a stored policy or binding (the store calls this on each of their writes)."""
        name = str(obj["metadata"]["name"])
        if storage_key == POLICY_KEY:
            if deleted:
                self.policies.pop(name, None)
            else:
                self.policies[name] = compile_policy(obj)
        elif storage_key == BINDING_KEY:
            if deleted:
                self.bindings.pop(name, None)
            else:
                self.bindings[name] = compile_binding(obj)

    def admit(self, request: AdmissionRequest) -> None:
        """Raise PolicyDenied for the first Deny binding whose policy refuses the request."""
        for binding in sorted(self.bindings.values(), key=lambda b: (b.policy, b.name)):
            policy = self.policies.get(binding.policy)
            seen = None if policy is None else policy.match(request, self.registry)
            if policy is None or seen is None:
                continue
            applied, decision = policy.evaluate(seen)
            if decision is None:
                if applied:
                    self.admitted[(policy.name, request.user.username)] += 1
                continue
            reason, detail = decision
            message = (
                f"ValidatingAdmissionPolicy '{policy.name}' with binding '{binding.name}' denied request: "
                f"{detail}"
            )
            if "Warn" in binding.actions:
                self.warnings.append(message)
            if "Audit" in binding.actions:
                self.audits.append(message)
            if "Deny" in binding.actions:
                self.denials.append(message)
                raise _denied(request, reason, message)


def _denied(request: AdmissionRequest, reason: str, message: str) -> PolicyDenied:
    rt = request.resource_type
    qualified = f"{rt.plural}.{rt.group}" if rt.group else rt.plural
    error = PolicyDenied(
        f'{qualified} "{request.name}" is forbidden: {message}',
        details={
            "name": request.name,
            "group": rt.group,
            "kind": rt.plural,
            "causes": [{"message": message}],
        },
    )
    error.code, error.reason = _REASON_CODES[reason], reason
    return error
