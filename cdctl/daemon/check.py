"""`cdctl daemon check`: the startup, liveness and readiness probe of an IMEX daemon pod.

Called every few seconds on every node (by `cdctl daemon check` in cdctl.cli.daemon, and by the daemon's own
readiness monitor), so it imports the standard library only. With an empty clique ID there is nothing to
check (the node is outside any NVLink fabric). Otherwise it runs `nvidia-imex-ctl -c <imexd>/imexd.cfg -q`
and succeeds only when the answer is exactly `READY` and (`gated`, the pod's probes) the daemon has opened
the handover gate for that IMEX (cdctl.api.imexgate): the pod turns not Ready when the daemon closes the gate
before a restart, not three failed probes after IMEX went away. Any other answer, a non-zero exit, a missing
binary, a timeout or a closed gate is a `NotReady` carrying what was found.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
from dataclasses import dataclass
from pathlib import Path

from cdctl.api.imexgate import gate_state

CONFIG_NAME = "imexd.cfg"  # the same name as cdctl.domain.imex.CONFIG_NAME, kept import-free here
EMPTY_CLIQUE_MESSAGE = "check succeeded (noop, clique ID is empty)"
CLIQUE_FILE = "clique"  # the same name as cdctl.api.shareddaemon.CLIQUE_FILE, kept import-free here


def shared_clique(imexd_dir: Path) -> str | None:
    """The shared daemon's clique ID, as the node's kubelet plugin wrote it into its directory; None when
    the plugin has not written it yet."""
    try:
        return (imexd_dir / CLIQUE_FILE).read_text().strip()
    except FileNotFoundError:
        return None


READY_ANSWER = "READY"


class NotReady(Exception):
    """The local IMEX daemon is not ready; the message is one line for the kubelet's probe output."""

    exit_code = 1

    def __init__(self, output: str) -> None:
        super().__init__(f"IMEX daemon not ready: {output}")
        self.output = output


@dataclass(frozen=True, slots=True)
class CheckSettings:
    clique_id: str
    imexd_dir: Path
    ctl_binary: str = "nvidia-imex-ctl"
    timeout_s: float = 10.0
    gated: bool = True  # the daemon's own monitor asks IMEX alone: it is what opens the gate

    @property
    def config_path(self) -> Path:
        return self.imexd_dir / CONFIG_NAME

    def argv(self) -> list[str]:
        return [self.ctl_binary, "-c", str(self.config_path), "-q"]


def _one_line(text: str) -> str:
    return " | ".join(line.strip() for line in text.strip().splitlines() if line.strip()) or "(no output)"


def _verdict(settings: CheckSettings, returncode: int, output: str) -> str:
    if returncode != 0:
        raise NotReady(f"nvidia-imex-ctl exited with {returncode}: {_one_line(output)}")
    if output.strip() != READY_ANSWER:
        raise NotReady(_one_line(output))
    if settings.gated and (closed := gate_state(settings.imexd_dir)) is not None:
        raise NotReady(f"IMEX answered READY, but the handover gate is closed: {closed}")
    return READY_ANSWER


def check(settings: CheckSettings) -> str:
    """The probe, blocking: a success message, or NotReady."""
    if not settings.clique_id:
        return EMPTY_CLIQUE_MESSAGE
    try:
        done = subprocess.run(
            settings.argv(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=settings.timeout_s,
            check=False,
        )
    except FileNotFoundError:
        raise NotReady(f"{settings.ctl_binary} not found on PATH") from None
    except subprocess.TimeoutExpired:
        raise NotReady(f"nvidia-imex-ctl did not answer within {settings.timeout_s:g}s") from None
    return _verdict(settings, done.returncode, done.stdout.decode(errors="replace"))


async def check_async(settings: CheckSettings) -> str:
    """The same probe without blocking the event loop (the daemon's readiness monitor)."""
    if not settings.clique_id:
        return EMPTY_CLIQUE_MESSAGE
    try:
        process = await asyncio.create_subprocess_exec(
            *settings.argv(), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
        )
    except FileNotFoundError:
        raise NotReady(f"{settings.ctl_binary} not found on PATH") from None
    try:
        async with asyncio.timeout(settings.timeout_s):
            output, _ = await process.communicate()
    except TimeoutError:
        process.kill()
        await process.wait()
        raise NotReady(f"nvidia-imex-ctl did not answer within {settings.timeout_s:g}s") from None
    except asyncio.CancelledError:  # the daemon is stopping: no ctl outlives it
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        await asyncio.shield(process.wait())
        raise
    assert process.returncode is not None
    return _verdict(settings, process.returncode, output.decode(errors="replace"))
