"""One `cdctl collect` run: find the pods, read them in parallel into the collected file, rebuild read models.

`collect(settings, progress)` opens (or creates) the file, refuses a narrowing (`--domain`, `--node`) other
than the one the file was first collected with (a later run only adds what is new to the same sources),
resolves `--domain NAMESPACE/NAME` to the uids the controllers' logs observed for it, reads every pod
(cdctl.collect.fetch; at most `concurrency` at once), rebuilds the read models of the sources that changed
(cdctl.projections.collected) and records how the run ended: `complete`, or `partial` when a pod or a log was
skipped or cut short. It raises only for what stops the whole run (no kubeconfig, no pods, pods not
listable, a file that is not a collected file); `Summary` carries everything else. Called by
cdctl.cli.collect.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import orjson

from cdctl.collect.fetch import CollectError, NoProgress, Options, Outcome, PodReader, Progress, Writer
from cdctl.collect.pods import ComponentPod, component_pods
from cdctl.domain.errors import InvalidInput, PermanentError, StoreError, StoreLocked
from cdctl.k8s.client import api_client
from cdctl.k8s.errors import KubeApiError
from cdctl.k8s.rest import KubeApi
from cdctl.projections.collected import ensure_read_models, rebuild
from cdctl.store.collected import CollectedFile


@dataclass(frozen=True)
class CollectSettings:
    output: Path
    namespace: str
    kubeconfig: str | None = None
    since: str = ""  # ISO 8601 (already parsed and normalised by the CLI)
    domains: tuple[str, ...] = ()  # uids or NAMESPACE/NAME
    nodes: tuple[str, ...] = ()
    selector: str = ""
    service_account: str = ""
    concurrency: int = 8


@dataclass
class Summary:
    output: Path
    collection: int
    outcomes: list[Outcome] = field(default_factory=list)
    domains: tuple[str, ...] = ()  # the uids collected for
    rows: int = 0  # read-model rows rebuilt

    @property
    def partial(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.status != "ok"]

    @property
    def events(self) -> int:
        return sum(o.events for o in self.outcomes)


def _check_narrowing(file: CollectedFile, settings: CollectSettings) -> None:
    """A later run must narrow as the first did (only --since may differ): its sources continue theirs."""
    previous = file.collections()
    if not previous:
        return
    first = previous[0]
    nodes = orjson.loads(first["nodes"])
    if sorted(settings.nodes) != nodes:
        raise InvalidInput(
            str(settings.output), "--node",
            f"this file was collected with --node {nodes or '(all nodes)'}; collect into another file to"
            " narrow otherwise",
        )  # fmt: skip


async def _resolve_domains(readers: list[PodReader], settings: CollectSettings) -> tuple[str, ...]:
    """--domain values as uids: a uid as given, NAMESPACE/NAME from the controllers' logs."""
    uids: set[str] = set()
    controllers = [r for r in readers if r.pod.component == "controller"]
    for value in settings.domains:
        if "/" not in value:
            uids.add(value)
            continue
        namespace, _, name = value.partition("/")
        found: set[str] = set()
        for reader in controllers:
            try:
                if not reader.headers:
                    await reader.authenticate()
                found.update(await reader.domain_uids(namespace, name))
            except CollectError:
                continue  # that replica is reported when it is read
        if not found:
            raise InvalidInput(
                "command line",
                "--domain",
                f"no ComputeDomain {value} in the controllers' logs (give its uid)",
            )
        uids |= found
    return tuple(sorted(uids))


def _lock(output: Path) -> IO[bytes]:
    """One collection at a time into a file: an flock on it (created owner-only when new) for the run."""
    try:
        fd = os.open(output, os.O_RDONLY | os.O_CREAT, 0o600)
    except OSError as exc:
        raise StoreError(f"{output}: cannot open: {exc.strerror}") from None
    handle = os.fdopen(fd, "rb")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        raise StoreLocked(f"{output}: another cdctl collect is writing it") from None
    return handle


async def collect(settings: CollectSettings, progress: Progress | None = None) -> Summary:
    progress = progress or NoProgress()
    if not settings.output.parent.is_dir():
        raise StoreError(f"{settings.output}: directory {settings.output.parent} does not exist")
    existed = settings.output.exists()
    with _lock(settings.output):
        try:
            return await _collect_locked(settings, progress)
        except BaseException:
            if not existed and settings.output.stat().st_size == 0:
                settings.output.unlink()  # nothing collected: leave no empty file behind
            raise


async def _collect_locked(settings: CollectSettings, progress: Progress) -> Summary:
    """The API first (a bad kubeconfig or no pods leave no file behind), then the file."""
    client = await api_client(settings.kubeconfig)
    try:
        api = KubeApi(client, request_timeout_s=60.0)
        try:
            pods = await component_pods(api, settings.namespace, settings.selector, settings.nodes)
        except KubeApiError as exc:
            raise PermanentError(f"cannot list the pods of namespace {settings.namespace}: {exc}") from None
        if not pods:
            raise PermanentError(
                f"no cdctl controller or kubelet-plugin pods in namespace {settings.namespace}"
                + (f" on nodes {', '.join(settings.nodes)}" if settings.nodes else "")
            )
        file = await asyncio.to_thread(CollectedFile.open, settings.output, create=True)
        try:
            _check_narrowing(file, settings)
            server = str(client.configuration.host or "")
            return await _collect(file, api, server, pods, settings, progress)
        finally:
            file.close()
    finally:
        await client.close()


async def _collect(
    file: CollectedFile,
    api: KubeApi,
    server: str,
    pods: list[ComponentPod],
    settings: CollectSettings,
    progress: Progress,
) -> Summary:
    writer = Writer(file)
    options = Options(settings.namespace, settings.since, (), settings.service_account)
    readers = [PodReader(api, pod, options, writer, 0, progress) for pod in pods]
    uids = await _resolve_domains(readers, settings) if settings.domains else ()
    if file.collections():
        recorded = tuple(orjson.loads(file.collections()[0]["domains"]))
        if recorded != uids:
            raise InvalidInput(
                str(settings.output), "--domain",
                f"this file was collected for domains {list(recorded) or '(all)'}; collect into another file",
            )  # fmt: skip
    collection = await writer.call(
        file.begin_collection, server, settings.namespace, settings.since, uids, settings.nodes
    )
    changed_all = bool(await writer.call(ensure_read_models, file))
    options = Options(settings.namespace, settings.since, uids, settings.service_account)
    summary = Summary(settings.output, collection, domains=uids)
    limit = asyncio.Semaphore(max(1, settings.concurrency))

    async def read(pod: ComponentPod, reader: PodReader) -> list[Outcome]:
        async with limit:
            reader.options, reader.collection = options, collection
            return await reader.read()

    for outcomes in await asyncio.gather(*(read(r.pod, r) for r in readers)):
        summary.outcomes.extend(outcomes)
    changed = {o.source_id for o in summary.outcomes if o.source_id is not None and o.events}
    sources = [s for s in file.sources() if changed_all or s.id in changed]
    summary.rows = await writer.call(rebuild, file, sources)
    await writer.call(file.finish_collection, collection, "partial" if summary.partial else "complete")
    return summary
