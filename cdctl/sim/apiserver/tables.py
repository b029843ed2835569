"""`meta.k8s.io/v1 Table` answers for clients that ask for them (kubectl get sends `Accept: ...;as=Table`).

Called by cdctl.sim.apiserver.handlers for GET and LIST. The columns are the real server's: a custom
resource's are Name and its version's `additionalPrinterColumns` (a simple `.a.b.c` jsonPath each; Age when
the CRD lists none, as the real server defaults); a pod's are kubectl's (Ready, Status, Restarts, Age; IP and
Node with `-o wide`); any other kind's, Name and Age. A `date` column is shown as an age, as kubectl does.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from cdctl.sim.apiserver.resources import ResourceType

Cell = Callable[[dict[str, Any]], Any]
AGE_COLUMN = {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}


def wants_table(accept: str) -> bool:
    return "as=Table" in accept


def _age(timestamp: str | None) -> str:
    if not timestamp:
        return "<unknown>"
    try:
        created = datetime.strptime(timestamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    except ValueError:
        return "<invalid>"
    seconds = max(0, int((datetime.now(UTC) - created).total_seconds()))
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    return f"{seconds // 3600}h"


def json_path(obj: Any, path: str) -> Any:
    """The value at a simple jsonPath (`.status.status`); None where any step is missing."""
    for step in path.strip().lstrip(".").split("."):
        if not isinstance(obj, dict) or step not in obj:
            return None
        obj = obj[step]
    return obj


def _column(spec: dict[str, Any]) -> tuple[dict[str, Any], Cell]:
    kind = str(spec.get("type") or "string")
    definition = {
        "name": spec.get("name", ""),
        "type": "string" if kind == "date" else kind,
        "format": "",
        "description": spec.get("description", ""),
        "priority": int(spec.get("priority") or 0),
    }
    path = str(spec.get("jsonPath", ""))

    def cell(obj: dict[str, Any]) -> Any:
        value = json_path(obj, path)
        if kind == "date":
            return _age(value) if isinstance(value, str) else "<unknown>"
        return value  # a missing field is a null cell, as the real server's (kubectl prints <none>)

    return definition, cell


def _pod_ready(pod: dict[str, Any]) -> str:
    containers = (pod.get("spec") or {}).get("containers") or []
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return f"{sum(1 for s in statuses if s.get('ready'))}/{len(containers)}"


def _pod_status(pod: dict[str, Any]) -> str:
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return "Terminating"
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        waiting = (status.get("state") or {}).get("waiting") or {}
        if waiting.get("reason"):
            return str(waiting["reason"])
    return str((pod.get("status") or {}).get("phase") or "Pending")


def _pod_restarts(pod: dict[str, Any]) -> int:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return sum(int(s.get("restartCount") or 0) for s in statuses)


def _pod_columns() -> list[tuple[dict[str, Any], Cell]]:
    def plain(name: str, cell: Cell, priority: int = 0) -> tuple[dict[str, Any], Cell]:
        kind = "integer" if name == "Restarts" else "string"
        return {"name": name, "type": kind, "format": "", "description": name, "priority": priority}, cell

    return [
        plain("Ready", _pod_ready),
        plain("Status", _pod_status),
        plain("Restarts", _pod_restarts),
        _column(AGE_COLUMN),
        plain("IP", lambda pod: (pod.get("status") or {}).get("podIP") or "<none>", 1),
        plain("Node", lambda pod: (pod.get("spec") or {}).get("nodeName") or "<none>", 1),
    ]


def columns_of(resource_type: ResourceType | None) -> list[tuple[dict[str, Any], Cell]]:
    if resource_type is not None and resource_type.group == "" and resource_type.plural == "pods":
        return _pod_columns()
    printer = list(resource_type.printer_columns) if resource_type is not None else []
    if resource_type is None or resource_type.builtin or not printer:
        printer = [AGE_COLUMN]
    return [_column(spec) for spec in printer]


def as_table(
    items: list[dict[str, Any]], resource_version: str, resource_type: ResourceType | None = None
) -> dict[str, Any]:
    columns = columns_of(resource_type)
    rows = []
    for item in items:
        metadata = item.get("metadata") or {}
        rows.append(
            {
                "cells": [metadata.get("name", ""), *(cell(item) for _, cell in columns)],
                "object": {
                    "kind": "PartialObjectMetadata",
                    "apiVersion": "meta.k8s.io/v1",
                    "metadata": metadata,
                },
            }
        )
    name = {"name": "Name", "type": "string", "format": "name", "description": "Name", "priority": 0}
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": resource_version},
        "columnDefinitions": [name, *(definition for definition, _ in columns)],
        "rows": rows,
    }
