"""`cdctl controller` as its own process for the benchmarks, as the rack and a cluster run it.

`ControllerProcess.start(...)` launches the console script with the chart's flags against a kubeconfig,
waits for `/readyz` (event log replayed, every informer listed once) and then reads, from /proc, what the
process alone spent: CPU seconds (user + system, children excluded) and peak resident memory (VmHWM). With
`profile` set the process runs under cProfile (bench/profiled.py: main thread CPU time) and writes its
statistics there on SIGTERM; with `source` it runs another source tree's cdctl (bench/fromsource.py). Used by
bench/controller.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

from cdctl.sim.rack.components import terminate

TICKS_PER_S = os.sysconf("SC_CLK_TCK")
REPO = Path(__file__).resolve().parent.parent  # where `-m bench.profiled` and `bench.fromsource` load from
STOP_GRACE_S = 60.0


def cdctl_argv(profile: Path | None, source: Path | None = None) -> list[str]:
    if source is not None:
        return [sys.executable, "-m", "bench.fromsource", str(source)]
    if profile is not None:
        return [sys.executable, "-m", "bench.profiled", str(profile)]
    script = Path(sys.executable).parent / "cdctl"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "cdctl"]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _stat_fields(stat_path: Path) -> list[str]:
    """The fields of a /proc stat file after the command name (which may hold spaces), from field 3 on."""
    stat = stat_path.read_text()
    return stat[stat.rindex(")") + 2 :].split()


def _cpu_of(stat_path: Path) -> float:
    """utime + stime (fields 14 and 15) of a process's or thread's stat file, in seconds."""
    fields = _stat_fields(stat_path)
    return (int(fields[11]) + int(fields[12])) / TICKS_PER_S


def cpu_seconds(pid: int) -> float:
    """utime + stime of one process, in seconds."""
    return _cpu_of(Path(f"/proc/{pid}/stat"))


def system_seconds(pid: int) -> float:
    """stime alone (field 15): the kernel's share, fsync and socket calls among it."""
    return int(_stat_fields(Path(f"/proc/{pid}/stat"))[12]) / TICKS_PER_S


def thread_cpu_seconds(pid: int) -> dict[str, float]:
    """utime + stime of a process's main thread (the event loop) and of its other threads together
    (SQLite's, the resolver's: threads inherit the process's name, so they are told apart by id)."""
    by_role = {"event loop": 0.0, "other threads": 0.0}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            seconds = _cpu_of(task / "stat")
        except OSError:  # the thread ended meanwhile
            continue
        by_role["event loop" if task.name == str(pid) else "other threads"] += seconds
    return by_role


def io_counters(pid: int) -> dict[str, int]:
    """/proc/<pid>/io: bytes the process wrote through system calls (`wchar`) and to storage
    (`write_bytes`), and its write calls (`syscw`)."""
    counters = {}
    for line in Path(f"/proc/{pid}/io").read_text().splitlines():
        key, _, value = line.partition(":")
        counters[key.strip()] = int(value)
    return counters


def status_kib(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{key}:"):
            return int(line.split()[1])
    raise KeyError(key)


@dataclass
class ControllerProcess:
    process: asyncio.subprocess.Process
    log_path: Path
    http_port: int
    marks: dict[str, float] = field(default_factory=dict)

    @classmethod
    async def start(
        cls,
        kubeconfig: Path,
        db: Path | None,
        log_path: Path,
        *,
        namespace: str,
        extra_args: tuple[str, ...] = (),
        profile: Path | None = None,
        env: dict[str, str] | None = None,
        source: Path | None = None,
    ) -> ControllerProcess:
        port = free_port()
        args = [
            "controller",
            "--pod-name", "cdctl-controller-bench",
            "--namespace", namespace,
            "--image-name", "example.com/cdctl:bench",
            "--log-verbosity-cd-daemon", "0",
            "--kubeconfig", str(kubeconfig),
            "--kube-api-qps", "1000",
            "--kube-api-burst", "1000",
            "--log-format", "json",
            *(["--db", str(db)] if db is not None else []),
            "--http-endpoint", f"127.0.0.1:{port}",
            *extra_args,
        ]  # fmt: skip
        with log_path.open("ab") as output:
            process = await asyncio.create_subprocess_exec(
                *cdctl_argv(profile, source),
                *args,
                env={**os.environ, **(env or {})},
                cwd=REPO,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=output,
                stderr=output,
            )
        controller = cls(process, log_path, port)
        await controller.wait_ready()
        return controller

    async def wait_ready(self, give_up_s: float = 120.0) -> None:
        deadline = time.monotonic() + give_up_s
        url = f"http://127.0.0.1:{self.http_port}/readyz"
        async with aiohttp.ClientSession() as session:
            while time.monotonic() < deadline:
                if self.process.returncode is not None:
                    raise RuntimeError(
                        f"controller exited with {self.process.returncode}: {self.last_line()}"
                    )
                with contextlib.suppress(aiohttp.ClientError, OSError):
                    async with session.get(url) as response:
                        if response.status == 200:
                            return
                await asyncio.sleep(0.1)
        raise TimeoutError(f"controller not ready after {give_up_s} s: {self.last_line()}")

    async def metrics(self) -> dict[str, float]:
        """The controller's own Prometheus samples (`name{labels}` -> value), comments left out."""
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"http://127.0.0.1:{self.http_port}/metrics") as response,
        ):
            text = await response.text()
        samples = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                samples[name] = float(value)
        return samples

    def last_line(self) -> str:
        lines = [line for line in self.log_path.read_text(errors="replace").splitlines() if line.strip()]
        return lines[-1] if lines else "no output"

    @property
    def pid(self) -> int:
        return self.process.pid

    def cpu_s(self) -> float:
        return cpu_seconds(self.pid)

    def io(self) -> dict[str, int]:
        return io_counters(self.pid)

    def thread_cpu_s(self) -> dict[str, float]:
        return thread_cpu_seconds(self.pid)

    def system_s(self) -> float:
        return system_seconds(self.pid)

    def peak_rss_mib(self) -> float:
        return round(status_kib(self.pid, "VmHWM") / 1024, 1)

    def rss_mib(self) -> float:
        return round(status_kib(self.pid, "VmRSS") / 1024, 1)

    def log_lines(self) -> int:
        with self.log_path.open("rb") as log:
            return sum(1 for _ in log)

    def check_alive(self) -> None:
        if self.process.returncode is not None:
            raise RuntimeError(f"controller exited with {self.process.returncode}: {self.last_line()}")

    async def stop(self) -> None:
        await terminate(self.process, STOP_GRACE_S)
