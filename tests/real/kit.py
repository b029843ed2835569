"""The real parts of the real tier: the realk8s kit's control plane and its hollow kubelets.

`missing()` says why the kit cannot run here (None when it can): its scripts (`$REALK8S_KIT`, default
`../shared/realk8s` beside the repository) or its built binaries (`$REALK8S_CACHE/bin`, default
`~/.cache/cdctl-realk8s`). `ControlPlane.fresh()` starts a new, empty cluster (etcd wiped) with the kit's
`start.sh`; `kubectl()` runs the kit's kubectl v1.36 as the admin. `HollowNode` is one node: the real kubelet
(its DRA manager and plugin watcher) with the kit's fake runtime, which resolves every CDI id it is handed
against the node's CDI directory and records each container it creates (`records()`). Used by
tests/real/rack.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
KIT = Path(os.environ.get("REALK8S_KIT", REPO.parent / "shared" / "realk8s"))
CACHE = Path(os.environ.get("REALK8S_CACHE", Path.home() / ".cache" / "cdctl-realk8s"))
BIN = CACHE / "bin"
BINARIES = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl", "hollow-kubelet-dra")
SCRIPTS = ("start.sh", "stop.sh", "pki.sh")
KUBELET_PORT_BASE = 20250
PORTS = tuple(
    int(os.environ.get(name, default))
    for name, default in (("APISERVER_PORT", 6443), ("ETCD_CLIENT_PORT", 23790), ("ETCD_PEER_PORT", 23800),
                          ("KCM_PORT", 10257), ("SCHED_PORT", 10259))
)  # fmt: skip


async def ports_free(ports: tuple[int, ...], timeout_s: float = 30.0) -> None:
    """Wait until nothing listens on `ports` of loopback any more."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while asyncio.get_running_loop().time() < deadline:
        busy = []
        for port in ports:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    busy.append(port)
        if not busy:
            return
        await asyncio.sleep(0.2)
    raise RuntimeError(f"ports {busy} still in use {timeout_s:g} s after stop.sh")


def missing() -> str | None:
    """Why the real tier cannot run here, in one line; None when it can."""
    absent = [s for s in SCRIPTS if not (KIT / s).is_file()]
    if absent:
        return f"realk8s kit not found at {KIT} (set REALK8S_KIT)"
    unbuilt = [b for b in BINARIES if not os.access(BIN / b, os.X_OK)]
    if unbuilt:
        return (
            f"realk8s kit not built ({', '.join(unbuilt)} missing in {BIN}): run {KIT}/build.sh and "
            f"{KIT}/hollow-build.sh (README there)"
        )
    if not any(os.access(Path(p) / "etcd", os.X_OK) for p in os.environ.get("PATH", "").split(os.pathsep)):
        return "etcd not found (apt-get install -y etcd-server)"
    return None


class KubectlError(RuntimeError):
    pass


async def run(argv: list[str], *, stdin: bytes | None = None, env: dict[str, str] | None = None,
              timeout_s: float = 120.0) -> tuple[int, str]:  # fmt: skip
    process = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env={**os.environ, "REALK8S_CACHE": str(CACHE), **(env or {})},
    )
    try:
        out, _ = await asyncio.wait_for(process.communicate(stdin), timeout_s)
    except BaseException:  # a timeout, or the caller cancelled: the child is reaped and its pipes closed
        if process.returncode is None:
            process.kill()
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(process.communicate(), 60)
        raise
    assert process.returncode is not None
    return process.returncode, out.decode(errors="replace")


