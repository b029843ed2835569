"""The daemon's event log (cdctl.daemon.journal): no event lost when a record is cancelled mid-append.

At shutdown the daemon cancels its readiness monitor, which may be inside `Journal.record` while the append
commits; the IMEX exit recorded next must still land (a stale version count used to drop it as a conflict).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from cdctl.daemon.journal import Journal
from cdctl.domain.imex import ImexDaemonStopped, ImexExited, ImexReadinessChanged, imex_stream


async def _types(journal: Journal) -> list[str]:
    return [e.type for e in await journal.store.read_stream(imex_stream("n1"))]


async def test_a_record_cancelled_while_its_append_commits_loses_no_later_event(tmp_path: Path) -> None:
    journal = await Journal.open(tmp_path / "events.db", "n1", "daemon-n1")
    try:
        store = journal.store
        committing = asyncio.Event()
        appends: list[asyncio.Future[object]] = []
        append = store.append

        async def slow_append(*args: object, **kwargs: object) -> object:
            # The append goes on to commit whatever happens to its caller, as the writer thread's does.
            appends.append(asyncio.ensure_future(append(*args, **kwargs)))  # type: ignore[arg-type]
            committing.set()
            return await asyncio.shield(appends[0])

        store.append = slow_append  # type: ignore[method-assign]
        readiness = asyncio.create_task(journal.record(ImexReadinessChanged("n1", True, "READY")))
        await asyncio.wait_for(committing.wait(), 30)
        readiness.cancel()  # shutdown cancels the monitor inside its record
        await asyncio.gather(readiness, return_exceptions=True)
        store.append = append  # type: ignore[method-assign]
        await appends[0]  # the append its caller gave up on commits all the same

        await journal.record(ImexExited("n1", 42, 0, None, True, "stop"))
        await journal.record(ImexDaemonStopped("n1", "stop", False))
        assert await _types(journal) == ["ImexReadinessChanged", "ImexExited", "ImexDaemonStopped"]
    finally:
        await journal.close()
