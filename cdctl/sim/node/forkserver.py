"""A fork server for the rack's `cdctl` processes: each one its own process, without paying Python's start-up.

Starting `cdctl kubelet-plugin`, `cdctl controller` or `cdctl daemon run` costs about a second of CPU, nearly
all of it importing (kubernetes_asyncio, SQLAlchemy, aiohttp, grpclib); on a 2-core machine an 18-node rack
spends most of its formation time starting its 18 daemons. `ForkServer.start(preload)` runs
`python -m cdctl.sim.node.forkserver MODULE...`, which imports the modules once and then, for every request,
forks a child that takes the request's environment, sends stdout and stderr to the request's log file, takes
the request's user if it names one (cdctl.sim.node.runas: after opening the log, before cdctl runs), and
runs the console script's entry point (`CONSOLE_SCRIPT`, as pyproject names it, resolved by name as a console
script is) with the request's arguments. Each child is a separate process with its own pid, sockets, files
and event log; the server reaps children and reports their exit codes. When its parent goes away (its
stdin ends) with children still running, it stops them: SIGTERM, then SIGKILL of what is left.
`ForkServer.spawn(argv, env, log_path, user=None)` returns a `ForkedProcess` with the parts of asyncio's
Process the rack uses (pid, returncode, wait, send_signal, terminate, kill).
Protocol (JSON lines): request {"id", "argv", "env", "log", "user": [uid, gid] or null} on stdin;
{"id", "pid"} or {"id", "error"} and {"exited": pid, "code": code} on stdout. Used by
cdctl.sim.rack.components and cdctl.sim.node.daemonruntime.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import importlib
import json
import os
import select
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from cdctl.asynctasks import wait_at_most
from cdctl.sim.node.proctree import kill_tree
from cdctl.sim.node.runas import RunAs, UserSwitchError

CONSOLE_SCRIPT = "cdctl.cli.main:main"
ORPHAN_GRACE_S = 5.0  # how long children left behind by a parent that died get to stop on SIGTERM


class ForkedProcess:
    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._exited: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    def _exit(self, code: int) -> None:
        self.returncode = code
        if not self._exited.done():
            self._exited.set_result(code)

    async def wait(self) -> int:
        return await asyncio.shield(self._exited)

    def send_signal(self, signum: int) -> None:
        if self.returncode is None:
            os.kill(self.pid, signum)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class ForkServer:
    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self._next_id = 0
        self._pending: dict[int, asyncio.Future[int]] = {}
        self._children: dict[int, ForkedProcess] = {}
        self._early_exits: dict[int, int] = {}
        self._abandoned: set[int] = set()  # children of cancelled spawns: their exits concern nobody
        self._reader = asyncio.create_task(self._read(), name="fork-server-reader")

    @classmethod
    async def start(cls, preload: list[str], env: dict[str, str] | None = None) -> ForkServer:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "cdctl.sim.node.forkserver", *preload,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, env=env,
        )  # fmt: skip
        return cls(process)

    async def _read(self) -> None:
        assert self.process.stdout is not None
        while line := await self.process.stdout.readline():
            message = json.loads(line)
            if "exited" in message:
                pid, code = int(message["exited"]), int(message["code"])
                child = self._children.pop(pid, None)
                if pid in self._abandoned:
                    self._abandoned.discard(pid)
                elif child is None:
                    self._early_exits[pid] = code
                else:
                    child._exit(code)
                continue
            future = self._pending.pop(int(message["id"]))
            if future.done():  # the spawn was cancelled (a probe of a pod being stopped): nobody waits
                if "pid" in message:
                    self._abandoned.add(int(message["pid"]))
                continue
            if "error" in message:
                future.set_exception(OSError(f"fork server: {message['error']}"))
            else:
                future.set_result(int(message["pid"]))
        for child in self._children.values():  # the server is gone: so are the answers
            child._exit(-signal.SIGKILL)
        for future in self._pending.values():
            future.set_exception(OSError("fork server exited"))

    async def spawn(
        self, argv: list[str], env: dict[str, str], log_path: Path, *, user: RunAs | None = None
    ) -> ForkedProcess:
        """Start `cdctl ARGV...` as a child; as `user` when given (the server must be root for that)."""
        assert self.process.stdin is not None
        self._next_id += 1
        request_id = self._next_id
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        request = {
            "id": request_id,
            "argv": argv,
            "env": env,
            "log": str(log_path),
            "user": None if user is None else user.to_json(),
        }
        self.process.stdin.write(json.dumps(request).encode() + b"\n")
        await self.process.stdin.drain()
        pid = await future
        child = ForkedProcess(pid)
        if pid in self._early_exits:
            child._exit(self._early_exits.pop(pid))
        else:
            self._children[pid] = child
        return child

    async def stop(self) -> None:
        """Close the server (stop the children it started first: those still running get SIGTERM, and
        SIGKILL after ORPHAN_GRACE_S)."""
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            await wait_at_most(self.process.wait(), 10)
        except TimeoutError:
            self.process.kill()
            await self.process.wait()
        await self._reader


# ---- the server process ------------------------------------------------------------------------------------
def _run_child(request: dict[str, Any]) -> int:
    """In the forked child: become the requested `cdctl` process and return its exit code."""
    log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    os.close(null)
    if request.get("user") is not None:
        try:
            RunAs(*request["user"]).switch()
        except UserSwitchError as error:
            print(f"fork server: {error}", file=sys.stderr)
            return 126  # what a runtime answers for a container it cannot start as its user
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = ["cdctl", *request["argv"]]
    module, _, function = CONSOLE_SCRIPT.partition(":")
    entry_point = getattr(importlib.import_module(module), function)
    try:
        entry_point()
    except SystemExit as exit_:
        code = exit_.code
        if code is None:
            return 0
        if isinstance(code, int):
            return code
        print(code, file=sys.stderr)
        return 1
    except BaseException:
        traceback.print_exc()
        return 1
    return 0


def _fork(request: dict[str, Any], wakeup: tuple[int, int]) -> int:
    sys.stdout.flush()
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for fd in wakeup:
            os.close(fd)
        code = _run_child(request)
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _say(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def _reap(children: set[int]) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        children.discard(pid)
        with contextlib.suppress(BrokenPipeError):
            _say({"exited": pid, "code": os.waitstatus_to_exitcode(status)})


def _stop_children(children: set[int], grace_s: float = ORPHAN_GRACE_S) -> None:
    """The parent is gone (our stdin ended) with children still running: a rack killed without stopping
    them, as a test's time limit kills it. They would run on as orphans, a whole rack's worth, for good;
    they get SIGTERM, and whatever of them (and of what they started) is left after `grace_s`, SIGKILL."""
    for pid in list(children):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while children and time.monotonic() < deadline:
        time.sleep(0.05)
        _reap(children)
    for pid in list(children):
        kill_tree(pid)
    while children and time.monotonic() < deadline + grace_s:
        time.sleep(0.05)
        _reap(children)


def serve(preload: list[str]) -> None:
    for module in preload:
        importlib.import_module(module)
    # What the imports made stays out of every child's garbage collections: a collection that walks them
    # writes to every page they sit on, and copying those pages made up much of a child's start-up.
    gc.collect()
    gc.freeze()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C stops the children (same process group), not us
    wakeup = os.pipe()
    os.set_blocking(wakeup[1], False)
    signal.set_wakeup_fd(wakeup[1])
    signal.signal(signal.SIGCHLD, lambda *_: None)
    stdin = sys.stdin.fileno()
    buffered = b""
    children: set[int] = set()
    while True:
        try:
            ready, _, _ = select.select([stdin, wakeup[0]], [], [])
        except InterruptedError:
            continue
        if wakeup[0] in ready:
            os.read(wakeup[0], 4096)
            _reap(children)
        if stdin not in ready:
            continue
        chunk = os.read(stdin, 65536)
        if not chunk:
            _reap(children)
            _stop_children(children)
            return
        buffered += chunk
        while b"\n" in buffered:
            line, buffered = buffered.split(b"\n", 1)
            request = json.loads(line)
            try:
                pid = _fork(request, wakeup)
                children.add(pid)
                _say({"id": request["id"], "pid": pid})
            except OSError as error:
                _say({"id": request["id"], "error": str(error)})


if __name__ == "__main__":
    serve(sys.argv[1:])
