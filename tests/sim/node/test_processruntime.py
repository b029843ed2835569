"""The container runtime stand-in: CDI resolution, downward-API env, readiness probes, restarts."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from cdctl.sim.apiserver.store import ObjectStore
from cdctl.sim.controllers.allocator import Allocator
from cdctl.sim.controllers.claimtemplates import ClaimTemplateController
from cdctl.sim.node.cdiresolver import UnresolvableDevice, resolve
from cdctl.sim.node.kubelet import SimKubelet
from cdctl.sim.node.processruntime import ProcessRuntime, container_env
from cdctl.sim.node.runtime import ContainerView, restart_delay, restarts_after
from tests.sim.fakeplugin import serve_plugin
from tests.sim.standins import DRIVER, add_classes, add_slice, add_template, get

NODE = "n1"
KIND = f"k8s.{DRIVER}/claim"


def _write_spec(directory: Path, name: str, devices: dict[str, list[str]], common: list[str]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    spec = {
        "cdiVersion": "0.5.0",
        "kind": KIND,
        "containerEdits": {"env": common},
        "devices": [{"name": device, "containerEdits": {"env": env}} for device, env in devices.items()],
    }
    (directory / f"{name}.yaml").write_text(yaml.safe_dump(spec))


def test_resolve_merges_spec_and_device_edits(tmp_path: Path) -> None:
    _write_spec(tmp_path, "one", {"a": ["A=1"], "b": ["B=2"]}, ["COMMON=yes"])
    edits = resolve([tmp_path], [f"{KIND}=a", f"{KIND}=b"])
    assert edits.env == {"COMMON": "yes", "A": "1", "B": "2"}
    with pytest.raises(UnresolvableDevice):
        resolve([tmp_path], [f"{KIND}=missing"])


def test_container_env_resolves_field_references() -> None:
    pod = {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
        "spec": {"nodeName": "n1"},
        "status": {"podIP": "10.0.0.5"},
    }
    container = {
        "env": [
            {"name": "PLAIN", "value": "x"},
            {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        ]
    }
    assert container_env(pod, container) == {"PLAIN": "x", "NODE_NAME": "n1", "POD_IP": "10.0.0.5"}


def _worker_pod(store: ObjectStore, marker: Path, dump: Path) -> dict[str, Any]:
    script = (
        "import os, pathlib, signal, sys, time\n"
        "seen = os.environ.get('CLAIM_ENV', '') + ' ' + os.environ['POD_IP']\n"
        f"pathlib.Path({str(dump)!r}).write_text(seen)\n"
        "signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))\n"
        "while True: time.sleep(0.05)\n"
    )
    spec = {
        "securityContext": {"runAsUser": 0},  # it writes into the test's directory, which is root's
        "containers": [
            {
                "name": "main",
                "image": "python",
                "command": [sys.executable, "-c", script],
                "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
                "readinessProbe": {"exec": {"command": ["test", "-f", str(marker)]}},
            }
        ],
        "resourceClaims": [{"name": "channel", "resourceClaimTemplateName": "tmpl"}],
    }
    return store.create(store.type_of("", "pods"), "default", {"metadata": {"name": "worker"}, "spec": spec})


def _allocate_worker_claim(store: ObjectStore, cdi_dir: Path, env: list[str]) -> None:
    """Make and allocate the pod `worker`'s channel claim, and write the CDI spec its device resolves in."""
    ClaimTemplateController(store).reconcile()
    Allocator(store).reconcile()
    claim_name = get(store, "", "pods", "worker")["status"]["resourceClaimStatuses"][0]["resourceClaimName"]
    claim_uid = get(store, "resource.k8s.io", "resourceclaims", claim_name)["metadata"]["uid"]
    _write_spec(cdi_dir, "claim", {f"{claim_uid}-channel-0": env}, [])


def node_with_a_process_runtime(socket_root: Path) -> tuple[ObjectStore, ProcessRuntime, SimKubelet, Path]:
    """A store with the DRA classes and the template `tmpl`, and a registered node whose kubelet runs every
    pod as a process; the node's CDI directory."""
    store = ObjectStore()
    add_classes(store)
    add_template(store, "tmpl")
    cdi_dir = socket_root / "cdi"
    runtime = ProcessRuntime(
        selects=lambda pod: True, cdi_dirs=lambda node: [cdi_dir], log_dir=socket_root / "logs"
    )
    kubelet = SimKubelet(store, NODE, socket_root / "registry", runtime=runtime)
    kubelet.register_node()
    add_slice(store, NODE)
    return store, runtime, kubelet, cdi_dir


