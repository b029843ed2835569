"""Events the stand-in controllers record about the objects they act on, as client-go's event recorder does.

`record(store, obj, type_, reason, message, component)` creates a core/v1 Event in the object's namespace
naming it as `involvedObject`; the same reason and message about the same object again raises that Event's
`count` and `lastTimestamp` instead of adding one (the recorder's correlator). Used by
cdctl.sim.controllers.daemonsets (FailedCreate when the API server refuses a pod) and
cdctl.sim.controllers.claimtemplates (FailedResourceClaimCreation when it refuses a pod's claim).
"""

from __future__ import annotations

import hashlib
from typing import Any

from cdctl.sim.apiserver.errors import NotFound
from cdctl.sim.apiserver.objectmeta import now_rfc3339
from cdctl.sim.apiserver.store import ObjectStore

EVENTS = ("", "events")


def record(
    store: ObjectStore, obj: dict[str, Any], type_: str, reason: str, message: str, component: str
) -> dict[str, Any]:
    """Create the Event, or count it once more when the same one was recorded about `obj` before."""
    metadata = obj["metadata"]
    namespace = metadata.get("namespace") or "default"
    key = f"{metadata['uid']}/{type_}/{reason}/{message}".encode()
    name = f"{metadata['name']}.{hashlib.sha256(key).hexdigest()[:16]}"
    events = store.type_of(*EVENTS)
    now = now_rfc3339()
    try:
        existing = store.get(events, namespace, name)
    except NotFound:
        involved = {
            "apiVersion": obj.get("apiVersion", ""),
            "kind": obj.get("kind", ""),
            "namespace": metadata.get("namespace", ""),
            "name": metadata["name"],
            "uid": metadata["uid"],
            "resourceVersion": metadata.get("resourceVersion", ""),
        }
        body = {
            "metadata": {"name": name, "namespace": namespace},
            "involvedObject": involved,
            "type": type_,
            "reason": reason,
            "message": message,
            "source": {"component": component},
            "count": 1,
            "firstTimestamp": now,
            "lastTimestamp": now,
        }
        return store.create(events, namespace, body)
    existing.update(count=int(existing.get("count") or 1) + 1, lastTimestamp=now)
    return store.update(events, namespace, name, existing)
