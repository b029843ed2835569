"""The functions a Kubernetes API server's CEL has beyond what the `cel` module evaluates natively.

The `cel` module (common-expression-language) evaluates the CEL core natively: the macros (`has`, `all`,
`exists`, `exists_one`, `map`, `filter`), the conversions (`int`, `uint`, `double`, `string`, `bytes`,
`timestamp`, `duration`, `dyn`, `type`), `size` and the string predicates. A real server adds Kubernetes'
libraries to that; this module implements the part the simulator evaluates, with the real semantics:

- `<list>.indexOf(x)` / `<list>.lastIndexOf(x)` (Kubernetes' list library, since 1.24): the first / last index
  of an element equal to `x` under CEL equality (`true` is not `1`), -1 when there is none;
- `<string>.indexOf(s[, offset])` / `<string>.lastIndexOf(s[, offset])` (cel-go's strings extension): code
  point indices, an offset outside the string is an error;
- `<string>.substring(start[, end])` (cel-go's strings extension): the code points from `start` up to `end`
  (the end of the string when left out); an index outside the string, or `start` after `end`, is an error.

`NATIVE` names the functions the module evaluates itself and `LIBRARY` maps each name implemented here to its
Python function; cdctl.sim.apiserver.policycel refuses an expression calling anything else, as a real server
refuses an undeclared function when the policy is written.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

# Functions (not operators) the `cel` module evaluates natively, timestamp and duration accessors included.
NATIVE = frozenset(
    {
        "size",
        "contains",
        "startsWith",
        "endsWith",
        "matches",
        "int",
        "uint",
        "double",
        "string",
        "bytes",
        "timestamp",
        "duration",
        "dyn",
        "type",
        "getFullYear",
        "getMonth",
        "getDayOfYear",
        "getDayOfMonth",
        "getDate",
        "getDayOfWeek",
        "getHours",
        "getMinutes",
        "getSeconds",
        "getMilliseconds",
    }
)
# Identifiers CEL resolves without a declaration: the type names (`type(x) == map`).
TYPE_NAMES = frozenset(
    {"bool", "bytes", "double", "int", "list", "map", "null_type", "string", "type", "uint"}
)


def cel_equal(left: Any, right: Any) -> bool:
    """CEL's `==` on values as the `cel` module hands them to Python: numbers compare across int and double,
    a bool equals only a bool, lists and maps compare element by element, other types never equal."""
    if isinstance(left, bool) or isinstance(right, bool):
        return isinstance(left, bool) and isinstance(right, bool) and left == right
    if isinstance(left, int | float) and isinstance(right, int | float):
        return left == right
    if isinstance(left, list) and isinstance(right, list):
        return len(left) == len(right) and all(cel_equal(a, b) for a, b in zip(left, right, strict=True))
    if isinstance(left, Mapping) and isinstance(right, Mapping):
        if len(left) != len(right):
            return False
        for key, value in left.items():
            match = [other for other in right if cel_equal(key, other)]
            if not match or not cel_equal(value, right[match[0]]):
                return False
        return True
    return type(left) is type(right) and bool(left == right)


def _string_index(text: str, sub: Any, offset: int | None, last: bool) -> int:
    if not isinstance(sub, str):
        raise TypeError("no such overload: string.indexOf needs a string argument")
    if offset is None:
        return text.rfind(sub) if last else text.find(sub)
    if not isinstance(offset, int) or isinstance(offset, bool) or not 0 <= offset <= len(text):
        raise IndexError(f"index out of range: {offset}")
    return text.rfind(sub, 0, offset + len(sub)) if last else text.find(sub, offset)


def index_of(receiver: Any, element: Any, offset: int | None = None) -> int:
    if isinstance(receiver, str):
        return _string_index(receiver, element, offset, last=False)
    if isinstance(receiver, list) and offset is None:
        return next((i for i, item in enumerate(receiver) if cel_equal(item, element)), -1)
    raise TypeError(f"no such overload: indexOf on {type(receiver).__name__}")


def last_index_of(receiver: Any, element: Any, offset: int | None = None) -> int:
    if isinstance(receiver, str):
        return _string_index(receiver, element, offset, last=True)
    if isinstance(receiver, list) and offset is None:
        matches = [i for i, item in enumerate(receiver) if cel_equal(item, element)]
        return matches[-1] if matches else -1
    raise TypeError(f"no such overload: lastIndexOf on {type(receiver).__name__}")


def substring(text: Any, start: Any, end: Any = None) -> str:
    if not isinstance(text, str):
        raise TypeError(f"no such overload: substring on {type(text).__name__}")
    stop = len(text) if end is None else end
    for index in (start, stop):
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index <= len(text):
            raise IndexError(f"index out of range: {index}")
    if start > stop:
        raise IndexError(f"invalid substring range. start: {start}, end: {stop}")
    return text[start:stop]


LIBRARY: Mapping[str, Callable[..., Any]] = {
    "indexOf": index_of,
    "lastIndexOf": last_index_of,
    "substring": substring,
}
