"""The controller under HostManagedIMEX (the design's controller unit and integration test plan).

Add path: the domain's finalizer, the workload ResourceClaimTemplate only, `status.status=Ready` with
`numNodes` ignored. Delete path: the workload template deleted and its finalizer removed, the domain's
finalizer removed, the domain forgotten by the metrics. Never a DaemonSet, a daemon template, a node label
or a clique, and never a watch on what the chart grants no RBAC for in this mode. Start-up logs the gate
overrides.
"""

from __future__ import annotations

from pathlib import Path

import structlog

from cdctl.controller.manager import ControllerManager
from cdctl.domain.computedomains import (
    FINALIZER,
    LABEL_COMPUTE_DOMAIN,
    ComputeDomainTornDown,
    DomainActionIntended,
)
from cdctl.domain.events import decode
from cdctl.store.memory import InMemoryEventStore
from tests.controller.harness import USER_NAMESPACE, Cluster, eventually, eventually_async

RCT = ("resource.k8s.io", "resourceclaimtemplates")
CLIQUES = ("resource.nvidia.com", "computedomaincliques")
GATES = "HostManagedIMEX=true"


def ready_count(manager: ControllerManager) -> float | None:
    return manager.metrics.registry.get_sample_value("nvidia_dra_compute_domain_info", {"status": "Ready"})


async def test_add_path_makes_only_the_workload_template_and_says_ready(tmp_path: Path) -> None:
    log = InMemoryEventStore()
    async with Cluster(tmp_path) as cluster:
        await cluster.start_controller(gates=GATES, store=log)
        cluster.label_node("node-a", None)  # a node exists: nothing may label it
        uid = cluster.create_domain("train-a", num_nodes=3, mode="Single")["metadata"]["uid"]
        await eventually(lambda: (cluster.domain("train-a") or {}).get("status", {}).get("status") == "Ready")
        cd = cluster.domain("train-a")
        assert cd is not None
        assert FINALIZER in cd["metadata"]["finalizers"]
        assert cd["status"].get("nodes") in (None, [])  # numNodes=3 ignored, no nodes reported
        (template,) = cluster.list(*RCT)
        assert (template["metadata"]["namespace"], template["metadata"]["name"]) == (
            USER_NAMESPACE,
            "train-a-channel",
        )
        assert template["metadata"]["labels"]["resource.nvidia.com/computeDomainTarget"] == "Workload"
        parameters = template["spec"]["spec"]["devices"]["config"][0]["opaque"]["parameters"]
        assert (parameters["kind"], parameters["domainID"], parameters["allocationMode"]) == (
            "ComputeDomainChannelConfig",
            uid,
            "Single",
        )
        assert cluster.list("apps", "daemonsets") == []
        assert cluster.list(*CLIQUES) == []
        assert LABEL_COMPUTE_DOMAIN not in cluster.get("", "nodes", "", "node-a")["metadata"].get(
            "labels", {}
        )
        actions = {
            (e.action, e.kind)
            for e in map(decode, await log.read_stream(f"domain/{uid}"))
            if isinstance(e, DomainActionIntended)
        }
        assert actions == {
            ("add-finalizer", "ComputeDomain"),
            ("create", "ResourceClaimTemplate"),
            ("update-status", "ComputeDomain"),
        }


async def test_delete_path_removes_template_and_finalizers_and_forgets_metrics(tmp_path: Path) -> None:
    log = InMemoryEventStore()
    async with Cluster(tmp_path) as cluster:
        _, manager = await cluster.start_controller(gates=GATES, store=log)
        uid = cluster.create_domain("train-a")["metadata"]["uid"]
        await eventually(lambda: (cluster.domain("train-a") or {}).get("status", {}).get("status") == "Ready")
        await eventually(lambda: ready_count(manager) == 1.0)
        # A label some earlier driver-managed install left: host-managed teardown does not touch node labels.
        cluster.label_node("node-a", uid)
        cluster.delete_domain("train-a")
        await eventually(lambda: cluster.domain("train-a") is None)
        assert cluster.list(*RCT) == []
        await eventually(lambda: ready_count(manager) == 0.0)
        assert manager.view.domain(uid).empty
        assert cluster.get("", "nodes", "", "node-a")["metadata"]["labels"][LABEL_COMPUTE_DOMAIN] == uid

        async def torn_down() -> list[ComputeDomainTornDown]:
            events = map(decode, await log.read_stream(f"domain/{uid}"))
            return [e for e in events if isinstance(e, ComputeDomainTornDown)]

        await eventually_async(torn_down)
        teardown = [
            (e.action, e.kind)
            for e in map(decode, await log.read_stream(f"domain/{uid}"))
            if isinstance(e, DomainActionIntended)
        ][3:]  # after the add path's finalizer, template and status
        assert teardown == [
            ("delete", "ResourceClaimTemplate"),
            ("remove-finalizer", "ResourceClaimTemplate"),
            ("remove-finalizer", "ComputeDomain"),
        ]


async def test_ready_only_once_the_workload_template_exists(tmp_path: Path) -> None:
    async with Cluster(tmp_path) as cluster:
        cluster.server.store.create(
            cluster.type_of(*RCT),
            USER_NAMESPACE,
            {"metadata": {"name": "taken"}, "spec": {"spec": {"devices": {"requests": []}}}},
        )
        await cluster.start_controller(gates=GATES)
        cluster.create_domain("train-a", template="taken")
        reasons = lambda: {e.get("reason") for e in cluster.list("", "events")}  # noqa: E731
        await eventually(lambda: "ResourceClaimTemplateConflict" in reasons())
        assert (cluster.domain("train-a") or {}).get("status", {}).get("status") != "Ready"


async def test_only_domains_and_claim_templates_are_watched(tmp_path: Path) -> None:
    async with Cluster(tmp_path) as cluster:
        _, manager = await cluster.start_controller(gates=GATES)
        assert sorted(informer.resource.plural for informer in manager.informers) == [
            "computedomains",
            "resourceclaimtemplates",
        ]


async def test_start_up_logs_the_gate_overrides(tmp_path: Path) -> None:
    async with Cluster(tmp_path) as cluster:
        with structlog.testing.capture_logs() as logs:
            await cluster.start_controller(gates=GATES)
        events = [entry["event"] for entry in logs]
        assert "HostManagedIMEX is enabled; forcing IMEXDaemonsWithDNSNames=false" in events
        assert "HostManagedIMEX is enabled; forcing ComputeDomainCliques=false" in events
        config = next(e for e in logs if e["event"] == "controller manager config")
        assert config["feature_gates"]["HostManagedIMEX"] is True
        assert config["feature_gates"]["ComputeDomainCliques"] is False
        assert config["feature_gates"]["IMEXDaemonsWithDNSNames"] is False
