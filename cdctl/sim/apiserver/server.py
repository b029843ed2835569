"""The simulated Kubernetes API server: an aiohttp site on loopback over one ObjectStore.

Tests start it in process (`async with ApiServer() as server:`, then point kubernetes_asyncio at
`server.url` or at the file from `server.write_kubeconfig(path)`); `cdctl sim apiserver` runs it standalone.
Faults on demand: `server.faults` (error shares, queued errors, delays), `drop_watches()`, and `restart()`,
which keeps the store and the port. `server.rbac.load(objects)` enforces Roles and bindings for clients that
connect with a service-account token (`write_kubeconfig(path, token=...)`; cdctl.sim.apiserver.rbac), and
`server.load_policies(objects)` stores ValidatingAdmissionPolicies and their bindings, which every write then
passes (cdctl.sim.apiserver.policies). `server.audit` lists every request with its user (and bound pod),
verb, object and response code (cdctl.sim.apiserver.audit). `server.pod_network` routes the pods proxy
subresource to the local processes that serve each pod's IP and port (cdctl.sim.apiserver.proxy).
`server.requests` counts the requests answered, by verb, resource and code
(cdctl.sim.apiserver.requestcounts).
"""

from __future__ import annotations

import asyncio
import random
import signal
import socket
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml
from aiohttp import web

from cdctl.sim.apiserver.audit import AuditLog
from cdctl.sim.apiserver.faults import FaultPlan
from cdctl.sim.apiserver.handlers import build_app
from cdctl.sim.apiserver.lifecycle import StartStop
from cdctl.sim.apiserver.proxy import PodNetwork
from cdctl.sim.apiserver.rbac import Rbac
from cdctl.sim.apiserver.requestcounts import RequestCounts
from cdctl.sim.apiserver.settings import ServerSettings
from cdctl.sim.apiserver.store import ObjectStore

KUBECONFIG_TOKEN = "cdctl-sim"  # the server accepts any credentials; clients still send one


class ApiServer(StartStop):
    def __init__(
        self,
        store: ObjectStore | None = None,
        settings: ServerSettings | None = None,
        faults: FaultPlan | None = None,
    ) -> None:
        self.settings = settings or ServerSettings()
        self.store = store or ObjectStore(history_window=self.settings.history_window)
        self.store.features.dra_consumable_capacity = self.settings.dra_consumable_capacity
        self.faults = faults or FaultPlan()
        # Enforced for service-account tokens once roles are loaded (cdctl.sim.apiserver.rbac).
        self.rbac = Rbac()
        # Every request, with its user, verb, object and code (cdctl.sim.apiserver.audit).
        self.audit = AuditLog(self.settings.audit_limit)
        self.pod_network = PodNetwork()
        self.requests = RequestCounts()  # summed across restart(), unlike a real server process
        self._runner: web.AppRunner | None = None
        self.restarts = 0

    @property
    def port(self) -> int:
        return self.settings.port

    @property
    def url(self) -> str:
        return f"http://{self.settings.host}:{self.settings.port}"

    @property
    def running(self) -> bool:
        return self._runner is not None

    async def start(self) -> None:
        if self._runner is not None:
            return
        if self.settings.port == 0:
            self.settings.port = free_port(self.settings.host)
        app = build_app(self.store, self.settings, self.faults, self.rbac, self.audit, self.pod_network)
        app.on_response_prepare.append(self.requests.on_response_prepare)
        runner = web.AppRunner(app, shutdown_timeout=1.0, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, self.settings.host, self.settings.port, reuse_address=True)
        try:
            await site.start()
        except OSError:
            await runner.cleanup()
            raise
        self._runner = runner

    async def stop(self) -> None:
        if self._runner is None:
            return
        self.store.hub.close_all()
        runner, self._runner = self._runner, None
        await runner.cleanup()

    async def restart(self) -> None:
        """Stop serving (every connection and watch ends) and serve again on the same port, same objects."""
        await self.stop()
        await self.start()
        self.restarts += 1

    def load_policies(self, objects: Iterable[Mapping[str, Any]]) -> int:
        """Create (or replace) the ValidatingAdmissionPolicies and bindings among `objects`, policies first;
        other kinds are ignored. Returns how many were stored; a policy the simulator cannot run raises
        Invalid. The same as creating them through the API as the admin."""
        kinds = {"ValidatingAdmissionPolicy": 0, "ValidatingAdmissionPolicyBinding": 1}
        wanted = sorted((o for o in objects if o.get("kind") in kinds), key=lambda o: kinds[str(o["kind"])])
        for obj in wanted:
            plural = f"{str(obj['kind']).lower()}s".replace("policys", "policies")
            resource_type = self.store.type_of("admissionregistration.k8s.io", plural)
            name = str(obj["metadata"]["name"])
            if self.store.exists_name(resource_type, "", name):
                self.store.delete(resource_type, "", name)
            self.store.create(resource_type, "", dict(obj))
        return len(wanted)

    def drop_watches(self) -> int:
        """End every open client watch now; returns how many there were."""
        return self.store.hub.close_all()

    def kubeconfig(self, token: str = KUBECONFIG_TOKEN) -> dict[str, Any]:
        """A kubeconfig for this server; `token` picks the identity
        (cdctl.sim.apiserver.rbac.service_account_token)."""
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "cdctl-sim", "cluster": {"server": self.url}}],
            "users": [{"name": "cdctl-sim", "user": {"token": token}}],
            "contexts": [{"name": "cdctl-sim", "context": {"cluster": "cdctl-sim", "user": "cdctl-sim"}}],
            "current-context": "cdctl-sim",
            "preferences": {},
        }

    def write_kubeconfig(self, path: Path, token: str = KUBECONFIG_TOKEN) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(self.kubeconfig(token), sort_keys=False))
        return path


# Below Linux's default ephemeral range (32768-60999), from which the kernel picks both a port for `bind(0)`
# and the source port of every outgoing connection: a port probed free there was sometimes the source port of
# a client's connection by the time the component bound it (EADDRINUSE, seen in CI). Here only another
# explicit bind can collide.
FREE_PORT_RANGE = (20000, 32767)
_handed_out: set[int] = set()
_next_port = random.randint(*FREE_PORT_RANGE)


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on now, for a server a component starts later (it must bind it itself).

    One process never hands out a port twice: a rack picks some forty ports before its components bind them,
    and random picks collided (EADDRINUSE at start about once in fifteen racks). So the picks walk the range
    from a random start (other processes start elsewhere, rarely meeting it), skipping ports handed out.
    """
    global _next_port
    low, high = FREE_PORT_RANGE
    for _ in range(high - low + 1):
        port = _next_port
        _next_port = low if port >= high else port + 1
        if port in _handed_out:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind((host, port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    raise OSError(f"no free port on {host} in {low}-{high}: all were taken or handed out")


async def serve_until_stopped(settings: ServerSettings, kubeconfig_out: Path | None = None) -> None:
    """Run an API server until SIGTERM or SIGINT (the body of `cdctl sim apiserver`)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    async with ApiServer(settings=settings) as server:
        if kubeconfig_out is not None:
            server.write_kubeconfig(kubeconfig_out)
        print(f"simulated API server listening on {server.url}", file=sys.stderr, flush=True)
        await stop.wait()
