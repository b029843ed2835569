"""Node access for the kubelet plugin: its UID, the ComputeDomain label and the GPU clique label.

Called by the plugin's cluster adapter (cdctl.k8s.plugincluster) and start-up. The label is decided on the
plugin's watched copy of the Node when it has one (no request when the label is already right) and written
with that copy's resourceVersion, so a concurrent change or a stale copy answers 409 and the write re-reads
the Node and decides again (the Go driver GETs and Updates every time).
"""

from __future__ import annotations

from collections.abc import Callable

from cdctl.api.refs import COMPUTE_DOMAIN_LABEL, GPU_CLIQUE_LABEL
from cdctl.domain.errors import RetriableError
from cdctl.k8s.errors import ConflictError
from cdctl.k8s.resources import NODES
from cdctl.k8s.rest import JsonObject, KubeApi


class LabelConflict(RetriableError):
    """The node carries the label of another ComputeDomain."""


async def get_node(api: KubeApi, name: str) -> JsonObject:
    return await api.get(NODES.object_path(None, name))


def _label(obj: JsonObject) -> str | None:
    return ((obj.get("metadata") or {}).get("labels") or {}).get(COMPUTE_DOMAIN_LABEL)


def _label_patch(obj: JsonObject, value: str | None) -> JsonObject:
    meta = obj.get("metadata") or {}
    return {
        "metadata": {"resourceVersion": meta.get("resourceVersion"), "labels": {COMPUTE_DOMAIN_LABEL: value}}
    }


def _add_patch(obj: JsonObject, domain_uid: str) -> JsonObject | None:
    current = _label(obj)
    if current == domain_uid:
        return None
    if current:
        raise LabelConflict(f"label already exists for a different ComputeDomain ({current})", delay=1.0)
    return _label_patch(obj, domain_uid)


def _remove_patch(obj: JsonObject, domain_uid: str) -> JsonObject | None:
    return _label_patch(obj, None) if _label(obj) == domain_uid else None


async def _write_label(
    api: KubeApi,
    node: str,
    known: JsonObject | None,
    decide: Callable[[JsonObject], JsonObject | None],
) -> JsonObject | None:
    """Decide on `known` (a watched copy) when given, else on a fresh read; a 409 on a stale copy re-reads
    and decides again. Returns the node as last read or written (None when nothing was requested)."""
    if known is not None:
        patch = decide(known)
        if patch is None:
            return None
        try:
            return await api.merge_patch(NODES.object_path(None, node), patch)
        except ConflictError:
            pass  # the copy was stale: decide again on a fresh one
    obj = await get_node(api, node)
    patch = decide(obj)
    if patch is None:
        return obj
    return await api.merge_patch(NODES.object_path(None, node), patch)


async def add_domain_label(
    api: KubeApi, node: str, domain_uid: str, known: JsonObject | None = None
) -> JsonObject | None:
    """Label the node with the domain UID, deciding on `known` (the plugin's watched copy) when given: no
    request at all when it already carries this label. Another domain's label is a LabelConflict; one seen
    on the watched copy is confirmed on a fresh read first. Returns the node as last read or written."""
    if known is not None and _label(known) not in (None, domain_uid):
        known = None  # a conflict is decided on a fresh copy only
    return await _write_label(api, node, known, lambda obj: _add_patch(obj, domain_uid))


async def remove_domain_label(
    api: KubeApi, node: str, domain_uid: str, known: JsonObject | None = None
) -> JsonObject | None:
    """Remove the label only if it names this domain (decided on `known` when given, like add_domain_label).
    Returns the node as last read or written (None when nothing was requested)."""
    return await _write_label(api, node, known, lambda obj: _remove_patch(obj, domain_uid))


async def set_gpu_clique_label(api: KubeApi, node: str, clique_id: str) -> JsonObject | None:
    """Make the node's nvidia.com/gpu.clique label say `clique_id` (removed when "": no clique), decided on a
    fresh read and written with its resourceVersion (a concurrent change answers 409, a retriable error).
    Returns the node as last read or written."""

    def decide(obj: JsonObject) -> JsonObject | None:
        meta = obj.get("metadata") or {}
        if (meta.get("labels") or {}).get(GPU_CLIQUE_LABEL) == (clique_id or None):
            return None
        labels = {GPU_CLIQUE_LABEL: clique_id or None}
        return {"metadata": {"resourceVersion": meta.get("resourceVersion"), "labels": labels}}

    return await _write_label(api, node, None, decide)
