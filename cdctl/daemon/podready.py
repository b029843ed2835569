"""The daemon's pod Ready the moment its IMEX is: the readiness-gate condition on its own pod.

The controller renders the daemon pods with the readiness gate `resource.nvidia.com/imex-ready`
(cdctl.controller.render) and no readiness or startup probe, so the kubelet reports the pod Ready once this
daemon sets that condition True, not at a probe's next tick (the probes were up to a second behind IMEX, and
a process per tick on every node). `PodReadiness.want(ready, output)` is called by the readiness monitor
(cdctl.daemon.readiness) on each change; `run()` writes the latest wanted state (pods/status, through
cdctl.k8s.daemonpods.set_own_pod_imex_ready), retrying transient failures with back-off. READY is written
at once; not ready only once it has lasted NOT_READY_GRACE_S: while a clique fills, each joining peer holds
IMEX at NOT_READY for a moment, and a Ready pod should not flap for that (as the probe's failureThreshold
kept it; the handover gate the plugin checks closes at once all the same). A refusal for good (403: RBAC of
an install that predates the gate; 422) is logged once and the writes stop: a pod without the gate is made
Ready by its probes. Run by cdctl.daemon.app.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import UTC, datetime

import structlog

from cdctl.asynctasks import wait_at_most
from cdctl.k8s.daemonpods import set_own_pod_imex_ready
from cdctl.k8s.errors import KubeApiError
from cdctl.k8s.rest import KubeApi

log = structlog.get_logger(__name__)
NOT_READY_GRACE_S = 4.0
RETRY_MAX_S = 5.0


class PodReadiness:
    def __init__(self, api: KubeApi, namespace: str, pod: str, grace_s: float = NOT_READY_GRACE_S) -> None:
        self.api = api
        self.namespace = namespace
        self.pod = pod
        self.grace_s = grace_s
        self.written: bool | None = None  # what the pod's condition says, as far as this daemon wrote it
        self.writes = 0
        self.disabled = ""  # why writing stopped for good
        self._wanted = False
        self._output = ""
        self._since = 0.0  # loop time of the last change of what is wanted
        self._changed = asyncio.Event()

    def want(self, ready: bool, output: str) -> None:
        if ready != self._wanted:
            self._since = asyncio.get_running_loop().time()
        self._wanted, self._output = ready, output
        self._changed.set()

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        delay = 0.1
        while not self.disabled:
            self._changed.clear()
            if self._wanted == self.written:
                await self._changed.wait()
                continue
            if not self._wanted and self.written is not None:
                left = self._since + self.grace_s - loop.time()
                if left > 0:  # not ready for a moment yet: a peer joining, say
                    with contextlib.suppress(TimeoutError):
                        await wait_at_most(self._changed.wait(), left)
                    continue
            wanted, output = self._wanted, self._output
            try:
                await set_own_pod_imex_ready(
                    self.api, self.namespace, self.pod, wanted, output.strip()[:256],
                    datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                )  # fmt: skip
            except KubeApiError as exc:
                if not exc.retriable:
                    self.disabled = str(exc)
                    log.warning("cannot set the pod's IMEX readiness condition: its probes decide its Ready",
                                pod=self.pod, error=str(exc))  # fmt: skip
                    return
                log.info("setting the pod's IMEX readiness failed; retrying", error=str(exc),
                         retry_in_s=delay)  # fmt: skip
                with contextlib.suppress(TimeoutError):
                    await wait_at_most(self._changed.wait(), delay)
                delay = min(delay * 2, RETRY_MAX_S)
                continue
            delay = 0.1
            self.written = wanted
            self.writes += 1
            log.info("pod IMEX readiness set", pod=self.pod, ready=wanted)
