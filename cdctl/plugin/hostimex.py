"""Is the host's IMEX ready now? `nvidia-imex-ctl -q` against the host's own config (HostManagedIMEX).

Under host-managed IMEX the operator runs `nvidia-imex.service`; cdctl neither starts nor restarts it, and
keeps no handover gate with it. What the plugin can still do is not hand a workload a channel while that IMEX
is down or restarting: with `--host-imex-config` set (the chart's `kubeletPlugin.hostImexConfig`), each
channel Prepare first asks `nvidia-imex-ctl -c CONFIG -q`, and anything but READY is a retriable wait that
asks again every POLL_S. The check cannot close the window between its answer and the workload's start (the
host's restart is not ours to hold back), so it narrows "IMEX restarting" to that window.

`find_ctl(driver_root)` finds the binary in the driver root (where the host's driver installs it) or on PATH.
Used by cdctl.plugin.app (built once) and cdctl.plugin.prepare (HostImexPort).
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
from dataclasses import dataclass
from pathlib import Path

from cdctl.asynctasks import wait_at_most
from cdctl.plugin.pluginconfig import BIN_DIRS

CTL = "nvidia-imex-ctl"
READY = "READY"
POLL_S = 0.5  # how often a waiting claim asks again (the host's IMEX tells no one when it is back)
QUERY_TIMEOUT_S = 5.0  # a query that does not answer in this long counts as not ready


def find_ctl(driver_root: Path) -> Path | None:
    """`nvidia-imex-ctl` under the driver root, else on PATH; None when neither has it."""
    for rel in BIN_DIRS:
        candidate = driver_root / rel / CTL
        if candidate.is_file():
            return candidate
    found = shutil.which(CTL)
    return Path(found) if found else None


@dataclass(frozen=True)
class HostImexCheck:
    ctl: Path
    config: Path
    poll_s: float = POLL_S

    async def not_ready(self) -> str | None:
        """None when the host's IMEX answers READY now; else what it answered (one line)."""
        try:
            process = await asyncio.create_subprocess_exec(
                str(self.ctl), "-c", str(self.config), "-q",
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
            )  # fmt: skip
        except OSError as exc:
            return f"{self.ctl} could not run: {exc}"
        try:
            output, _ = await wait_at_most(process.communicate(), QUERY_TIMEOUT_S)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
            return f"{CTL} -q did not answer within {QUERY_TIMEOUT_S:g} s"
        answer = output.decode(errors="replace").strip()
        if process.returncode == 0 and answer == READY:
            return None
        said = answer.splitlines()[-1] if answer else "nothing"
        return f"{CTL} -q answered {said} (exit code {process.returncode})"

    async def until_ready(self) -> None:
        """Return once the host's IMEX answers READY (the caller bounds the wait)."""
        # Polled: the host's IMEX signals no one when it is back (noqa: nothing to wait on but time).
        while await self.not_ready() is not None:  # noqa: ASYNC110
            await asyncio.sleep(self.poll_s)
