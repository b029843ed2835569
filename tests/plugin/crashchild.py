"""A plugin process for the crash test: prepares one claim against a SQLite event log, optionally dying.

Run as `python -m tests.plugin.crashchild DIR [CRASH_AT]`. CRASH_AT is an event type (the process dies right
after that event is durable), `label` (after the node label is written) or `cdi-file` (after the CDI file is
renamed into place but before its event): the process ends with os._exit(137), like a SIGKILL.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

from cdctl.api.refs import DomainInfo
from cdctl.domain.events import DomainEvent
from cdctl.plugin import prepare
from cdctl.plugin.checkpoint import ClaimBook
from cdctl.plugin.devices import ClaimRef
from cdctl.plugin.driver import Driver, RetryPolicy
from cdctl.plugin.prepare import DeviceState
from cdctl.plugin.preparesettings import FabricStatus
from cdctl.store import SqliteEventStore
from tests.plugin.conftest import CLIQUE, node_settings
from tests.plugin.fakes import C1, DOM1, FakeCluster, FakeGates, channel_claim

KILLED = 137


def die() -> None:
    sys.stdout.flush()
    os._exit(KILLED)


async def main(base: Path, crash_at: str | None) -> dict[str, Any]:
    settings = node_settings(base)
    store = await SqliteEventStore.open(base / "events.db")
    book = await ClaimBook.load(store, settings.node)
    cluster = FakeCluster()
    cluster.domains[DOM1] = DomainInfo(DOM1, "cd", "default")
    cluster.ready.add((DOM1, settings.node))
    cluster.add_claim(channel_claim(C1, DOM1))

    real_append = book.append

    async def append(uid: str, events: Any, *, expected_version: int | None = None) -> Any:
        rec = await real_append(uid, events, expected_version=expected_version)
        if any(isinstance(e, DomainEvent) and crash_at == e.TYPE for e in events):
            die()
        return rec

    book.append = append  # type: ignore[method-assign]
    if crash_at == "label":
        real_label = cluster.add_node_label

        async def label(node: str, uid: str) -> None:
            await real_label(node, uid)
            die()

        cluster.add_node_label = label  # type: ignore[method-assign]
    if crash_at == "cdi-file":
        real_write = prepare.cdi.write_spec

        def write(path: Path, spec: dict[str, Any], *, fsync: bool = True) -> None:
            real_write(path, spec, fsync=fsync)
            die()

        prepare.cdi.write_spec = write  # type: ignore[assignment]
    state = DeviceState(settings, book, cluster, FabricStatus(clique_id=CLIQUE), FakeGates())
    outcomes = await Driver(state, cluster, RetryPolicy(budget_s=5)).prepare_resources(
        [ClaimRef(C1, "default", "rc")]
    )
    await store.close()
    out = outcomes[C1]
    return {"devices": out.devices, "error": out.error}


if __name__ == "__main__":
    result = asyncio.run(main(Path(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else None))
    print(json.dumps(result))