def _ready(store: ObjectStore) -> str:
    conditions = get(store, "", "pods", "worker")["status"].get("conditions") or []
    return {c["type"]: c["status"] for c in conditions}.get("Ready", "")


async def test_pod_process_sees_cdi_env_and_becomes_ready_when_its_probe_passes(socket_root: Path) -> None:
    store = ObjectStore()
    add_classes(store)
    add_template(store, "tmpl")
    cdi_dir = socket_root / "cdi"
    runtime = ProcessRuntime(
        selects=lambda pod: True,
        cdi_dirs=lambda node: [cdi_dir],
        log_dir=socket_root / "logs",
        probe_period_s=0.05,
    )
    kubelet = SimKubelet(store, NODE, socket_root / "registry", runtime=runtime)
    kubelet.register_node()
    add_slice(store, NODE)
    marker, dump = socket_root / "ready", socket_root / "env"
    pod = _worker_pod(store, marker, dump)
    async with serve_plugin(socket_root / "registry", socket_root / "plugin", DRIVER, ["v1.DRAPlugin"]):
        _allocate_worker_claim(store, cdi_dir, ["CLAIM_ENV=from-cdi"])
        try:
            await kubelet.sync()
            assert _ready(store) == "False", "the readiness probe fails until the marker exists"
            async with asyncio.timeout(20):
                while not dump.exists():  # noqa: ASYNC110 - waits for the child process to write
                    await asyncio.sleep(0.05)
            pod_ip = get(store, "", "pods", "worker")["status"]["podIP"]
            assert dump.read_text() == f"from-cdi {pod_ip}"
            marker.write_text("ok")
            async with asyncio.timeout(20):
                while _ready(store) != "True":  # the probe worker passes, the next pass writes it
                    await asyncio.sleep(0.05)
                    await kubelet.sync()
            process = runtime.running[pod["metadata"]["uid"]].process
            store.delete(store.type_of("", "pods"), "default", "worker")
            await kubelet.sync()
            assert process.returncode == 0, "SIGTERM ends the process cleanly"
        finally:
            await asyncio.wait_for(runtime.stop_all(), 60)


def _pod(name: str, policy: str, script: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "default", "uid": name},
        "spec": {
            "nodeName": NODE,
            "restartPolicy": policy,
            "securityContext": {"runAsUser": 0},
            "containers": [{"name": "c", "command": [sys.executable, "-c", script]}],
        },
    }


async def _until_view(
    runtime: ProcessRuntime, pod: dict[str, Any], holds: Callable[[ContainerView], bool]
) -> ContainerView:
    async with asyncio.timeout(30):
        while not holds(view := await runtime.container(pod)):  # noqa: ASYNC110 - its exit watcher decides
            await asyncio.sleep(0.01)
    return view


@pytest.mark.parametrize(
    ("policy", "code", "phase"),
    [("Never", 0, "Succeeded"), ("Never", 3, "Failed"), ("OnFailure", 0, "Succeeded")],
)
async def test_a_container_that_is_not_restarted_ends_its_pod_with_its_exit_code(
    tmp_path: Path, policy: str, code: int, phase: str
) -> None:
    changes: list[str] = []
    runtime = ProcessRuntime(
        selects=lambda pod: True, cdi_dirs=lambda node: [], log_dir=tmp_path,
        on_change=lambda pod: changes.append(pod["metadata"]["name"]),
    )  # fmt: skip
    pod = _pod("job", policy, f"raise SystemExit({code})")
    await runtime.start(pod, [])
    view = await _until_view(runtime, pod, lambda v: v.final)
    assert (view.phase, view.exit_code, view.exit_reason, view.restarts, view.ready, view.running) == (
        phase, code, "Completed" if code == 0 else "Error", 0, False, False,
    )  # fmt: skip
    assert changes, "the kubelet is woken to write the ended phase"
    await runtime.stop(pod)


