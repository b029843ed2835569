"""The container runtime stand-in: CDI resolution, downward-API env, readiness probes, restarts."""

from __future__ import annotations

import asyncio
import sys
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
        ClaimTemplateController(store).reconcile()
        Allocator(store).reconcile()
        claim_name = get(store, "", "pods", "worker")["status"]["resourceClaimStatuses"][0][
            "resourceClaimName"
        ]
        claim_uid = get(store, "resource.k8s.io", "resourceclaims", claim_name)["metadata"]["uid"]
        _write_spec(cdi_dir, "claim", {f"{claim_uid}-channel-0": ["CLAIM_ENV=from-cdi"]}, [])
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
            for running in runtime.running.values():
                running.process.kill()
                await asyncio.wait_for(running.process.wait(), 60)


async def test_an_exited_process_is_restarted_unless_restart_policy_is_never(tmp_path: Path) -> None:
    runtime = ProcessRuntime(selects=lambda pod: True, cdi_dirs=lambda node: [], log_dir=tmp_path)
    pods = []
    for name, policy in (("always", "Always"), ("never", "Never")):
        pod = {
            "metadata": {"name": name, "namespace": "default", "uid": name},
            "spec": {
                "nodeName": NODE,
                "restartPolicy": policy,
                "securityContext": {"runAsUser": 0},
                "containers": [{"name": "c", "command": [sys.executable, "-c", "pass"]}],
            },
        }
        await runtime.start(pod, [])
        await asyncio.wait_for(runtime.running[name].process.wait(), 60)
        pods.append(pod)
    assert await runtime.ready(pods[0]) is True
    assert runtime.running["always"].restarts == 1
    assert await runtime.ready(pods[1]) is False
    assert runtime.running["never"].restarts == 0
    for pod in pods:
        await runtime.stop(pod)


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
