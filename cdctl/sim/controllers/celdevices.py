"""DeviceClass and request CEL selectors evaluated against ResourceSlice devices, as the scheduler does.

`device_context(driver, device)` builds the CEL variable `device` (`driver`, `attributes[<domain>][<name>]`,
`capacity[<domain>][<name>]`); `selectors_match(selectors, context)` evaluates a list of `{cel: {expression}}`
with the `cel` module (common-expression-language). Used by cdctl.sim.controllers.allocator.
"""

from __future__ import annotations

import logging
from typing import Any

import cel

log = logging.getLogger(__name__)


class SelectorError(Exception):
    """A CEL selector that does not compile or does not evaluate to a bool."""


def _attribute_value(value: dict[str, Any]) -> Any:
    for kind in ("int", "bool", "string", "version"):
        if kind in value:
            return value[kind]
    return None


def _qualified(driver: str, name: str) -> tuple[str, str]:
    domain, slash, identifier = name.rpartition("/")
    return (domain, identifier) if slash else (driver, name)


def device_context(driver: str, device: dict[str, Any]) -> dict[str, Any]:
    """The `device` CEL variable for one v1-shaped device of a slice published by `driver`."""
    attributes: dict[str, dict[str, Any]] = {}
    for name, value in (device.get("attributes") or {}).items():
        domain, identifier = _qualified(driver, name)
        attributes.setdefault(domain, {})[identifier] = _attribute_value(value or {})
    capacity: dict[str, dict[str, Any]] = {}
    for name, value in (device.get("capacity") or {}).items():
        domain, identifier = _qualified(driver, name)
        capacity.setdefault(domain, {})[identifier] = (value or {}).get("value")
    return {"device": {"driver": driver, "attributes": attributes, "capacity": capacity}}


def selector_matches(expression: str, context: dict[str, Any]) -> bool:
    """One CEL selector. A lookup of an attribute the device lacks counts as no match."""
    try:
        result = cel.evaluate(expression, context)
    except (KeyError, IndexError):
        return False
    except Exception as error:
        raise SelectorError(f"CEL selector {expression!r}: {error}") from error
    if not isinstance(result, bool):
        raise SelectorError(f"CEL selector {expression!r} returned {type(result).__name__}, not bool")
    return result


def selectors_match(selectors: list[dict[str, Any]], context: dict[str, Any]) -> bool:
    return all(
        selector_matches(str((selector.get("cel") or {}).get("expression", "true")), context)
        for selector in selectors
    )
