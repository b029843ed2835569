"""The pods of the chart's controller Deployment and kubelet-plugin DaemonSet, as API objects for the rack's
component processes, and the routes that make their HTTP ports reachable through the pod proxy.

The rack runs `cdctl controller` and `cdctl kubelet-plugin` as local processes, not in containers; but what an
operator's tools see of them on a cluster is their pods: `kubectl get pods`, the pods proxy subresource that
`cdctl collect` reads the event logs through, the pod a service-account token is bound to. So before it
launches a component the rack creates its pod as the chart's workload would: its name, the chart's labels,
its ServiceAccount (created here as the chart does), its HTTP container port, its node. The kubelet of that
node gives the pod an address and reports it Running (its container is the process the rack runs); `route`
then maps the pod's (IP, HTTP port) to the local port the process listens on
(cdctl.sim.apiserver.proxy.PodNetwork), as the cluster network would take the API server's proxy there.
The controller's pod goes on the first CPU-only node (a GPU node when there is none). Used by
cdctl.sim.rack.launch.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from cdctl.sim.apiserver.errors import AlreadyExists
from cdctl.sim.apiserver.proxy import PodNetwork
from cdctl.sim.apiserver.server import free_port
from cdctl.sim.apiserver.store import ObjectStore
from cdctl.sim.rack.chart import CHART_NAME

LOCAL_HOST = "127.0.0.1"
CONTAINER = {"controller": "controller", "kubelet-plugin": "compute-domains"}


def component_pod(
    name: str, namespace: str, component: str, node: str, service_account: str, http_port: int
) -> dict[str, Any]:
    """The pod the chart's workload would create for `component` on `node`."""
    labels = {
        "app.kubernetes.io/name": CHART_NAME,
        "app.kubernetes.io/instance": CHART_NAME,
        "app.kubernetes.io/component": component,
    }
    container = {
        "name": CONTAINER[component],
        "image": "cdctl:sim",
        "command": ["cdctl", component],
        "ports": [{"name": "http", "containerPort": http_port, "protocol": "TCP"}],
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {"serviceAccountName": service_account, "nodeName": node, "containers": [container]},
    }


class ComponentPods:
    """Creates the component pods in `namespace` and routes their HTTP ports to local processes."""

    def __init__(self, store: ObjectStore, network: PodNetwork, namespace: str) -> None:
        self.store = store
        self.network = network
        self.namespace = namespace
        self.local_ports: dict[str, tuple[int, int]] = {}  # pod -> (container port, local port)

    def create(
        self, name: str, component: str, node: str, service_account: str, http_port: int
    ) -> tuple[dict[str, Any], int]:
        """Create the pod (and its ServiceAccount); returns it and the local port its process must serve."""
        with contextlib.suppress(AlreadyExists):
            accounts = self.store.type_of("", "serviceaccounts")
            self.store.create(accounts, self.namespace, {"metadata": {"name": service_account}})
        body = component_pod(name, self.namespace, component, node, service_account, http_port)
        pod = self.store.create(self.store.type_of("", "pods"), self.namespace, body)
        local = free_port()
        self.local_ports[name] = (http_port, local)
        return pod, local

    def pod_ip(self, name: str) -> str:
        pod = self.store.peek(self.store.type_of("", "pods"), self.namespace, name)
        return str((pod.get("status") or {}).get("podIP") or "")

    async def route_all(self, timeout_s: float) -> None:
        """Route every created pod once its kubelet has given it an address."""
        deadline = time.monotonic() + timeout_s
        pending = dict(self.local_ports)
        while pending:
            for name, (port, local) in list(pending.items()):
                address = self.pod_ip(name)
                if address:
                    self.network.route(address, port, LOCAL_HOST, local)
                    del pending[name]
            if pending and time.monotonic() > deadline:
                missing = sorted(pending)
                raise TimeoutError(f"component pods without an address after {timeout_s:.0f} s: {missing}")
            if pending:
                await asyncio.sleep(0.05)
