"""A simulated cluster plus a running controller, and the cluster-side moves the tests make.

`Cluster` starts the simulated API server (cdctl.sim) with the chart's CRDs and DeviceClasses, writes a
kubeconfig, and runs `run_controller` against it with the real kubernetes_asyncio client. The tests play the
parts the controller does not: users (create/delete ComputeDomains), the DaemonSet controller and the daemons
(daemon pods with a node, an IP, a clique label and readiness) and the kubelet plugin (node labels).
`eventually` waits for a condition on the cluster without asserting on time (a generous bound only stops a
broken test from hanging).
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from cdctl.api.gates import parse_feature_gates
from cdctl.controller.app import run_controller
from cdctl.controller.manager import ControllerManager
from cdctl.controller.settings import ControllerSettings, LeaderElectionSettings
from cdctl.domain.computedomains import LABEL_CLIQUE_ID, LABEL_COMPUTE_DOMAIN
from cdctl.sim.apiserver.server import ApiServer
from cdctl.sim.apiserver.settings import ServerSettings
from cdctl.sim.rack.chart import cluster_bootstrap_objects

DRIVER_NAMESPACE = "nvidia-dra"
USER_NAMESPACE = "team-a"
GIVE_UP_S = 30.0


class Cluster:
    def __init__(self, tmp_path: Path, **server_settings: Any) -> None:
        self.tmp_path = tmp_path
        self.server = ApiServer(settings=ServerSettings(bookmark_interval_s=0.2, **server_settings))
        self.kubeconfig = tmp_path / "kubeconfig"
        self.controllers: list[tuple[asyncio.Task[None], list[ControllerManager]]] = []

    async def __aenter__(self) -> Cluster:
        await self.server.start()
        self.server.write_kubeconfig(self.kubeconfig)
        store = self.server.store
        for obj in cluster_bootstrap_objects():
            group, _, _ = obj["apiVersion"].rpartition("/")
            plural = (
                "customresourcedefinitions" if obj["kind"] == "CustomResourceDefinition" else "deviceclasses"
            )
            store.create(store.type_of(group, plural), "", obj)
        for namespace in (DRIVER_NAMESPACE, USER_NAMESPACE):
            store.create(store.type_of("", "namespaces"), "", {"metadata": {"name": namespace}})
        return self

    async def __aexit__(self, *exc: object) -> None:
        for task, _ in self.controllers:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await self.server.stop()

    # ---- the controller ------------------------------------------------------------------------------------
    def settings(self, **overrides: Any) -> ControllerSettings:
        base: dict[str, Any] = {
            "pod_name": "controller-0",
            "image_name": "example.com/cdctl:test",
            "log_verbosity_cd_daemon": 4,
            "namespace": DRIVER_NAMESPACE,
            "kubeconfig": str(self.kubeconfig),
            "kube_api_qps": 0.0,
            "watch_timeout_s": 30,
            "cleanup_interval_s": 3600.0,
        }
        if "gates" in overrides:
            overrides["feature_gates"] = parse_feature_gates(overrides.pop("gates"))
        if "leader_election" in overrides and isinstance(overrides["leader_election"], dict):
            overrides["leader_election"] = LeaderElectionSettings(**overrides["leader_election"])
        base.update(overrides)
        return ControllerSettings(**base)

    async def start_controller(
        self, *, wait_synced: bool = True, **overrides: Any
    ) -> tuple[asyncio.Task[None], ControllerManager]:
        started: list[ControllerManager] = []
        store = overrides.pop("store", None)
        task = asyncio.create_task(run_controller(self.settings(**overrides), started=started, store=store))
        self.controllers.append((task, started))
        await eventually(lambda: bool(started) or task.done())
        if task.done():
            task.result()
        if wait_synced:
            await asyncio.wait_for(started[0].synced.wait(), 30)
        return task, started[0]

    @staticmethod
    async def stop_controller(task: asyncio.Task[None]) -> None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    # ---- cluster objects -----------------------------------------------------------------------------------
    def type_of(self, group: str, plural: str) -> Any:
        return self.server.store.type_of(group, plural)

    def get(self, group: str, plural: str, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return self.server.store.get(self.type_of(group, plural), namespace, name)
        except Exception:  # the store's NotFound
            return None

    def list(self, group: str, plural: str, namespace: str | None = None) -> list[dict[str, Any]]:
        items, _ = self.server.store.list_objects(self.type_of(group, plural), namespace)
        return items

    def create_domain(
        self, name: str, *, num_nodes: int = 0, template: str | None = None, mode: str | None = None
    ) -> dict[str, Any]:
        channel: dict[str, Any] = {"resourceClaimTemplate": {"name": template or f"{name}-channel"}}
        if mode:
            channel["allocationMode"] = mode
        body = {
            "apiVersion": "resource.nvidia.com/v1beta1",
            "kind": "ComputeDomain",
            "metadata": {"name": name, "namespace": USER_NAMESPACE},
            "spec": {"numNodes": num_nodes, "channel": channel},
        }
        return self.server.store.create(
            self.type_of("resource.nvidia.com", "computedomains"), USER_NAMESPACE, body
        )

    def domain(self, name: str) -> dict[str, Any] | None:
        return self.get("resource.nvidia.com", "computedomains", USER_NAMESPACE, name)

    def delete_domain(self, name: str) -> None:
        self.server.store.delete(self.type_of("resource.nvidia.com", "computedomains"), USER_NAMESPACE, name)

    def label_node(self, node: str, uid: str | None) -> None:
        nodes = self.type_of("", "nodes")
        existing = self.get("", "nodes", "", node)
        if existing is None:
            existing = self.server.store.create(nodes, "", {"metadata": {"name": node, "labels": {}}})
        labels = dict(existing["metadata"].get("labels") or {})
        if uid is None:
            labels.pop(LABEL_COMPUTE_DOMAIN, None)
        else:
            labels[LABEL_COMPUTE_DOMAIN] = uid
        existing["metadata"]["labels"] = labels
        self.server.store.update(nodes, "", node, existing)

    def run_daemon(
        self,
        uid: str,
        node: str,
        ip: str,
        clique: str | None,
        ready: bool = False,
        namespace: str = DRIVER_NAMESPACE,
    ) -> dict[str, Any]:
        """A daemon pod of the domain on `node` (what the DaemonSet controller and the daemon would do)."""
        labels = {LABEL_COMPUTE_DOMAIN: uid}
        if clique is not None:
            labels[LABEL_CLIQUE_ID] = clique
        ds = self.get("apps", "daemonsets", namespace, f"computedomain-daemon-{uid}")
        owners = []
        if ds is not None:
            owners = [
                {
                    "apiVersion": "apps/v1",
                    "kind": "DaemonSet",
                    "name": ds["metadata"]["name"],
                    "uid": ds["metadata"]["uid"],
                    "controller": True,
                }
            ]
        body = {
            "metadata": {
                "name": f"computedomain-daemon-{uid[:8]}-{node}-{uuid.uuid4().hex[:5]}",
                "namespace": namespace,
                "labels": labels,
                "ownerReferences": owners,
            },
            "spec": {"nodeName": node, "containers": [{"name": "compute-domain-daemon", "image": "x"}]},
        }
        pod = self.server.store.create(self.type_of("", "pods"), namespace, body)
        return self.set_pod(pod, ip=ip, ready=ready)

    def set_pod(
        self, pod: dict[str, Any], *, ip: str | None = None, ready: bool | None = None
    ) -> dict[str, Any]:
        pods = self.type_of("", "pods")
        current = self.server.store.get(pods, pod["metadata"]["namespace"], pod["metadata"]["name"])
        status = dict(current.get("status") or {})
        if ip is not None:
            status["podIP"] = ip
        if ready is not None:
            status["phase"] = "Running"
            status["conditions"] = [{"type": "Ready", "status": "True" if ready else "False"}]
        current["status"] = status
        return self.server.store.update(
            pods, current["metadata"]["namespace"], current["metadata"]["name"], current, subresource="status"
        )

    def delete_pod(self, pod: dict[str, Any]) -> None:
        self.server.store.delete(
            self.type_of("", "pods"), pod["metadata"]["namespace"], pod["metadata"]["name"]
        )


async def eventually(condition: Callable[[], Any], *, give_up_s: float = GIVE_UP_S) -> Any:
    """Wait until `condition()` is truthy and return its value (checked every 20 ms, at most `give_up_s`)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + give_up_s
    for _ in range(1_000_000):
        value = condition()
        if value:
            return value
        if loop.time() > deadline:
            raise AssertionError(f"condition never held: {getattr(condition, '__name__', condition)}")
        await asyncio.sleep(0.02)
    raise AssertionError("unreachable")


async def eventually_async(condition: Callable[[], Awaitable[Any]], *, give_up_s: float = GIVE_UP_S) -> Any:
    """`eventually` for a condition that must await (reading an event log)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + give_up_s
    for _ in range(1_000_000):
        value = await condition()
        if value:
            return value
        if loop.time() > deadline:
            raise AssertionError(f"condition never held: {getattr(condition, '__name__', condition)}")
        await asyncio.sleep(0.02)
    raise AssertionError("unreachable")
