"""The user a simulated container runs as, and the switch to it, as a container runtime does.

`container_user(pod, container)` is the uid and gid a container of the cdctl image gets: the container's
`securityContext.runAsUser` / `runAsGroup`, else the pod's `securityContext`, else the image's own user
(`IMAGE_USER`, the Dockerfile's `USER 65532:65532`). A user set without a group gets the image's group when it
is the image's user and group 0 otherwise, as containerd does for a uid the image's /etc/passwd lacks.

`RunAs.switch()` drops to that user in a process that is about to become the container (the fork server's
child before it runs the entry point, `preexec`-style for a fresh process): supplementary groups cleared, gid,
then uid. Only root can switch; `enforced()` says whether this process can (a test run as another user), and
logs a warning once when it cannot: the containers then run as this process's user, so a container that would
fail for want of root on a node starts anyway. Used by cdctl.sim.node.processruntime, daemonruntime and
forkserver.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)
IMAGE_USER = (65532, 65532)  # the Dockerfile's `USER`: tests/sim/node/test_runas.py keeps the two in step


class UserSwitchError(OSError):
    """The process could not take the container's user."""


@dataclass(frozen=True, slots=True)
class RunAs:
    uid: int
    gid: int

    @property
    def is_root(self) -> bool:
        return self.uid == 0

    def switch(self) -> None:
        """Become this user (root only): no supplementary groups, then the gid, then the uid."""
        try:
            os.setgroups([])
            os.setgid(self.gid)
            os.setuid(self.uid)
        except OSError as error:
            raise UserSwitchError(f"cannot run as {self.uid}:{self.gid}: {error}") from error

    def to_json(self) -> list[int]:
        return [self.uid, self.gid]


def _int_or_none(value: Any) -> int | None:
    return None if value is None else int(value)


def container_user(pod: dict[str, Any], container: dict[str, Any]) -> RunAs:
    """The user the container runs as: container securityContext over pod securityContext over the image."""
    pod_context = (pod.get("spec") or {}).get("securityContext") or {}
    context = container.get("securityContext") or {}
    uid = _int_or_none(context.get("runAsUser", pod_context.get("runAsUser")))
    gid = _int_or_none(context.get("runAsGroup", pod_context.get("runAsGroup")))
    image_uid, image_gid = IMAGE_USER
    if uid is None:
        uid = image_uid
    if gid is None:
        gid = image_gid if uid == image_uid else 0
    return RunAs(uid, gid)


_warned = False


def enforced() -> bool:
    """Whether containers really run as their user: only when this process is root (warned once if not)."""
    global _warned
    if os.geteuid() == 0:
        return True
    if not _warned:
        _warned = True
        log.warning(
            "simulated runtime: not running as root (uid %d), so containers run as uid %d instead of their "
            "securityContext's user: a container that needs root is not caught here",
            os.geteuid(),
            os.geteuid(),
        )
    return False
