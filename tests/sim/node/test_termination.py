"""A deleted pod ends as a real kubelet ends it: SIGTERM, SIGKILL after the grace period, its final phase,
then its removal."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from cdctl.sim.node.kubelet import SimKubelet
from tests.sim.fakeplugin import serve_plugin
from tests.sim.node.test_processruntime import _allocate_worker_claim, node_with_a_process_runtime
from tests.sim.standins import DRIVER, get

NODE = "n1"
# Each writes the file named by argv[1] once its SIGTERM handling is in place.
IGNORES_SIGTERM = "signal.signal(signal.SIGTERM, signal.SIG_IGN)"
EXITS_0_ON_SIGTERM = "signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))"
DIES_OF_SIGTERM = "pass"


def _container(handling: str, ready_file: Path) -> list[str]:
    script = f"import pathlib, signal, sys, time\n{handling}\npathlib.Path(sys.argv[1]).touch()\n"
    return [sys.executable, "-c", script + "while True: time.sleep(0.05)\n", str(ready_file)]


async def _delete_and_watch_it_end(
    socket_root: Path, script: str, grace_s: int
) -> tuple[float, dict[str, Any], SimKubelet]:
    """Run a one-container pod, delete it with `grace_s`; the seconds until it was gone, its last status."""
    store, _, kubelet, cdi_dir = node_with_a_process_runtime(socket_root)
    spec = {
        "securityContext": {"runAsUser": 0},
        "containers": [
            {"name": "main", "image": "python", "command": _container(script, socket_root / "up")}
        ],
        "resourceClaims": [{"name": "channel", "resourceClaimTemplateName": "tmpl"}],
    }
    pods = store.type_of("", "pods")
    store.create(pods, "default", {"metadata": {"name": "worker"}, "spec": spec})
    async with serve_plugin(socket_root / "registry", socket_root / "plugin", DRIVER, ["v1.DRAPlugin"]):
        _allocate_worker_claim(store, cdi_dir, [])
        await kubelet.sync()
        assert get(store, "", "pods", "worker")["status"]["phase"] == "Running"
        async with asyncio.timeout(30):
            while not (socket_root / "up").exists():  # noqa: ASYNC110 - its signal handling is in place
                await asyncio.sleep(0.02)
        watcher = store.watch(pods)
        started = time.monotonic()
        store.delete(pods, "default", "worker", grace_period_s=grace_s)
        assert store.exists_name(pods, "default", "worker"), "Terminating until its kubelet is done"
        await kubelet.sync()
        took = time.monotonic() - started
        assert not store.exists_name(pods, "default", "worker")
        events = [watcher.queue.get_nowait() for _ in range(watcher.queue.qsize())]
        assert events and events[-1].type == "DELETED"
        last = [e.obj for e in events if e.type == "MODIFIED"][-1]
        assert [call[0] for call in kubelet.unprepare_calls] == [DRIVER], "its claim unprepared first"
        return took, last["status"], kubelet


def _terminated(status: dict[str, Any]) -> tuple[str, int, str]:
    (container,) = status["containerStatuses"]
    terminated = container["state"]["terminated"]
    return status["phase"], terminated["exitCode"], terminated["reason"]


@pytest.mark.parametrize(
    ("script", "expected"),
    [
        (EXITS_0_ON_SIGTERM, ("Succeeded", 0, "Completed")),
        (DIES_OF_SIGTERM, ("Failed", 143, "Error")),  # 128 + SIGTERM
    ],
)
async def test_a_deleted_pods_container_gets_sigterm_and_the_pod_ends_in_its_final_phase(
    socket_root: Path, script: str, expected: tuple[str, int, str]
) -> None:
    took, status, _ = await _delete_and_watch_it_end(socket_root, script, grace_s=30)
    assert took < 25, "a container that ends on SIGTERM does not wait out the 30 s grace period"
    assert _terminated(status) == expected


async def test_a_container_that_ignores_sigterm_is_killed_when_the_deletions_grace_period_ends(
    socket_root: Path,
) -> None:
    took, status, _ = await _delete_and_watch_it_end(socket_root, IGNORES_SIGTERM, grace_s=1)
    assert took >= 1.0, "SIGKILL waits for the grace period the delete gave"
    assert _terminated(status) == ("Failed", 137, "Error")  # 128 + SIGKILL


async def test_a_deleted_pod_whose_container_never_ran_ends_failed_with_container_status_unknown(
    socket_root: Path,
) -> None:
    """Its container could not be created (its CDI device never resolved): deleted, it still ends in a
    terminal phase, Failed, its container terminated with ContainerStatusUnknown and exit code 137, as a
    v1.27+ kubelet writes it, and only then is it removed."""
    store, runtime, kubelet, cdi_dir = node_with_a_process_runtime(socket_root)
    spec = {
        "securityContext": {"runAsUser": 0},
        "containers": [
            {"name": "main", "image": "python", "command": _container(DIES_OF_SIGTERM, socket_root)}
        ],
        "resourceClaims": [{"name": "channel", "resourceClaimTemplateName": "tmpl"}],
    }
    pods = store.type_of("", "pods")
    store.create(pods, "default", {"metadata": {"name": "worker"}, "spec": spec})
    async with serve_plugin(socket_root / "registry", socket_root / "plugin", DRIVER, ["v1.DRAPlugin"]):
        _allocate_worker_claim(store, cdi_dir, [])
        (cdi_dir / "claim.yaml").unlink()  # the container cannot be created
        await kubelet.sync()
        assert get(store, "", "pods", "worker")["status"]["phase"] == "Pending"
        watcher = store.watch(pods)
        store.delete(pods, "default", "worker", grace_period_s=30)
        await kubelet.sync()
        assert not store.exists_name(pods, "default", "worker")
        events = [watcher.queue.get_nowait() for _ in range(watcher.queue.qsize())]
        last = [e.obj for e in events if e.type == "MODIFIED"][-1]
    (container,) = last["status"]["containerStatuses"]
    assert last["status"]["phase"] == "Failed"
    assert container["state"]["terminated"]["exitCode"] == 137
    assert container["state"]["terminated"]["reason"] == "ContainerStatusUnknown"
    assert container["state"]["terminated"]["message"] == (
        "The container could not be located when the pod was terminated"
    )
    assert runtime.running == {}