async def test_a_failing_container_restarts_at_once_then_with_the_crash_loop_back_off(tmp_path: Path) -> None:
    runtime = ProcessRuntime(
        selects=lambda pod: True, cdi_dirs=lambda node: [], log_dir=tmp_path, crash_backoff_s=0.5
    )
    pod = _pod("crashy", "OnFailure", "raise SystemExit(2)")
    await runtime.start(pod, [])
    try:
        # The first exit is restarted at once; the second waits, CrashLoopBackOff, its exit as lastState.
        waiting = await _until_view(runtime, pod, lambda v: v.waiting_reason == "CrashLoopBackOff")
        assert (waiting.restarts, waiting.exit_code, waiting.running, waiting.final) == (1, 2, False, False)
        restarted = await _until_view(runtime, pod, lambda v: v.restarts == 2)
        assert restarted.waiting_reason == "" and not restarted.final
    finally:
        await runtime.stop(pod)
    assert runtime.running == {}


async def test_a_killed_container_reports_the_signal_as_its_exit_code(tmp_path: Path) -> None:
    runtime = ProcessRuntime(selects=lambda pod: True, cdi_dirs=lambda node: [], log_dir=tmp_path)
    pod = _pod("victim", "Never", "import time; time.sleep(60)")
    await runtime.start(pod, [])
    assert runtime.kill("victim")
    view = await _until_view(runtime, pod, lambda v: v.final)
    assert (view.phase, view.exit_code, view.exit_reason) == ("Failed", 137, "Error")
    await runtime.stop(pod)


@pytest.mark.parametrize(
    ("restarts", "ran_s", "expected"),
    [
        (0, 0.0, (0.0, 1)),  # the first restart is at once
        (1, 0.0, (10.0, 2)),
        (2, 0.0, (20.0, 3)),
        (5, 0.0, (160.0, 6)),
        (6, 0.0, (300.0, 7)),  # capped at five minutes
        (9, 0.0, (300.0, 10)),
        (9, 600.0, (0.0, 1)),  # ten minutes of running start the back-off over
    ],
)
def test_the_crash_loop_back_off_is_the_kubelets(restarts: int, ran_s: float, expected: tuple) -> None:
    assert restart_delay(restarts, ran_s) == expected


@pytest.mark.parametrize(
    ("policy", "code", "restarted"),
    [("Always", 0, True), ("Always", 1, True), (None, 0, True), ("OnFailure", 0, False),
     ("OnFailure", 1, True), ("Never", 0, False), ("Never", 1, False)],
)  # fmt: skip
def test_which_exits_the_kubelet_restarts(policy: str | None, code: int, restarted: bool) -> None:
    assert restarts_after(policy, code) is restarted


async def test_readiness_is_probed_only_once_the_startup_probe_passed(tmp_path: Path) -> None:
    started, readiness_runs = tmp_path / "started", tmp_path / "readiness-runs"
    changes: list[str] = []
    runtime = ProcessRuntime(
        selects=lambda pod: True,
        cdi_dirs=lambda node: [],
        log_dir=tmp_path,
        on_change=lambda pod: changes.append(pod["metadata"]["name"]),
    )
    probe = {"periodSeconds": 1, "failureThreshold": 1}
    pod = {
        "metadata": {"name": "daemon", "namespace": "default", "uid": "d"},
        "spec": {
            "nodeName": NODE,
            "securityContext": {"runAsUser": 0},  # its probes read and write the test's directory
            "containers": [
                {
                    "name": "c",
                    "command": [sys.executable, "-c", "import time; time.sleep(60)"],
                    "startupProbe": {"exec": {"command": ["test", "-f", str(started)]}, **probe},
                    "readinessProbe": {
                        "exec": {"command": ["sh", "-c", f"echo run >> {readiness_runs}"]},
                        **probe,
                        "periodSeconds": 3600,
                    },
                }
            ],
        },
    }
    await runtime.start(pod, [])
    try:
        await asyncio.sleep(0.3)
        assert await runtime.ready(pod) is False
        assert not readiness_runs.exists(), "no readiness probe before the startup probe passed"
        started.write_text("")
        async with asyncio.timeout(20):
            while not await runtime.ready(pod):  # noqa: ASYNC110 - the probe worker decides
                await asyncio.sleep(0.05)
        assert changes == ["daemon"], "one change handed on: not ready -> ready"
        assert readiness_runs.read_text() == "run\n", "readiness probed at once when startup passed"
    finally:
        await runtime.stop(pod)


