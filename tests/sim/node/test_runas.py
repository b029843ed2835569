"""Containers run as the user their pod would run as: the image's, unless a securityContext says otherwise.

The switch itself needs root (CI and the development machine run the tests as root); run as another user,
those tests are skipped and the runtime says once that it cannot enforce users.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cdctl.controller.render import daemon_set
from cdctl.controller.settings import ControllerSettings
from cdctl.sim.node.forkserver import ForkServer
from cdctl.sim.node.processruntime import ProcessRuntime
from cdctl.sim.node.runas import IMAGE_USER, RunAs, container_user
from cdctl.sim.rack.launch import FORK_SERVER_PRELOAD

DOCKERFILE = Path(__file__).resolve().parents[3] / "Dockerfile"
needs_root = pytest.mark.skipif(
    os.geteuid() != 0, reason="switching a container's user needs root; this run is not root"
)


def rendered_daemon_pod() -> dict[str, Any]:
    """A pod of the controller's daemon DaemonSet, as the DaemonSet controller would create it."""
    cd = {"metadata": {"name": "cd", "namespace": "default", "uid": "0b5c7e1a-0000-4000-8000-000000000001"}}
    settings = ControllerSettings(pod_name="c-0", image_name="cdctl:test", log_verbosity_cd_daemon=4)
    template = daemon_set(cd, "nvidia-dra", settings)["spec"]["template"]
    return {
        "metadata": {"name": "daemon", "namespace": "nvidia-dra", "uid": "d-1", **template["metadata"]},
        "spec": {**template["spec"], "nodeName": "n1", "restartPolicy": "Never"},
    }


def test_the_image_user_is_the_dockerfiles() -> None:
    users = re.findall(r"^USER\s+(\d+):(\d+)\s*$", DOCKERFILE.read_text(), flags=re.MULTILINE)
    assert [tuple(int(part) for part in user) for user in users][-1:] == [IMAGE_USER]


def test_the_container_context_wins_over_the_pod_context_over_the_image() -> None:
    container: dict[str, Any] = {"name": "c"}
    pod: dict[str, Any] = {"spec": {"containers": [container]}}
    assert container_user(pod, container) == RunAs(*IMAGE_USER)
    pod["spec"]["securityContext"] = {"runAsUser": 1000, "runAsGroup": 2000}
    assert container_user(pod, container) == RunAs(1000, 2000)
    container["securityContext"] = {"runAsUser": 0}
    assert container_user(pod, container) == RunAs(0, 2000)
    del pod["spec"]["securityContext"]
    assert container_user(pod, container) == RunAs(0, 0)  # a user without a group: group 0, as containerd


def test_the_rendered_daemon_pod_runs_as_root() -> None:
    pod = rendered_daemon_pod()
    assert container_user(pod, pod["spec"]["containers"][0]) == RunAs(0, 0)


@pytest.fixture
def root_owned_dir() -> Iterator[Path]:
    """A directory like a daemon's /imexd: root's, mode 0755, under a path every user may walk."""
    base = Path(tempfile.mkdtemp(prefix="cdrunas-", dir="/tmp"))
    base.chmod(0o755)
    (base / "imexd").mkdir(mode=0o755)
    yield base
    shutil.rmtree(base, ignore_errors=True)


async def _run_writer(pod: dict[str, Any], base: Path) -> tuple[int, str]:
    """Run the pod's container with a command that writes its ids into /imexd, as the daemon's first write."""
    container = pod["spec"]["containers"][0]
    container.update(command=["/bin/sh", "-c", f"echo $(id -u):$(id -g) > {base / 'imexd' / 'ids'}"], args=[])
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        container.pop(probe, None)
    runtime = ProcessRuntime(selects=lambda pod: True, cdi_dirs=lambda node: [], log_dir=base / "logs")
    await runtime.start(pod, [])
    running = runtime.running[pod["metadata"]["uid"]]
    code = await asyncio.wait_for(running.process.wait(), 60)
    assert await runtime.ready(pod) is False or code == 0  # restartPolicy Never: an exited pod stays down
    await runtime.stop(pod)
    ids = base / "imexd" / "ids"
    return code, ids.read_text().strip() if ids.exists() else ""


@needs_root
async def test_a_daemon_pod_without_root_fails_to_write_its_domain_directory(root_owned_dir: Path) -> None:
    pod = rendered_daemon_pod()
    pod["spec"]["containers"][0].pop("securityContext")
    code, ids = await _run_writer(pod, root_owned_dir)
    assert code != 0 and ids == ""
    assert "Permission denied" in (root_owned_dir / "logs" / "nvidia-dra_daemon.log").read_text()


@needs_root
async def test_the_rendered_daemon_pod_writes_its_domain_directory_as_root(root_owned_dir: Path) -> None:
    code, ids = await _run_writer(rendered_daemon_pod(), root_owned_dir)
    assert (code, ids) == (0, "0:0")


@needs_root
async def test_a_forked_child_takes_the_requested_user_after_opening_its_log(root_owned_dir: Path) -> None:
    """The daemon's event log, created by the child in a directory anyone may write, is the child's user's;
    its output reaches the root-owned log the server opened for it before the switch."""
    shared = root_owned_dir / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    server = await ForkServer.start(FORK_SERVER_PRELOAD, env=dict(os.environ))
    try:
        log = root_owned_dir / "daemon.log"
        env = {
            **os.environ,
            "IMEXD_DIR": str(shared),
            "CDCTL_DB": str(shared / "events.db"),
            "COMPUTE_DOMAIN_UUID": "0b5c7e1a-0000-4000-8000-000000000001",
            "KUBECONFIG": str(shared / "no-such-kubeconfig"),
        }
        args = ["daemon", "run", "--node-name", "n1", "--pod-name", "p", "--pod-namespace", "ns"]
        child = await server.spawn(args, env, log, user=RunAs(*IMAGE_USER))
        assert await asyncio.wait_for(child.wait(), 60) != 0
        assert (shared / "events.db").stat().st_uid == IMAGE_USER[0], log.read_text()
        assert "cdctl: error:" in log.read_text()
    finally:
        await server.stop()
