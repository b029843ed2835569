"""Whether a pod template may run on a node: nodeSelector, required node affinity, taints and tolerations.

Pure functions over plain dicts, used by the DaemonSet stand-in (cdctl.sim.controllers.daemonsets).
"""

from __future__ import annotations

from typing import Any

from cdctl.sim.apiserver.selectors import selector_from_match_labels

_BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")


def _expression_matches(expression: dict[str, Any], values_by_key: dict[str, str]) -> bool:
    key, operator = expression.get("key", ""), expression.get("operator", "In")
    values = [str(v) for v in expression.get("values") or []]
    present = key in values_by_key
    value = values_by_key.get(key, "")
    if operator == "In":
        return present and value in values
    if operator == "NotIn":
        return not present or value not in values
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    if operator in ("Gt", "Lt") and present and values:
        try:
            number, bound = int(value), int(values[0])
        except ValueError:
            return False
        return number > bound if operator == "Gt" else number < bound
    return False


def _term_matches(term: dict[str, Any], labels: dict[str, str], name: str) -> bool:
    return all(_expression_matches(e, labels) for e in term.get("matchExpressions") or []) and all(
        _expression_matches(e, {"metadata.name": name}) for e in term.get("matchFields") or []
    )


def affinity_allows(pod_spec: dict[str, Any], node: dict[str, Any]) -> bool:
    required = ((pod_spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms = required.get("nodeSelectorTerms") or []
    if not terms:
        return True
    labels = node["metadata"].get("labels") or {}
    return any(_term_matches(term, labels, node["metadata"]["name"]) for term in terms)


def tolerates(toleration: dict[str, Any], taint: dict[str, Any]) -> bool:
    if toleration.get("effect") and toleration.get("effect") != taint.get("effect"):
        return False
    if toleration.get("operator") == "Exists":
        return not toleration.get("key") or toleration.get("key") == taint.get("key")
    return toleration.get("key") == taint.get("key") and (toleration.get("value") or "") == (
        taint.get("value") or ""
    )


def taints_allow(pod_spec: dict[str, Any], node: dict[str, Any]) -> bool:
    tolerations = pod_spec.get("tolerations") or []
    for taint in (node.get("spec") or {}).get("taints") or []:
        if taint.get("effect") in _BLOCKING_EFFECTS and not any(tolerates(t, taint) for t in tolerations):
            return False
    return True


def pod_fits_node(pod_spec: dict[str, Any], node: dict[str, Any]) -> bool:
    labels = node["metadata"].get("labels") or {}
    return (
        selector_from_match_labels(pod_spec.get("nodeSelector")).matches(labels)
        and affinity_allows(pod_spec, node)
        and taints_allow(pod_spec, node)
    )
