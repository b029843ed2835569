"""The simulated kubelet: registration handshake, version choice, prepare/unprepare over gRPC, pod status."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

from cdctl.sim.apiserver.store import ObjectStore
from cdctl.sim.controllers.allocator import Allocator
from cdctl.sim.controllers.claimtemplates import ClaimTemplateController
from cdctl.sim.node.kubelet import SimKubelet
from tests.sim.fakeplugin import PluginLog, serve_plugin
from tests.sim.node.conftest import claim_cluster
from tests.sim.standins import DAEMON_CLASS, DRIVER, add_pod, add_slice, add_template, get

NODE = "n1"


async def _schedule(store: ObjectStore, kubelet: SimKubelet) -> None:
    ClaimTemplateController(store).reconcile()
    Allocator(store).reconcile()
    await kubelet.sync()


async def test_start_registers_the_node_and_wipes_its_slices(socket_root: Path) -> None:
    store = claim_cluster()
    add_slice(store, NODE)
    add_slice(store, "other")
    kubelet = SimKubelet(store, NODE, socket_root / "registry", node_labels={"gpu": "yes"})
    kubelet.register_node()
    node = get(store, "", "nodes", NODE, namespace="")
    assert node["metadata"]["labels"] == {"gpu": "yes"}
    assert node["status"]["conditions"][0]["type"] == "Ready"
    slices, _ = store.list_objects(store.type_of("resource.k8s.io", "resourceslices"))
    assert [s["spec"]["nodeName"] for s in slices] == ["other"]


async def test_registers_plugin_and_prefers_the_first_listed_service(socket_root: Path) -> None:
    store = claim_cluster()
    kubelet = SimKubelet(store, NODE, socket_root / "registry")
    async with serve_plugin(
        socket_root / "registry", socket_root / "plugin", DRIVER, ["v1beta1.DRAPlugin", "v1.DRAPlugin"]
    ) as log:
        await kubelet.plugins.scan()
        assert [s.plugin_registered for s in log.statuses] == [True]
        assert kubelet.plugins.plugins[DRIVER].service == "v1beta1.DRAPlugin"
    kubelet.plugins.deregister_after_s = 0.05
    await kubelet.plugins.scan()
    assert DRIVER in kubelet.plugins.plugins, "deregistered at the plugin manager's next pass"
    await asyncio.sleep(0.06)
    await kubelet.plugins.scan()
    assert DRIVER not in kubelet.plugins.plugins, "a removed socket deregisters the plugin"


async def test_rejects_plugins_it_cannot_serve(socket_root: Path) -> None:
    store = claim_cluster()
    kubelet = SimKubelet(store, NODE, socket_root / "registry")
    async with serve_plugin(
        socket_root / "registry", socket_root / "plugin", DRIVER, ["v1alpha3.NodeService"]
    ) as log:
        await kubelet.plugins.scan()
    assert [s.plugin_registered for s in log.statuses] == [False]
    assert "none of services supported by the plugin" in log.statuses[0].error
    assert DRIVER not in kubelet.plugins.plugins


async def test_prepares_claims_marks_pod_ready_and_unprepares_on_deletion(socket_root: Path) -> None:
    store = claim_cluster()
    kubelet = SimKubelet(store, NODE, socket_root / "registry")
    kubelet.register_node()
    add_slice(store, NODE)
    pod = add_pod(store, "worker", "tmpl")
    async with serve_plugin(
        socket_root / "registry", socket_root / "plugin", DRIVER, ["v1.DRAPlugin", "v1beta1.DRAPlugin"]
    ) as log:
        await _schedule(store, kubelet)
        claim_name = get(store, "", "pods", "worker")["status"]["resourceClaimStatuses"][0][
            "resourceClaimName"
        ]
        claim_uid = get(store, "resource.k8s.io", "resourceclaims", claim_name)["metadata"]["uid"]
        assert log.prepared == [("v1", [claim_uid])]
        assert kubelet.cdi_devices(pod["metadata"]["uid"]) == [f"k8s.{DRIVER}/claim={claim_uid}-channel-0"]
        running = get(store, "", "pods", "worker")
        assert running["status"]["phase"] == "Running"
        assert {c["type"]: c["status"] for c in running["status"]["conditions"]}["Ready"] == "True"
        assert running["status"]["podIP"]
        await kubelet.sync()
        assert len(log.prepared) == 1, "a running pod is not prepared again"
        store.delete(store.type_of("", "pods"), "default", "worker")
        await kubelet.sync()
        assert log.unprepared == [("v1", [claim_uid])]
        assert kubelet.running == {}


async def _failing_pod(store: ObjectStore, kubelet: SimKubelet, log: PluginLog) -> dict[str, Any]:
    kubelet.register_node()
    add_slice(store, NODE)
    pod = add_pod(store, "worker", "tmpl")
    ClaimTemplateController(store).reconcile()
    Allocator(store).reconcile()
    claim_name = get(store, "", "pods", "worker")["status"]["resourceClaimStatuses"][0]["resourceClaimName"]
    log.fail_claims.add(get(store, "resource.k8s.io", "resourceclaims", claim_name)["metadata"]["uid"])
    return pod


async def test_failed_claim_keeps_the_pod_pending_and_is_retried(socket_root: Path) -> None:
    store = claim_cluster()
    kubelet = SimKubelet(store, NODE, socket_root / "registry", retry_backoff_s=0.0)
    async with serve_plugin(
        socket_root / "registry", socket_root / "plugin", DRIVER, ["v1.DRAPlugin"]
    ) as log:
        pod = await _failing_pod(store, kubelet, log)
        await kubelet.sync()
        assert get(store, "", "pods", "worker")["status"]["phase"] == "Pending"
        assert "injected failure" in kubelet.last_errors[pod["metadata"]["uid"]]
        log.fail_claims.clear()
        await kubelet.sync()
        assert get(store, "", "pods", "worker")["status"]["phase"] == "Running"
        assert len(log.prepared) == 2


async def test_failed_prepare_backs_off_and_is_unprepared_when_the_pod_goes(socket_root: Path) -> None:
    store = claim_cluster()
    kubelet = SimKubelet(store, NODE, socket_root / "registry", retry_backoff_s=3600.0)
    async with serve_plugin(
        socket_root / "registry", socket_root / "plugin", DRIVER, ["v1.DRAPlugin"]
    ) as log:
        await _failing_pod(store, kubelet, log)
        await kubelet.sync()
        await kubelet.sync()
        assert len(log.prepared) == 1, "the second pass falls inside the backoff"
        store.delete(store.type_of("", "pods"), "default", "worker")
        await kubelet.sync()
        assert log.unprepared == [("v1", log.prepared[0][1])]
        assert kubelet.claim_refs == {}


async def test_pod_waits_for_its_driver_to_register(socket_root: Path) -> None:
    store = claim_cluster()
    kubelet = SimKubelet(store, NODE, socket_root / "registry")
    kubelet.register_node()
    add_slice(store, NODE)
    pod = add_pod(store, "worker", "tmpl")
    await _schedule(store, kubelet)
    assert "not registered" in kubelet.last_errors[pod["metadata"]["uid"]]
    async with serve_plugin(socket_root / "registry", socket_root / "plugin", DRIVER, ["v1.DRAPlugin"]):
        await kubelet.sync()
        assert get(store, "", "pods", "worker")["status"]["phase"] == "Running"


async def test_background_loop_runs_a_pod_to_ready(socket_root: Path) -> None:
    store = claim_cluster()
    kubelet = SimKubelet(store, NODE, socket_root / "registry", tick_s=0.05)
    await kubelet.start()
    try:
        add_slice(store, NODE)
        async with serve_plugin(socket_root / "registry", socket_root / "plugin", DRIVER, ["v1.DRAPlugin"]):
            add_pod(store, "worker", "tmpl")
            ClaimTemplateController(store).reconcile()
            Allocator(store).reconcile()
            async with asyncio.timeout(20):
                while get(store, "", "pods", "worker")["status"]["phase"] != "Running":  # noqa: ASYNC110
                    await asyncio.sleep(0.05)
    finally:
        await kubelet.stop()


async def test_registers_the_cdctl_plugins_registration_server(socket_root: Path) -> None:
    from grpclib.server import Server

    from cdctl.plugin.server import Registration, registration_socket

    registered: list[bool] = []
    registry = socket_root / "registry"
    registry.mkdir()
    endpoint = socket_root / "plugin" / "dra.sock"
    server = Server([Registration(str(endpoint), lambda: registered.append(True))])
    await server.start(path=str(registration_socket(registry)))
    try:
        kubelet = SimKubelet(claim_cluster(), NODE, registry)
        await kubelet.plugins.scan()
    finally:
        server.close()
        await asyncio.wait_for(server.wait_closed(), 30)
    assert registered == [True]
    plugin = kubelet.plugins.plugins[DRIVER]
    assert (plugin.service, plugin.endpoint) == ("v1.DRAPlugin", endpoint)


async def test_slices_of_a_deregistered_driver_are_wiped_after_the_delay(socket_root: Path) -> None:
    store = claim_cluster()
    kubelet = SimKubelet(store, NODE, socket_root / "registry", slice_wipe_delay_s=0.0)
    kubelet.plugins.deregister_after_s = 0.0
    kubelet.register_node()
    async with serve_plugin(socket_root / "registry", socket_root / "plugin", DRIVER, ["v1.DRAPlugin"]):
        await kubelet.sync()
        add_slice(store, NODE)
        add_slice(store, NODE, driver="gpu.nvidia.com")
        add_slice(store, "other")
        await kubelet.sync()
        assert len(store.list_objects(store.type_of("resource.k8s.io", "resourceslices"))[0]) == 3
    await kubelet.sync()
    remaining, _ = store.list_objects(store.type_of("resource.k8s.io", "resourceslices"))
    assert sorted((s["spec"]["nodeName"], s["spec"]["driver"]) for s in remaining) == [
        (NODE, "gpu.nvidia.com"),
        ("other", DRIVER),
    ]


async def test_a_plugin_that_comes_back_in_time_keeps_its_slices(socket_root: Path) -> None:
    store = claim_cluster()
    kubelet = SimKubelet(store, NODE, socket_root / "registry", slice_wipe_delay_s=3600.0)
    kubelet.register_node()
    async with serve_plugin(socket_root / "registry", socket_root / "plugin", DRIVER, ["v1.DRAPlugin"]):
        await kubelet.sync()
        add_slice(store, NODE)
    await kubelet.sync()
    async with serve_plugin(socket_root / "registry", socket_root / "plugin", DRIVER, ["v1.DRAPlugin"]):
        await kubelet.sync()
    assert len(store.list_objects(store.type_of("resource.k8s.io", "resourceslices"))[0]) == 1


async def test_a_waiting_prepare_does_not_hold_back_the_other_pods_of_the_node(socket_root: Path) -> None:
    """Like the kubelet's pod workers: a channel claim waiting for its node's daemon must not keep that
    daemon's pod from being prepared and marked Ready."""
    store = claim_cluster()
    add_template(store, "daemon-tmpl", device_class=DAEMON_CLASS, request="daemon")
    kubelet = SimKubelet(store, NODE, socket_root / "registry", tick_s=0.05)
    kubelet.register_node()  # wipes the node's slices, as at kubelet start: publish after it
    add_slice(store, NODE)
    add_pod(store, "worker", "tmpl", node=NODE)
    async with serve_plugin(
        socket_root / "registry", socket_root / "plugin", DRIVER, ["v1.DRAPlugin"]
    ) as log:
        ClaimTemplateController(store).reconcile()
        Allocator(store).reconcile()
        claim_name = get(store, "", "pods", "worker")["status"]["resourceClaimStatuses"][0][
            "resourceClaimName"
        ]
        log.held_claims.add(get(store, "resource.k8s.io", "resourceclaims", claim_name)["metadata"]["uid"])
        kubelet._task = asyncio.create_task(kubelet._run())  # start() without registering the node again
        try:
            await _eventually(lambda: len(log.prepared) == 1)
            add_pod(store, "daemon", "daemon-tmpl", node=NODE)
            ClaimTemplateController(store).reconcile()
            Allocator(store).reconcile()
            await _eventually(lambda: _phase(store, "daemon") == "Running")
            assert _phase(store, "worker") != "Running", "the worker's prepare is still waiting"
            log.release.set()
            await _eventually(lambda: _phase(store, "worker") == "Running")
        finally:
            await kubelet.stop()