@dataclass
class ControlPlane:
    kubeconfig: Path = CACHE / "kubeconfig"

    async def fresh(self) -> None:
        """A new cluster: the kit's processes stopped, etcd wiped, everything started again."""
        await run([str(KIT / "stop.sh"), "--wipe"], timeout_s=60)
        await ports_free(PORTS)  # stop.sh signals; a component still exiting holds its port
        code, output = await run([str(KIT / "start.sh")], timeout_s=300)
        if code != 0:
            raise RuntimeError(f"realk8s start.sh failed:\n{output}")

    async def stop(self) -> None:
        await run([str(KIT / "stop.sh")], timeout_s=60)

    async def kubectl(self, *args: str, stdin: str | None = None, check: bool = True,
                      timeout_s: float = 120.0) -> str:  # fmt: skip
        code, output = await run(
            [str(BIN / "kubectl"), "--kubeconfig", str(self.kubeconfig), *args],
            stdin=stdin.encode() if stdin is not None else None,
            timeout_s=timeout_s,
        )
        if check and code != 0:
            raise KubectlError(f"kubectl {' '.join(args)}: {output}")
        return output

    async def get(self, *args: str) -> Any:
        return json.loads(await self.kubectl("get", *args, "-o", "json"))

    async def apply(self, objects: list[dict[str, Any]], *args: str) -> str:
        return await self.kubectl("apply", *args, "-f", "-", stdin=yaml.safe_dump_all(objects))

    async def token(self, account: str, namespace: str, pod: str) -> str:
        """A token of `account` bound to `pod`, as the kubelet projects it into the pod."""
        output = await self.kubectl("create", "token", account, "-n", namespace, "--bound-object-kind", "Pod",
                                    "--bound-object-name", pod, "--duration", "24h")  # fmt: skip
        return output.strip()

    def write_kubeconfig(self, path: Path, token: str) -> Path:
        """A kubeconfig for the admin's server and CA with `token` as its only credential."""
        admin = yaml.safe_load(self.kubeconfig.read_text())
        cluster = admin["clusters"][0]
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [cluster],
            "users": [{"name": "sa", "user": {"token": token}}],
            "contexts": [{"name": "sa", "context": {"cluster": cluster["name"], "user": "sa"}}],
            "current-context": "sa",
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(config))
        path.chmod(0o600)
        return path


@dataclass
class HollowNode:
    """One node: the real kubelet with the kit's fake runtime, its state under `directory`."""

    name: str
    index: int
    directory: Path
    labels: dict[str, str]
    gpus: int = 4
    process: asyncio.subprocess.Process | None = None
    _kubeconfig: Path | None = field(default=None, repr=False)

    @property
    def root(self) -> Path:
        return self.directory / "root"

    @property
    def registry(self) -> Path:
        return self.root / "plugins_registry"

    @property
    def cdi(self) -> Path:
        return self.directory / "cdi"

    @property
    def containers(self) -> Path:
        return self.directory / "containers"

    @property
    def log(self) -> Path:
        return self.directory / "kubelet.log"

    @property
    def pod_ip_prefix(self) -> str:
        return f"127.1.{self.index}"  # loopback: a daemon's IMEX can listen on its pod's address

    async def start(self) -> None:
        if self._kubeconfig is None:
            code, output = await run([str(KIT / "pki.sh"), "node", self.name])
            if code != 0:
                raise RuntimeError(f"pki.sh node {self.name}: {output}")
            self._kubeconfig = Path(output.strip().splitlines()[-1])
        for directory in (self.registry, self.root / "plugins", self.cdi, self.containers):
            directory.mkdir(parents=True, exist_ok=True)
        labels = ",".join(f"{k}={v}" for k, v in sorted(self.labels.items()))
        argv = [
            str(BIN / "hollow-kubelet-dra"), "--morph", "kubelet", "--name", self.name,
            "--kubeconfig", str(self._kubeconfig), "--root-dir", str(self.root),
            "--kubelet-port", str(KUBELET_PORT_BASE + self.index), "--kubelet-read-only-port", "0",
            "--use-host-image-service=false", "--cdi-spec-dirs", str(self.cdi),
            "--container-record-dir", str(self.containers), "--pod-ip-prefix", self.pod_ip_prefix,
            "--node-labels", labels, "--extended-resources", f"nvidia.com/gpu={self.gpus}",
        ]  # fmt: skip
        with self.log.open("ab") as log:
            self.process = await asyncio.create_subprocess_exec(
                *argv, stdout=log, stderr=log, start_new_session=True
            )

    async def stop(self) -> None:
        process, self.process = self.process, None
        if process is None or process.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(process.wait(), 20)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            await asyncio.wait_for(process.wait(), 60)

    def records(self) -> list[dict[str, Any]]:
        """Every container the fake runtime was asked to create, oldest first, with `ok` from its name and
        `file`, the record's name (one per create: it holds the time in nanoseconds)."""
        found = []
        # pathlib's glob also matches dot files: the fake runtime writes `.<name>` and renames it when done
        written = [p for p in self.containers.glob("*.json") if not p.name.startswith(".")]
        for path in sorted(written, key=lambda p: p.name.rsplit("_", 2)[-2]):
            record = json.loads(path.read_text())
            record["ok"] = path.name.endswith("_ok.json")
            record["file"] = path.name
            found.append(record)
        return found

    def log_lines(self, containing: str) -> list[str]:
        if not self.log.exists():
            return []
        return [line for line in self.log.read_text(errors="replace").splitlines() if containing in line]
