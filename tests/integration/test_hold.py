"""`cdctl sim rack --hold`: the formed rack stays up, and the commands it prints work as printed.

The command runs as an operator runs it (its own process); once it prints what to try, each printed command
is run: `kubectl` against the simulated API server (when kubectl is installed) sees the domain Ready with
its printer columns and every pod Running; `cdctl collect` gathers every source; `cdctl history` tells the
domain's story. Ctrl-C ends the hold, and the rack is torn down as without it (exit 0, every check held).
"""

from __future__ import annotations

import asyncio
import os
import shlex
import shutil
import signal
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
CDCTL = str(Path(sys.executable).with_name("cdctl"))
KUBECTL = shutil.which("kubectl")


async def run(argv: list[str], env: dict[str, str]) -> tuple[int, str]:
    process = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, env=env
    )
    out, _ = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode is not None
    return process.returncode, out.decode()


async def printed_commands(stdout: asyncio.StreamReader, seen: list[str]) -> list[str]:
    """Read the command's output up to its fourth suggested command."""
    commands: list[str] = []
    while len(commands) < 4:
        line = (await asyncio.wait_for(stdout.readline(), 180)).decode()
        assert line, "the command ended before holding the rack:\n" + "".join(seen)
        seen.append(line)
        words = line.split()
        if line.startswith("  ") and words and (words[0] == "kubectl" or words[0].endswith("cdctl")):
            commands.append(line.strip())
    return commands


async def test_a_held_rack_answers_the_commands_it_prints(work_dir: Path) -> None:
    env = {**os.environ, "KUBECACHEDIR": str(work_dir / "kubecache"), "COLUMNS": "200"}
    process = await asyncio.create_subprocess_exec(
        CDCTL, "sim", "rack", "--nodes", "2", "--hold", "600", "--keep", str(work_dir),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, env=env,
    )  # fmt: skip
    seen: list[str] = []
    try:
        assert process.stdout is not None
        commands = await printed_commands(process.stdout, seen)
        kubeconfig = work_dir / "kubeconfig"
        assert all(str(kubeconfig) in c or "--db" in c for c in commands), commands
        outputs: dict[str, str] = {}
        for command in commands:  # as printed, from the directory the rack was started in
            argv = shlex.split(command)
            if argv[0] == "kubectl" and KUBECTL is None:
                continue
            code, output = await run(argv, env)
            assert code == 0, f"{command}:\n{output}"
            outputs[command] = output
        if KUBECTL is not None:
            domains = next(o for c, o in outputs.items() if "get computedomains" in c).splitlines()
            assert domains[0].split() == ["NAMESPACE", "NAME", "STATUS", "NODES", "CHANNELS", "AGE"]
            assert domains[1].split()[:4] == ["team-a", "nvl72", "Ready", "2"]
            listing = next(o for c, o in outputs.items() if "get pods" in c)
            rows = [line.split() for line in listing.splitlines()[1:]]
            assert {row[1] for row in rows} >= {"cdctl-controller-0", "nvl72-job-0", "nvl72-job-1"}
            assert all(row[3] == "Running" for row in rows), listing
        collected = next(o for c, o in outputs.items() if " collect " in c)
        assert "complete" in collected and "kubelet-plugin/gb200-r00-n01" in collected
        history = next(o for c, o in outputs.items() if " history " in c)
        assert "computedomain/team-a/nvl72 is uid" in history and "ComputeDomainObserved" in history
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGINT)  # ends the hold; the rack is torn down
        rest, _ = await asyncio.wait_for(process.communicate(), 180)
        seen.append(rest.decode())
    assert process.returncode == 0, "".join(seen)
    assert "every check held" in "".join(seen)
