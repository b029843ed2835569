"""A small cluster for `cdctl collect` without processes: the simulated API server in this process, and
"components" that are the real log server (cdctl.store.logserver, with the real TokenReviewer) over log
files written here, each with its pod object, reachable through the API server's pod proxy.

`Cluster` starts the API server, the namespace and the collector ServiceAccount; `add(component, node, logs)`
creates the pod (with an address) and serves `logs` on a local port routed from the pod's IP and port;
`stop(pod)` stops serving (the pod stays: a component that does not answer). Log files are written with
`write_log(path, events)`, events being (stream, typed event) pairs, so the read models have real input.
`run_collect(cluster, output, **settings)` runs the real collection. Used by tests/collect and tests/cli.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web

from cdctl.collect.run import CollectSettings, Summary, collect
from cdctl.domain.events import Actor, DomainEvent, NewEvent
from cdctl.k8s.plugincluster import connect, disconnect
from cdctl.k8s.rest import KubeApi
from cdctl.k8s.tokens import TokenReviewer
from cdctl.sim.apiserver.server import ApiServer, free_port
from cdctl.store import SqliteEventStore
from cdctl.store.collected import EVENT_COLUMNS, CollectedFile, Fetch, Source
from cdctl.store.export import ExportRequest, LogRef, export_lines
from cdctl.store.logserver import LogServer

NAMESPACE = "cdctl-system"
READER = "cdctl-collector"
HTTP_PORT = {"controller": 8080, "kubelet-plugin": 8081}
_ips = itertools.count(2)


async def write_log(path: Path, events: Sequence[tuple[str, DomainEvent]], key: bytes | None = None) -> None:
    """Append `events` (stream, event) to the log at `path`, one append each."""
    async with await SqliteEventStore.open(path, key=key) as store:
        for stream, event in events:
            await store.append(stream, [NewEvent.of(event, actor=Actor("test"))])


@dataclass
class Host:
    pod: str
    component: str
    node: str
    logs: list[LogRef]
    ip: str
    runner: web.AppRunner | None = None
    server: LogServer | None = None


@dataclass
class Cluster:
    api_server: ApiServer
    directory: Path
    component_api: KubeApi
    hosts: dict[str, Host] = field(default_factory=dict)

    @property
    def kubeconfig(self) -> Path:
        return self.api_server.write_kubeconfig(self.directory / "admin-kubeconfig")

    def pods(self) -> Any:
        return self.api_server.store.type_of("", "pods")

    async def add(self, component: str, node: str, logs: list[LogRef], pod: str = "") -> Host:
        name = pod or (f"cdctl-controller-{node or 'x'}" if component == "controller" else f"plugin-{node}")
        port = HTTP_PORT[component]
        body = {
            "metadata": {"name": name, "labels": {"app.kubernetes.io/component": component}},
            "spec": {
                "nodeName": node,
                "containers": [{"name": "c", "ports": [{"name": "http", "containerPort": port}]}],
            },
        }
        store = self.api_server.store
        store.create(self.pods(), NAMESPACE, body)
        ip = f"10.9.0.{next(_ips)}"
        created = store.get(self.pods(), NAMESPACE, name)
        created["status"] = {"phase": "Running", "podIP": ip}
        store.update(self.pods(), NAMESPACE, name, created, subresource="status")
        host = Host(name, component, node, logs, ip)
        self.hosts[name] = host
        await self.serve(host)
        return host

    async def serve(self, host: Host) -> None:
        reviewer = TokenReviewer(self.component_api, NAMESPACE, host.pod, f"{NAMESPACE}/{READER}")
        host.server = LogServer(
            {"component": host.component, "node": host.node, "pod": host.pod},
            lambda: list(host.logs),
            reviewer,
        )
        app = web.Application()
        host.server.add_routes(app)
        host.runner = web.AppRunner(app, access_log=None)
        await host.runner.setup()
        local = free_port()
        await web.TCPSite(host.runner, "127.0.0.1", local).start()
        self.api_server.pod_network.route(host.ip, HTTP_PORT[host.component], "127.0.0.1", local)

    async def stop(self, pod: str) -> None:
        host = self.hosts[pod]
        if host.runner is not None:
            await host.runner.cleanup()
            host.runner = None

    async def close(self) -> None:
        for pod in list(self.hosts):
            await self.stop(pod)


@asynccontextmanager
async def cluster(directory: Path) -> AsyncIterator[Cluster]:
    async with ApiServer() as api_server:
        store = api_server.store
        store.create(store.type_of("", "namespaces"), "", {"metadata": {"name": NAMESPACE}})
        store.create(store.type_of("", "serviceaccounts"), NAMESPACE, {"metadata": {"name": READER}})
        api = await connect(str(api_server.write_kubeconfig(directory / "component-kubeconfig")), 0, 0)
        built = Cluster(api_server, directory, api)
        try:
            yield built
        finally:
            await built.close()
            await disconnect(api)


async def run_collect(cluster: Cluster, output: Path, **settings: Any) -> Summary:
    values: dict[str, Any] = {"kubeconfig": str(cluster.kubeconfig), "namespace": NAMESPACE, **settings}
    return await collect(CollectSettings(output=output, **values))


async def store_locally(
    file: CollectedFile, ref: LogRef, *, node: str = "", pod: str = "", request: ExportRequest | None = None
) -> Source:
    """Copy the log `ref` into `file` as a collection would, without HTTP (unit tests of the file)."""
    collection = file.begin_collection("local", NAMESPACE, "", list(request.domains) if request else [], [])
    source: Source | None = None
    items: list[tuple[str, Any]] = []
    head: tuple[int, str] | None = None
    async for chunk in export_lines(ref, request or ExportRequest()):
        for raw in chunk.splitlines():
            line = orjson.loads(raw)
            if line["kind"] == "header":
                first = (line["first"]["position"], line["first"]["hash"]) if line["first"] else None
                head = (line["head"]["position"], line["head"]["hash"]) if line["head"] else None
                scheme = (line["scheme"], line["keyed_from"], line["key_check"])
                source = file.add_source(
                    component=ref.component, node=node, pod=pod, log=ref.name, domain_uid=ref.domain_uid,
                    scheme=scheme, first=first,
                )  # fmt: skip
            elif line["kind"] == "anchor":
                items.append(("anchor", (line["position"], line["hash"])))
            elif line["kind"] == "event":
                items.append(("event", tuple(line[c] for c in (*EVENT_COLUMNS, "hash"))))
    assert source is not None
    file.store_batch(source.id, items, None)
    file.record_fetch(
        collection,
        Fetch(ref.component, node, pod, ref.name, "ok", source_id=source.id, events=len(items), head=head),
    )
    file.finish_collection(collection, "complete")
    return source
