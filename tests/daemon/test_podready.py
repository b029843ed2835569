"""The daemon's pod readiness gate (cdctl.daemon.podready): READY is written at once, not ready only once it
has lasted the grace (a peer joining holds IMEX at NOT_READY for a moment), a transient failure is retried,
and a refusal for good (an install whose RBAC predates the gate) stops the writes without ending the
daemon."""

from __future__ import annotations

import asyncio
from typing import Any

from cdctl.daemon.podready import PodReadiness
from cdctl.k8s.errors import ForbiddenError, KubeApiError
from tests.daemon.conftest import eventually


class FakeApi:
    """Records each condition written; fails the next writes with `errors`."""

    def __init__(self) -> None:
        self.written: list[str] = []
        self.errors: list[KubeApiError] = []

    async def strategic_merge_patch(self, path: str, patch: dict[str, Any]) -> dict[str, Any]:
        assert path == "/api/v1/namespaces/ns/pods/d0/status"
        if self.errors:
            raise self.errors.pop(0)
        (condition,) = patch["status"]["conditions"]
        assert condition["type"] == "resource.nvidia.com/imex-ready"
        self.written.append(condition["status"])
        return patch


async def _running(api: FakeApi, grace_s: float = 0.3) -> tuple[PodReadiness, asyncio.Task[None]]:
    ready = PodReadiness(api, "ns", "d0", grace_s=grace_s)  # type: ignore[arg-type]
    return ready, asyncio.create_task(ready.run())


async def test_ready_at_once_and_not_ready_only_after_the_grace() -> None:
    api = FakeApi()
    ready, task = await _running(api)
    try:
        ready.want(False, "IMEX not started")  # a restarted container's pod may still say True
        await eventually(lambda: api.written == ["False"])
        ready.want(True, "READY")
        await eventually(lambda: api.written == ["False", "True"])
        ready.want(False, "NOT_READY")  # a peer joining: back within the grace
        await asyncio.sleep(0.1)
        ready.want(True, "READY")
        await asyncio.sleep(0.4)
        assert api.written == ["False", "True"], "a moment of NOT_READY does not take the pod out"
        ready.want(False, "NOT_READY")  # for good
        await asyncio.sleep(0.15)
        assert api.written == ["False", "True"]
        await eventually(lambda: api.written == ["False", "True", "False"])
    finally:
        task.cancel()


async def test_a_transient_failure_is_retried_and_a_refusal_for_good_stops_the_writes() -> None:
    api = FakeApi()
    api.errors = [KubeApiError(503, "ServiceUnavailable", "busy")]
    ready, task = await _running(api)
    ready.want(True, "READY")
    await eventually(lambda: api.written == ["True"])
    api.errors = [ForbiddenError(403, "Forbidden", "pods/status is forbidden")]
    ready.want(False, "NOT_READY")
    async with asyncio.timeout(5):
        await task  # the writes stop; the daemon's other work goes on
    assert "Forbidden" in ready.disabled and api.written == ["True"]
