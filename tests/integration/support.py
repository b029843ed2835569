"""Helpers for the rack tests of domains that change shape: a socket-safe work directory, waiting for a
condition with a bounded time, scaling a Job, the domain's uid, the moment formation is under way, the
controller replica that holds the Lease, and running the cdctl command line."""

from __future__ import annotations

import asyncio
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from cdctl.domain.computedomains import LABEL_COMPUTE_DOMAIN
from cdctl.sim.rack.checks import CD_GROUP
from cdctl.sim.rack.launch import Rack


async def run_cdctl(*argv: str, timeout_s: float = 120.0) -> tuple[int, str]:
    """`python -m cdctl ARGV` as a user runs it: its exit code and its output (stdout and stderr)."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "cdctl", *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    try:
        async with asyncio.timeout(timeout_s):
            output, _ = await process.communicate()
    finally:
        if process.returncode is None:
            process.kill()
            await asyncio.wait_for(process.wait(), 60)
    assert process.returncode is not None
    return process.returncode, output.decode()


@pytest.fixture
def work_dir() -> Iterator[Path]:
    # Unix socket paths are limited to 108 bytes; pytest's tmp_path can be longer.
    directory = Path(tempfile.mkdtemp(prefix="cdrack-", dir="/tmp"))
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


async def until(what: str, missing: Callable[[], str | None], timeout_s: float = 30.0) -> float:
    """Poll `missing()` (what is still missing, None when done) until done; the seconds it took."""
    began = time.monotonic()
    while (left := missing()) is not None:
        if time.monotonic() - began > timeout_s:
            raise AssertionError(f"{what}: still waiting after {timeout_s:.0f} s: {left}")
        await asyncio.sleep(0.05)
    return time.monotonic() - began


def scale_job(rack: Rack, namespace: str, job: str, parallelism: int) -> None:
    """What `kubectl scale job` does: change `spec.parallelism`."""
    jobs = rack.store.type_of("batch", "jobs")
    body = rack.store.get(jobs, namespace, job)
    body["spec"]["parallelism"] = parallelism
    rack.store.update(jobs, namespace, job, body)


def domain_uid(rack: Rack, namespace: str, name: str) -> str:
    cd = rack.store.get(rack.store.type_of(CD_GROUP, "computedomains"), namespace, name)
    return str(cd["metadata"]["uid"])


def beyond_faults(problems: list[str], killed_plugins: set[str]) -> list[str]:
    """The scenario's problems but the ones a fault made on purpose: the kubelet's resource-health stream of
    a node whose plugin was killed breaks (`<node>: NodeWatchResources of <driver>: <transport error>`), as
    it would on a real node; anything else the stream said, and every other problem, stays."""
    prefixes = tuple(f"{node}: NodeWatchResources of " for node in killed_plugins)
    return [p for p in problems if not p.startswith(prefixes)]


LEASE = "nvidia-compute-domain-controller"


async def at_mid_formation(rack: Rack, workers_running: Callable[[], bool]) -> None:
    """Wait until the controller has acted (daemon DaemonSet made, a node labelled) and no worker runs yet."""

    def missing() -> str | None:
        daemonsets, _ = rack.store.list_objects(rack.store.type_of("apps", "daemonsets"), copies=False)
        nodes, _ = rack.store.list_objects(rack.store.type_of("", "nodes"), copies=False)
        labelled = any(LABEL_COMPUTE_DOMAIN in (n["metadata"].get("labels") or {}) for n in nodes)
        return None if daemonsets and labelled and not workers_running() else "not yet"

    await until("formation under way", missing, timeout_s=60)


def leader(rack: Rack) -> str:
    """The Lease holder's identity (the controller pod's name and a suffix); empty when none holds it."""
    lease = rack.store.get(
        rack.store.type_of("coordination.k8s.io", "leases"), rack.settings.driver_namespace, LEASE
    )
    return str((lease.get("spec") or {}).get("holderIdentity") or "")
