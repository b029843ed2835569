"""The scheduler's node filters the DRA allocator does not cover: extended resources and inter-pod affinity.

The allocator (cdctl.sim.controllers.allocator) builds one `Placement` per pass from the store's nodes and
bound pods and asks `fits(pod, node)` before it tries a node's devices, then `bind(pod, node)` so later pods
of the same pass see the pod. Two filters, as kube-scheduler applies them:

- Extended resources (names with a `/`, such as `nvidia.com/gpu`): the sum of a node's bound, unfinished
  pods' requests plus this pod's must fit the node's `status.allocatable` (a node that does not advertise the
  resource has none). A container's `limits` stand for its `requests` when those leave the resource out.
- Required pod affinity and anti-affinity (`requiredDuringSchedulingIgnoredDuringExecution`): a term's
  `labelSelector` (matchLabels and matchExpressions) over pods in the term's `namespaces` (default: the pod's
  own), grouped by the node label `topologyKey`. Affinity holds when a matching pod runs in the node's
  topology domain, or, as in Kubernetes, when no pod matches anywhere and the pod matches its own term (the
  first pod of a group goes anywhere with the label). Anti-affinity holds when no matching pod runs there.

Nothing else (CPU, memory) is modelled here: the simulated nodes are GPU nodes with room for any pod; taints
are the allocator's to check (cdctl.sim.controllers.nodematch).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from cdctl.sim.apiserver.selectors import LabelRequirement, LabelSelector

_OPERATORS = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!exists"}


def term_selector(selector: Mapping[str, Any] | None) -> LabelSelector:
    """A metav1.LabelSelector (matchLabels and matchExpressions) as the API server's LabelSelector."""
    selector = selector or {}
    requirements = [
        LabelRequirement(str(key), "=", (str(value),))
        for key, value in (selector.get("matchLabels") or {}).items()
    ]
    for expression in selector.get("matchExpressions") or []:
        operator = _OPERATORS.get(str(expression.get("operator")))
        if operator is None:
            raise ValueError(f"unknown label selector operator {expression.get('operator')!r}")
        values = tuple(str(v) for v in expression.get("values") or [])
        requirements.append(LabelRequirement(str(expression["key"]), operator, values))
    return LabelSelector(tuple(requirements))


def extended_requests(pod: Mapping[str, Any]) -> dict[str, int]:
    """The pod's requests of extended resources (names with a '/'), summed over its containers."""
    totals: dict[str, int] = {}
    for container in (pod.get("spec") or {}).get("containers") or []:
        resources = container.get("resources") or {}
        wanted = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        for name, quantity in wanted.items():
            if "/" in str(name):
                totals[str(name)] = totals.get(str(name), 0) + int(str(quantity))
    return totals


def _required_terms(pod: Mapping[str, Any], kind: str) -> list[Mapping[str, Any]]:
    affinity = ((pod.get("spec") or {}).get("affinity") or {}).get(kind) or {}
    return list(affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or [])


def _is_active(pod: Mapping[str, Any]) -> bool:
    return not pod["metadata"].get("deletionTimestamp") and (pod.get("status") or {}).get("phase") not in (
        "Succeeded",
        "Failed",
    )


@dataclass
class Placement:
    """What the scheduler knows in one pass: node labels and allocatable, and which pods run where."""

    node_labels: dict[str, dict[str, str]]
    allocatable: dict[str, dict[str, int]]
    bound: list[tuple[dict[str, Any], str]] = field(default_factory=list)  # (pod, node)

    @classmethod
    def of(cls, nodes: Iterable[Mapping[str, Any]], pods: Iterable[dict[str, Any]]) -> Placement:
        labels: dict[str, dict[str, str]] = {}
        allocatable: dict[str, dict[str, int]] = {}
        for node in nodes:
            name = node["metadata"]["name"]
            labels[name] = dict(node["metadata"].get("labels") or {})
            advertised = (node.get("status") or {}).get("allocatable") or {}
            allocatable[name] = {str(k): int(str(v)) for k, v in advertised.items() if "/" in str(k)}
        placement = cls(labels, allocatable)
        for pod in pods:
            node_name = (pod.get("spec") or {}).get("nodeName")
            if node_name and _is_active(pod):
                placement.bound.append((pod, str(node_name)))
        return placement

    def bind(self, pod: dict[str, Any], node: str) -> None:
        self.bound.append((pod, node))

    def fits(self, pod: Mapping[str, Any], node: str) -> bool:
        return self._resources_fit(pod, node) and self._affinity_holds(pod, node)

    def _resources_fit(self, pod: Mapping[str, Any], node: str) -> bool:
        wanted = extended_requests(pod)
        if not wanted:
            return True
        uid = pod["metadata"].get("uid")
        used: dict[str, int] = {}
        for other, where in self.bound:
            if where == node and other["metadata"].get("uid") != uid:
                for name, quantity in extended_requests(other).items():
                    used[name] = used.get(name, 0) + quantity
        have = self.allocatable.get(node, {})
        return all(used.get(name, 0) + quantity <= have.get(name, 0) for name, quantity in wanted.items())

    def _matching_nodes(self, pod: Mapping[str, Any], term: Mapping[str, Any]) -> list[str]:
        """Nodes running another pod that the term selects (in the term's namespaces)."""
        selector = term_selector(term.get("labelSelector"))
        namespaces = set(term.get("namespaces") or [pod["metadata"].get("namespace", "default")])
        uid = pod["metadata"].get("uid")
        return [
            where
            for other, where in self.bound
            if other["metadata"].get("uid") != uid
            and other["metadata"].get("namespace") in namespaces
            and selector.matches(other["metadata"].get("labels"))
        ]

    def _domain(self, node: str, key: str) -> str | None:
        return self.node_labels.get(node, {}).get(key)

    def _affinity_holds(self, pod: Mapping[str, Any], node: str) -> bool:
        for term in _required_terms(pod, "podAffinity"):
            key = str(term["topologyKey"])
            here = self._domain(node, key)
            if here is None:
                return False
            matching = self._matching_nodes(pod, term)
            if matching:
                if not any(self._domain(other, key) == here for other in matching):
                    return False
            elif not term_selector(term.get("labelSelector")).matches(pod["metadata"].get("labels")):
                return False
        for term in _required_terms(pod, "podAntiAffinity"):
            key = str(term["topologyKey"])
            here = self._domain(node, key)
            if here is not None and any(
                self._domain(other, key) == here for other in self._matching_nodes(pod, term)
            ):
                return False
        return True
