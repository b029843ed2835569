"""Which pods `cdctl collect` reads: the controller replicas and kubelet plugins of the driver namespace.

Found by label (`app.kubernetes.io/component in (controller, kubelet-plugin)`, the chart's, plus an optional
selector such as `app.kubernetes.io/instance=<release>`), each with its node and the container port named
`http` (the chart's HTTP server: metrics and the event log). `--node` keeps the plugins on those nodes (the
controllers are always read: their logs tell every node's story). Needs `list pods` in the namespace.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from cdctl.k8s.rest import KubeApi

COMPONENTS = ("controller", "kubelet-plugin")
COMPONENT_LABEL = "app.kubernetes.io/component"
HTTP_PORT_NAME = "http"


@dataclass(frozen=True, slots=True)
class ComponentPod:
    name: str
    component: str  # controller | kubelet-plugin
    node: str
    port: int | None  # None: the pod declares no `http` port
    phase: str


def http_port(pod: dict[str, Any]) -> int | None:
    for container in (pod.get("spec") or {}).get("containers") or []:
        for port in container.get("ports") or []:
            if port.get("name") == HTTP_PORT_NAME and port.get("containerPort"):
                return int(port["containerPort"])
    return None


async def component_pods(
    api: KubeApi, namespace: str, selector: str = "", nodes: Sequence[str] = ()
) -> list[ComponentPod]:
    """The pods to read, controllers first, then plugins by node."""
    label = f"{COMPONENT_LABEL} in ({','.join(COMPONENTS)})"
    answer = await api.list_objects(
        f"/api/v1/namespaces/{namespace}/pods", label_selector=",".join(s for s in (label, selector) if s)
    )
    found: list[ComponentPod] = []
    for pod in answer.get("items") or []:
        component = str(((pod.get("metadata") or {}).get("labels") or {}).get(COMPONENT_LABEL, ""))
        node = str((pod.get("spec") or {}).get("nodeName") or "")
        if component == "kubelet-plugin" and nodes and node not in nodes:
            continue
        phase = str((pod.get("status") or {}).get("phase") or "")
        found.append(ComponentPod(pod["metadata"]["name"], component, node, http_port(pod), phase))
    order = {name: index for index, name in enumerate(COMPONENTS)}
    return sorted(found, key=lambda p: (order.get(p.component, 9), p.node, p.name))