def _phase(store: ObjectStore, pod: str) -> str:
    return str((get(store, "", "pods", pod).get("status") or {}).get("phase", ""))


async def _eventually(condition: Any, timeout_s: float = 20.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


async def test_stop_ends_the_kubelet_while_the_cluster_is_busy(socket_root: Path) -> None:
    store = claim_cluster()
    kubelet = SimKubelet(store, NODE, socket_root / "registry", tick_s=0.001)
    await kubelet.start()
    nodes = store.type_of("", "nodes")

    async def churn() -> None:
        for index in range(100_000):
            node = store.get(nodes, "", NODE)
            node["metadata"]["labels"] = {"tick": str(index)}
            store.update(nodes, "", NODE, node)
            await asyncio.sleep(0)

    busy = asyncio.create_task(churn())
    try:
        for _ in range(20):
            await asyncio.sleep(0.01)
            async with asyncio.timeout(10):
                await kubelet.stop()
            await kubelet.start()
        async with asyncio.timeout(10):
            await kubelet.stop()
    finally:
        busy.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await busy


async def test_the_running_kubelet_wakes_for_its_own_node_not_for_the_rest_of_the_cluster(
    socket_root: Path,
) -> None:
    store = claim_cluster()
    kubelet = SimKubelet(store, NODE, socket_root / "registry", tick_s=30.0)
    passes = 0
    sync = kubelet.sync

    async def counted(*, wait: bool = True) -> None:
        nonlocal passes
        passes += 1
        await sync(wait=wait)

    kubelet.sync = counted  # type: ignore[method-assign]
    await kubelet.start()
    try:
        await _eventually(lambda: passes == 1)
        for index in range(20):
            add_pod(store, f"elsewhere-{index}", node="another-node")
        await asyncio.sleep(0.2)
        assert passes == 1, "pods of other nodes do not wake this kubelet"
        add_pod(store, "here", node=NODE)
        await _eventually(lambda: passes >= 2)
    finally:
        await kubelet.stop()


def _claim_spec(cdi_dir: Path, claim_uid: str) -> Path:
    """The CDI spec the fake plugin's answer names, as a real plugin writes it."""
    cdi_dir.mkdir(parents=True, exist_ok=True)
    spec = cdi_dir / f"claim_{claim_uid}.yaml"
    spec.write_text(
        f"cdiVersion: 0.5.0\nkind: k8s.{DRIVER}/claim\n"
        f"devices: [{{name: {claim_uid}-channel-0, containerEdits: {{env: [CHANNEL=0]}}}}]\n"
    )
    return spec


def _ready(store: ObjectStore) -> str:
    conditions = get(store, "", "pods", "worker")["status"].get("conditions") or []
    return {c["type"]: c["status"] for c in conditions}.get("Ready", "")


async def test_a_restarted_kubelet_prepares_its_running_pods_again_and_checks_their_cdi_devices(
    socket_root: Path,
) -> None:
    """The real kubelet calls NodePrepareResources again, from its checkpoint, for the claims of pods still
    running; their CDI devices must then resolve on the node, or the pod's containers cannot start again."""
    store = claim_cluster()
    cdi_dir = socket_root / "cdi"
    kubelet = SimKubelet(store, NODE, socket_root / "registry", cdi_dirs=[cdi_dir], retry_backoff_s=0.0)
    kubelet.register_node()
    add_slice(store, NODE)
    pod = add_pod(store, "worker", "tmpl")
    plugin_dir = socket_root / "plugin"
    async with serve_plugin(socket_root / "registry", plugin_dir, DRIVER, ["v1.DRAPlugin"]) as log:
        await _schedule(store, kubelet)
        claim_name = get(store, "", "pods", "worker")["status"]["resourceClaimStatuses"][0][
            "resourceClaimName"
        ]
        claim_uid = get(store, "resource.k8s.io", "resourceclaims", claim_name)["metadata"]["uid"]
        spec = _claim_spec(cdi_dir, claim_uid)
        assert log.prepared == [("v1", [claim_uid])] and _ready(store) == "True"

        await kubelet.restart()  # stays up: the test drives its passes
        await kubelet.stop()
        await kubelet.sync()
        assert log.prepared == [("v1", [claim_uid])] * 2, "prepared again after the restart"
        assert _ready(store) == "True" and pod["metadata"]["uid"] not in kubelet.last_errors
        await kubelet.sync()
        assert len(log.prepared) == 2, "once per restart"

        await kubelet.restart(while_down=spec.unlink)
        await kubelet.stop()
        await kubelet.sync()
        assert len(log.prepared) == 3
        assert _ready(store) == "False"
        assert "unresolvable CDI devices" in kubelet.last_errors[pod["metadata"]["uid"]]
        await kubelet.sync()
        assert _ready(store) == "False", "tried again each pass, as the kubelet retries creating containers"
        _claim_spec(cdi_dir, claim_uid)
        await kubelet.sync()
        assert _ready(store) == "True" and pod["metadata"]["uid"] not in kubelet.last_errors
        assert len(log.prepared) == 3
