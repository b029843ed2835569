"""What the simulated kubelet asks of a container runtime, and the kubelet's rules for a container that exits.

`PodRuntime` is the interface (cdctl.sim.node.processruntime runs real processes; `ImmediateRuntime` runs
nothing and every pod is Ready at once). `ContainerView` is what the kubelet reads back to write the pod's
status (cdctl.sim.node.podstatus). The restart rules are the kubelet's:

* `restartPolicy: Never`, or `OnFailure` after exit code 0: the container is not restarted, and the pod's
  phase becomes Succeeded (every container exited 0) or Failed.
* `Always`, or `OnFailure` after a non-zero exit: restarted with the kubelet's crash-loop back-off. The
  first restart is at once; each later one waits twice the one before, from `base_s` (10 s) up to `max_s`
  (300 s), and the back-off starts over once a container has run for RESET_AFTER_S (10 minutes). While it
  waits the container is `waiting` with reason CrashLoopBackOff.

Pure: used by cdctl.sim.node.processruntime and cdctl.sim.node.kubelet.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

CRASH_BACKOFF_S = 10.0  # the kubelet's initial container restart back-off
CRASH_BACKOFF_MAX_S = 300.0  # and its cap (MaxContainerBackOff)
RESET_AFTER_S = 600.0  # a container that ran this long starts its back-off over
CRASH_LOOP = "CrashLoopBackOff"
CREATE_ERROR = "CreateContainerError"


@dataclass(frozen=True)
class ContainerView:
    """A pod's (first) container as the runtime sees it now."""

    ready: bool
    running: bool = True
    restarts: int = 0
    started_at: str = ""
    exit_code: int | None = None  # of its last exit (the terminated state, or lastState while restarting)
    exit_reason: str = ""  # Completed, Error, OOMKilled ...
    exit_message: str = ""  # the terminated state's message, where the kubelet writes one
    finished_at: str = ""
    waiting_reason: str = ""  # CrashLoopBackOff while a restart waits out its back-off; CreateContainerError
    waiting_message: str = ""  # why it waits, as `kubectl describe` shows it
    final: bool = False  # exited and not to be restarted: the pod's phase ends

    @property
    def phase(self) -> str:
        """The pod phase this container gives a one-container pod, as the kubelet's getPhase decides it:
        Pending while the container waits and has never run (being created, or its creation failed), Running
        once it ran (even while it waits to restart), Succeeded or Failed once it exited for good."""
        if self.final:
            return "Succeeded" if self.exit_code == 0 else "Failed"
        if not self.running and self.exit_code is None and not self.started_at:
            return "Pending"
        return "Running"


READY = ContainerView(ready=True)


def exit_reason(code: int) -> str:
    """What a kubelet reports as a terminated container's reason."""
    return "Completed" if code == 0 else "Error"  # OOMKilled needs the kernel's OOM killer: not modelled


def restarts_after(policy: str | None, code: int) -> bool:
    """Whether the kubelet restarts a container that exited with `code` under the pod's restartPolicy."""
    if policy == "Never":
        return False
    if policy == "OnFailure":
        return code != 0
    return True  # Always, the default


def restart_delay(
    restarts: int, ran_s: float, base_s: float = CRASH_BACKOFF_S, max_s: float = CRASH_BACKOFF_MAX_S
) -> tuple[float, int]:
    """(seconds to wait before restarting, back-off steps taken after it) for a container restarted
    `restarts` times in its current back-off that just ran for `ran_s`."""
    if ran_s >= RESET_AFTER_S:
        restarts = 0
    if restarts == 0:
        return 0.0, 1
    return min(max_s, base_s * 2 ** (restarts - 1)), restarts + 1


class PodRuntime(Protocol):
    """What runs a pod's containers once its claims are prepared."""

    async def start(self, pod: dict[str, Any], cdi_devices: list[str]) -> None: ...

    async def container(self, pod: dict[str, Any]) -> ContainerView: ...

    async def stop(self, pod: dict[str, Any]) -> int | None:
        """SIGTERM, then SIGKILL after `stop_grace_s(pod)`; the exit code (None: nothing was running)."""
        ...


def stop_grace_s(pod: Mapping[str, Any]) -> float | None:
    """How long a stopping container may take after SIGTERM: a deleted pod's deletionGracePeriodSeconds,
    else its terminationGracePeriodSeconds (None: neither is set)."""
    grace = (pod.get("metadata") or {}).get("deletionGracePeriodSeconds")
    if grace is None:
        grace = (pod.get("spec") or {}).get("terminationGracePeriodSeconds")
    return None if grace is None else float(grace)


def exit_code(returncode: int) -> int:
    """A process's return code as a runtime reports it: death by signal N is 128 + N."""
    return returncode if returncode >= 0 else 128 - returncode


def not_created(error: str) -> ContainerView:
    """A container the runtime could not create (an unresolvable CDI device, a missing command): it waits,
    and the kubelet tries again."""
    return ContainerView(ready=False, running=False, waiting_reason=CREATE_ERROR, waiting_message=error)


NEVER_RAN_CODE = 137
NEVER_RAN_REASON = "ContainerStatusUnknown"
NEVER_RAN_MESSAGE = "The container could not be located when the pod was terminated"


def never_ran(now: str) -> ContainerView:
    """The container of a pod deleted before it ever ran, as the kubelet ends it: terminated with
    ContainerStatusUnknown and exit code 137, so the pod's phase is Failed (since v1.27 the kubelet gives
    every deleted pod a terminal phase)."""
    return ContainerView(
        ready=False, running=False, exit_code=NEVER_RAN_CODE, exit_reason=NEVER_RAN_REASON,
        exit_message=NEVER_RAN_MESSAGE, finished_at=now, final=True,
    )  # fmt: skip


def stopped(code: int, now: str) -> ContainerView:
    """A container the kubelet stopped for good (its pod was deleted)."""
    return ContainerView(
        ready=False, running=False, exit_code=code, exit_reason=exit_reason(code), finished_at=now, final=True
    )


class ImmediateRuntime:
    """Runs nothing: every pod is Ready as soon as its claims are prepared."""

    async def start(self, pod: dict[str, Any], cdi_devices: list[str]) -> None:
        return None

    async def container(self, pod: dict[str, Any]) -> ContainerView:
        return READY

    async def stop(self, pod: dict[str, Any]) -> int | None:
        return 0  # nothing runs, so nothing is slow to end
