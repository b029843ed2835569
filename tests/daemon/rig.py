"""A rig for `cdctl daemon run` processes against the simulated API server, with the fake IMEX.

The test plays the controller: it creates the daemon pods, waits for each daemon's clique label and writes
the ComputeDomainClique entries (or a domain's `status.nodes`) the controller would. Every daemon gets its
own `/imexd` stand-in and its own hosts file (what a pod would have), and all share one fake IMEX peer
registry, as pods on one pod network share addresses.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cdctl.domain.computedomains import LABEL_CLIQUE_ID, DaemonEntry, clique_name
from cdctl.sim.apiserver.server import ApiServer
from cdctl.sim.rack.chart import crds
from tests.daemon.conftest import FakeImex, eventually

DRIVER_NAMESPACE = "nvidia-dra"
CLIQUE = "6a130f54-faaa-4b8f-847f-be44ab70f917.32766"


@dataclass
class Daemon:
    name: str
    node: str
    ip: str
    domain_uid: str
    imexd: Path
    env: dict[str, str]
    process: asyncio.subprocess.Process | None = None

    @property
    def hosts(self) -> Path:
        return self.imexd / "hosts"

    @property
    def db(self) -> Path:
        return self.imexd / "events.db"

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "cdctl", *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    def ready(self) -> bool:
        return self.cli("daemon", "check").returncode == 0

    def peer_states(self, hosts: Path | None = None) -> dict[str, str]:
        """`nvidia-imex-ctl -N` of this daemon: node-list entry -> UP / DOWN / UNRESOLVED."""
        env = dict(self.env)
        if hosts is not None:
            env["CDCTL_FAKE_IMEX_HOSTS"] = str(hosts)
        done = subprocess.run(
            ["nvidia-imex-ctl", "-c", str(self.imexd / "imexd.cfg"), "-N"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        return dict(line.split("\t") for line in done.stdout.splitlines())


class Rig:
    def __init__(self, server: ApiServer, fake: FakeImex, kubeconfig: Path) -> None:
        self.server = server
        self.store = server.store
        self.fake = fake
        self.kubeconfig = kubeconfig
        self.daemons: list[Daemon] = []

    def _type(self, group: str, plural: str) -> Any:
        return self.store.type_of(group, plural)

    def create_namespace(self, name: str) -> None:
        with contextlib.suppress(Exception):
            self.store.create(self._type("", "namespaces"), "", {"metadata": {"name": name}})

    def daemon(
        self, name: str, node: str, ip: str, domain_uid: str, *, clique: str = CLIQUE, **extra_env: str
    ) -> Daemon:
        """A daemon pod object and the environment its container would have (not started)."""
        self.store.create(
            self._type("", "pods"),
            DRIVER_NAMESPACE,
            {"metadata": {"name": name}, "spec": {"nodeName": node, "containers": [{"name": "c"}]}},
        )
        imexd = self.fake.imexd(name)
        (imexd / "hosts").write_text(f"127.0.0.1\tlocalhost\n{ip}\t{name}\n")
        env = self.fake.env(hosts_file=imexd / "hosts")
        env.pop("CDCTL_DB", None)  # each daemon keeps its log in its own /imexd
        env.update(
            {
                "KUBECONFIG": str(self.kubeconfig),
                "CLIQUE_ID": clique,
                "COMPUTE_DOMAIN_UUID": domain_uid,
                "COMPUTE_DOMAIN_NAME": f"cd-{domain_uid}",
                "COMPUTE_DOMAIN_NAMESPACE": "default",
                "NODE_NAME": node,
                "POD_IP": ip,
                "POD_NAME": name,
                "POD_NAMESPACE": DRIVER_NAMESPACE,
                "POD_UID": f"uid-{name}",
                "MAX_NODES_PER_IMEX_DOMAIN": "2",
                "IMEXD_DIR": str(imexd),
                "HOSTS_FILE": str(imexd / "hosts"),
                "READINESS_PERIOD": "0.2",
                "LOG_FORMAT": "json",
            }
        )
        env.update(extra_env)
        daemon = Daemon(name, node, ip, domain_uid, imexd, env)
        self.daemons.append(daemon)
        return daemon

    async def start(self, daemon: Daemon) -> None:
        log = (self.fake.root / f"{daemon.name}.log").open("ab")
        with log:
            daemon.process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "cdctl", "daemon", "run", env=daemon.env, stdout=log, stderr=log
            )

    def log_of(self, daemon: Daemon) -> str:
        return (self.fake.root / f"{daemon.name}.log").read_text()

    def label_of(self, daemon: Daemon) -> str | None:
        pod = self.store.get(self._type("", "pods"), DRIVER_NAMESPACE, daemon.name)
        labels: dict[str, str] = pod["metadata"].get("labels") or {}
        return labels.get(LABEL_CLIQUE_ID)

    async def wait_labelled(self, *daemons: Daemon) -> None:
        await eventually(lambda: all(self.label_of(d) is not None for d in daemons))

    def write_clique(self, domain_uid: str, entries: list[DaemonEntry], clique: str = CLIQUE) -> None:
        """What the controller keeps: the clique object of `domain_uid` with exactly `entries`."""
        kind = self._type("resource.nvidia.com", "computedomaincliques")
        name = clique_name(domain_uid, clique)
        body = {
            "metadata": {"name": name, "labels": {"resource.nvidia.com/computeDomain": domain_uid}},
            "daemons": [e.to_clique_json() for e in entries],
        }
        try:
            current = self.store.get(kind, DRIVER_NAMESPACE, name)
        except Exception:
            self.store.create(kind, DRIVER_NAMESPACE, body)
            return
        body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        self.store.update(kind, DRIVER_NAMESPACE, name, body)

    async def stop(self, daemon: Daemon) -> int:
        process = daemon.process
        assert process is not None
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
        async with asyncio.timeout(30):
            return await process.wait()

    async def close(self) -> None:
        for daemon in self.daemons:
            process = daemon.process
            if process is None or process.returncode is not None:
                continue
            process.send_signal(signal.SIGTERM)
            try:
                async with asyncio.timeout(20):
                    await process.wait()
            except TimeoutError:
                process.kill()
                await asyncio.wait_for(process.wait(), 60)


async def open_rig(server: ApiServer, fake: FakeImex) -> Rig:
    kubeconfig = server.write_kubeconfig(fake.root / "kubeconfig")
    rig = Rig(server, fake, kubeconfig)
    crd_kind = rig._type("apiextensions.k8s.io", "customresourcedefinitions")
    for crd in crds():
        rig.store.create(crd_kind, "", crd)
    rig.create_namespace(DRIVER_NAMESPACE)
    rig.create_namespace("default")
    return rig
