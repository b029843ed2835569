"""CEL of ValidatingAdmissionPolicies: compiling a policy's expressions and evaluating them on one request.

`compile_expression` parses an expression with the `cel` module (common-expression-language) and checks the
names it uses against what an admission policy may see (`object`, `oldObject`, `request`, `params`,
`namespaceObject`, `variables.<declared>`, CEL's type names) and the functions it calls against what the
simulator evaluates (the `cel` module's own and Kubernetes' library functions of
cdctl.sim.apiserver.cellibrary), so a policy the simulator cannot run is refused when it is written
(`PolicyCompileError`), never silently left unenforced. The module does not parse CEL's optional syntax
(`x[?'k']`, `.?f`, `.orValue()`): policies use `has()`, `in` and ternaries instead. `Activation` evaluates
expressions on one request's values; `variables` are computed on first reference and kept, and a variable
that fails only fails the expressions that need its value (the real server's lazy variables). Used by
cdctl.sim.apiserver.policies.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import cel

from cdctl.sim.apiserver.cellibrary import LIBRARY, NATIVE, TYPE_NAMES

# The activation of an admission policy (authorizer is not simulated: a policy using it is refused).
ROOTS = frozenset({"object", "oldObject", "request", "params", "namespaceObject", "variables"})
_VARIABLE_RE = re.compile(r"\bvariables\s*\.\s*([A-Za-z_][A-Za-z0-9_]*)")
# Identifiers bound by the comprehension macros (`list.all(x, ...)`, `map.exists(k, ...)`, ...).
_BOUND_RE = re.compile(r"\.\s*(?:all|exists|exists_one|map|filter)\s*\(\s*([A-Za-z_][A-Za-z0-9_]*)\s*,")


class PolicyCompileError(ValueError):
    """An expression the simulator cannot compile, or that names something a policy cannot see."""


class EvaluationError(Exception):
    """An expression that failed at run time (missing field, wrong type, a failed variable)."""


@dataclass(frozen=True)
class Expression:
    source: str
    program: Any  # cel.Program
    roots: frozenset[str]  # the activation names it reads
    variables: tuple[str, ...]  # the `variables.<name>` it reads
    library: tuple[str, ...] = ()  # the cdctl.sim.apiserver.cellibrary functions it calls


def compile_expression(source: str, declared: frozenset[str]) -> Expression:
    """Compile `source`; `declared` are the variable names it may reference."""
    try:
        program = cel.compile(source)
    except ValueError as error:
        raise PolicyCompileError(f"compilation failed: {error}") from error
    roots = frozenset(str(name) for name in program.variables()) & ROOTS
    named = {str(name) for name in program.variables()}
    unknown = sorted(named - ROOTS - TYPE_NAMES - set(_BOUND_RE.findall(source)))
    if unknown:
        raise PolicyCompileError(f"compilation failed: undeclared reference to {', '.join(unknown)}")
    # Operators are named `_+_`, `!_`, `-_`, `@in`, ...; anything else is a function the server must know.
    functions = {str(name) for name in program.functions() if str(name)[:1].isalpha()}
    undeclared = sorted(functions - NATIVE - set(LIBRARY))
    if undeclared:
        raise PolicyCompileError(
            f"compilation failed: undeclared reference to function(s) {', '.join(undeclared)}"
        )
    used = tuple(dict.fromkeys(_VARIABLE_RE.findall(source)))
    missing = [name for name in used if name not in declared]
    if missing:
        raise PolicyCompileError(f"compilation failed: undefined variable(s) {', '.join(missing)}")
    if "variables" in roots and not used:
        raise PolicyCompileError("compilation failed: variables must be referenced as variables.<name>")
    return Expression(source, program, roots, used, tuple(sorted(functions & set(LIBRARY))))


class Activation:
    """One request's values for a policy's expressions, with its variables computed lazily."""

    def __init__(self, values: Mapping[str, Any], variables: Mapping[str, Expression]) -> None:
        self._values = dict(values)
        self._declared = variables
        self._results: dict[str, Any] = {}
        self._errors: dict[str, EvaluationError] = {}

    def _variable(self, name: str) -> Any:
        if name in self._errors:
            raise self._errors[name]
        if name not in self._results:
            try:
                self._results[name] = self.evaluate(self._declared[name])
            except EvaluationError as error:
                self._errors[name] = EvaluationError(f"variable {name!r}: {error}")
                raise self._errors[name] from error
        return self._results[name]

    def evaluate(self, expression: Expression) -> Any:
        """The expression's value; EvaluationError when it (or a variable it needs) fails. A variable that
        fails is left out of `variables`, so a branch CEL does not take (`true || variables.failed`) still
        passes, as on the real server."""
        context = {root: self._values.get(root) for root in expression.roots if root != "variables"}
        failed: list[EvaluationError] = []
        if "variables" in expression.roots:
            variables: dict[str, Any] = {}
            for name in expression.variables:
                try:
                    variables[name] = self._variable(name)
                except EvaluationError as error:
                    failed.append(error)
            context["variables"] = variables
        try:
            if expression.library:
                environment = cel.Context(context)
                for name in expression.library:
                    environment.add_function(name, LIBRARY[name])
                return expression.program.execute(environment)
            return expression.program.execute(context)
        except Exception as error:  # the cel module raises KeyError, TypeError, RuntimeError, ...
            if failed:
                raise failed[0] from error
            detail = error.args[0] if isinstance(error, KeyError) and error.args else error
            raise EvaluationError(f"{type(error).__name__}: {detail}") from error

    def evaluate_bool(self, expression: Expression) -> bool:
        result = self.evaluate(expression)
        if not isinstance(result, bool):
            raise EvaluationError(f"expression returned {type(result).__name__}, not bool")
        return result