@pytest.mark.parametrize("automount", [None, True, False])
async def test_a_container_gets_its_pods_bound_token_unless_it_opts_out(
    tmp_path: Path, automount: bool | None
) -> None:
    """As the kubelet projects a pod's service-account token, the runtime hands the container a kubeconfig
    bound to that pod (KUBECONFIG); `automountServiceAccountToken: false` leaves the runtime's own."""
    dump = tmp_path / "env"
    pod: dict[str, Any] = {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u1"},
        "spec": {
            "nodeName": NODE,
            "serviceAccountName": "sa",
            "securityContext": {"runAsUser": 0},
            "restartPolicy": "Never",
            "containers": [
                {"command": ["/bin/sh", "-c", f'printf %s "$KUBECONFIG" > {dump}']},
            ],
        },
    }
    if automount is not None:
        pod["spec"]["automountServiceAccountToken"] = automount
    asked: list[str] = []

    def kubeconfig(p: dict[str, Any]) -> Path:
        asked.append(f"{p['metadata']['namespace']}/{p['metadata']['name']}")
        return tmp_path / "bound-kubeconfig"

    runtime = ProcessRuntime(
        selects=lambda _: True,
        cdi_dirs=lambda _: [],
        log_dir=tmp_path / "logs",
        base_env={"PATH": "/usr/bin:/bin", "KUBECONFIG": "/runtime/own"},
        service_account_kubeconfig=kubeconfig,
    )
    await runtime.start(pod, [])
    async with asyncio.timeout(10):
        await runtime.running["u1"].process.wait()
    await runtime.stop(pod)
    bound = automount is not False
    assert dump.read_text() == (str(tmp_path / "bound-kubeconfig") if bound else "/runtime/own")
    assert asked == (["ns/p"] if bound else [])


async def test_an_ended_pod_is_reported_as_a_kubelet_reports_it_and_its_claim_unprepared(
    socket_root: Path,
) -> None:
    """restartPolicy Never, exit 3: phase Failed, the container terminated with exit code 3 and reason Error,
    Ready False (PodCompleted), and the claim unprepared, as the kubelet does for a terminated pod."""
    store, runtime, kubelet, cdi_dir = node_with_a_process_runtime(socket_root)
    spec = {
        "restartPolicy": "Never",
        "securityContext": {"runAsUser": 0},
        "containers": [{"name": "main", "image": "python", "command": [sys.executable, "-c", "exit(3)"]}],
        "resourceClaims": [{"name": "channel", "resourceClaimTemplateName": "tmpl"}],
    }
    store.create(store.type_of("", "pods"), "default", {"metadata": {"name": "worker"}, "spec": spec})
    async with serve_plugin(socket_root / "registry", socket_root / "plugin", DRIVER, ["v1.DRAPlugin"]):
        _allocate_worker_claim(store, cdi_dir, [])
        await kubelet.sync()
        async with asyncio.timeout(20):
            while get(store, "", "pods", "worker")["status"].get("phase") != "Failed":
                await asyncio.sleep(0.02)
                await kubelet.sync()
        status = get(store, "", "pods", "worker")["status"]
        (container,) = status["containerStatuses"]
        terminated = container["state"]["terminated"]
        assert (terminated["exitCode"], terminated["reason"], container["restartCount"]) == (3, "Error", 0)
        assert {c["type"]: (c["status"], c.get("reason")) for c in status["conditions"]}["Ready"] == (
            "False", "PodCompleted",
        )  # fmt: skip
        await kubelet.sync()  # the pass after the phase was written tears the ended pod down
        assert [call[0] for call in kubelet.unprepare_calls] == [DRIVER]
        assert kubelet.running == {} and runtime.running == {}
        assert get(store, "", "pods", "worker")["status"]["phase"] == "Failed", "an ended pod stays ended"


