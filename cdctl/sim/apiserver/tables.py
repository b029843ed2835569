"""`meta.k8s.io/v1 Table` answers for clients that ask for them (kubectl get sends `Accept: ...;as=Table`).

Called by cdctl.sim.apiserver.handlers for GET and LIST; columns are Name and Age, like a CRD without printer
columns.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any


def wants_table(accept: str) -> bool:
    return "as=Table" in accept


def _age(timestamp: str | None) -> str:
    if not timestamp:
        return "<unknown>"
    created = datetime.strptime(timestamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    seconds = max(0, int((datetime.now(UTC) - created).total_seconds()))
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    return f"{seconds // 3600}h"


def as_table(items: list[dict[str, Any]], resource_version: str) -> dict[str, Any]:
    rows = []
    for item in items:
        metadata = item.get("metadata") or {}
        rows.append(
            {
                "cells": [metadata.get("name", ""), _age(metadata.get("creationTimestamp"))],
                "object": {
                    "kind": "PartialObjectMetadata",
                    "apiVersion": "meta.k8s.io/v1",
                    "metadata": metadata,
                },
            }
        )
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": resource_version},
        "columnDefinitions": [
            {"name": "Name", "type": "string", "format": "name", "description": "Name", "priority": 0},
            {"name": "Age", "type": "string", "format": "", "description": "Age", "priority": 0},
        ],
        "rows": rows,
    }