async def test_a_container_that_cannot_be_created_leaves_its_pod_pending_and_is_created_once_it_can(
    socket_root: Path,
) -> None:
    """A CDI device that no spec on the node defines: the runtime cannot create the container, so the pod
    stays Pending with the container waiting in CreateContainerError (the kubelet's getPhase: a container
    that never ran keeps its pod Pending), never Running; the kubelet tries again, and once the spec is there
    the container starts and the pod runs."""
    store, runtime, kubelet, cdi_dir = node_with_a_process_runtime(socket_root)
    kubelet.retry_backoff_s = 0.0
    marker, dump = socket_root / "ready", socket_root / "env"
    pod = _worker_pod(store, marker, dump)
    uid = pod["metadata"]["uid"]
    async with serve_plugin(socket_root / "registry", socket_root / "plugin", DRIVER, ["v1.DRAPlugin"]):
        try:
            _allocate_worker_claim(store, cdi_dir, [])
            spec_file = cdi_dir / "claim.yaml"
            written = spec_file.read_text()
            spec_file.unlink()  # the plugin's answer names a device no spec defines (yet)
            await kubelet.sync()
            status = get(store, "", "pods", "worker")["status"]
            (container,) = status["containerStatuses"]
            assert status["phase"] == "Pending" and uid not in runtime.running
            assert container["state"]["waiting"]["reason"] == "CreateContainerError"
            assert "unresolvable CDI devices" in container["state"]["waiting"]["message"]
            assert container["started"] is False and container["ready"] is False
            await kubelet.sync()
            assert get(store, "", "pods", "worker")["status"]["phase"] == "Pending", "tried again, in vain"

            spec_file.write_text(written)
            await kubelet.sync()
            status = get(store, "", "pods", "worker")["status"]
            assert status["phase"] == "Running" and uid in runtime.running
            assert "running" in status["containerStatuses"][0]["state"]
        finally:
            await asyncio.wait_for(runtime.stop_all(), 60)


class _HeldSpawnRuntime(ProcessRuntime):
    """A runtime whose container creation waits for its test: the window in which a kubelet pass runs while
    a container is being created."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.release = asyncio.Event()

    async def _spawn(self, pod: dict[str, Any], env: dict[str, str]) -> asyncio.subprocess.Process:
        async with asyncio.timeout(30):
            await self.release.wait()
        return await super()._spawn(pod, env)


async def test_a_pod_whose_container_is_being_created_is_pending_not_running(socket_root: Path) -> None:
    """A kubelet pass that runs while the container is still being created reports the pod Pending with the
    container ContainerCreating: Running would tell the rack's checks (and a user) that a workload runs that
    has not started (a worker then seen holding no channel)."""
    store = ObjectStore()
    add_classes(store)
    add_template(store, "tmpl")
    cdi_dir = socket_root / "cdi"
    runtime = _HeldSpawnRuntime(
        selects=lambda pod: True, cdi_dirs=lambda node: [cdi_dir], log_dir=socket_root
    )
    kubelet = SimKubelet(store, NODE, socket_root / "registry", runtime=runtime)
    kubelet.register_node()
    add_slice(store, NODE)
    pod = _worker_pod(store, socket_root / "ready", socket_root / "env")
    uid = pod["metadata"]["uid"]
    async with serve_plugin(socket_root / "registry", socket_root / "plugin", DRIVER, ["v1.DRAPlugin"]):
        try:
            _allocate_worker_claim(store, cdi_dir, [])
            await kubelet.sync(wait=False)  # the pod's start runs in its own task, as in the running kubelet
            async with asyncio.timeout(20):
                while uid not in kubelet.running:  # noqa: ASYNC110 - the start task prepares, then creates
                    await asyncio.sleep(0.01)
            await kubelet.sync(wait=False)  # another pass, while the container is being created
            status = get(store, "", "pods", "worker")["status"]
            assert status.get("phase", "Pending") == "Pending"
            assert all(
                c["state"]["waiting"]["reason"] == "ContainerCreating"
                for c in status.get("containerStatuses", [])
            )
            runtime.release.set()
            async with asyncio.timeout(20):
                while get(store, "", "pods", "worker")["status"].get("phase") != "Running":
                    await asyncio.sleep(0.02)
                    await kubelet.sync(wait=False)
            assert uid in runtime.running
        finally:
            runtime.release.set()
            await asyncio.wait_for(runtime.stop_all(), 60)
