"""`cdctl sim rack --hold`: the formed rack stays up, the commands it prints work as printed, and kubectl
works on it as on a real cluster.

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
import yaml

from cdctl.sim.rack import workload

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


async def kubectl(kubeconfig: Path, env: dict[str, str], *args: str) -> str:
    assert KUBECTL is not None
    code, output = await run([KUBECTL, "--kubeconfig", str(kubeconfig), *args], env)
    assert code == 0, f"kubectl {' '.join(args)}:\n{output}"
    return output


async def a_users_own_domain_with_kubectl(kubeconfig: Path, work_dir: Path, env: dict[str, str]) -> None:
    """What an operator does on a real cluster, with kubectl alone: the demo's job and domain make room, then
    a namespace (kubectl sends it as protobuf), a ComputeDomain and a Job that claims its channel (`apply`,
    validated through the server's OpenAPI v3), watched until the domain is Ready and every worker Running,
    and deleted. A typo in the domain is refused as a real server refuses it."""
    await kubectl(kubeconfig, env, "delete", "job", "nvl72-job", "-n", "team-a", "--timeout=60s")
    await kubectl(kubeconfig, env, "delete", "computedomain", "nvl72", "-n", "team-a", "--timeout=60s")
    await kubectl(kubeconfig, env, "create", "namespace", "team-k")
    manifest = work_dir / "team-k.yaml"
    objects = [
        workload.compute_domain("kcd", "team-k", 2),
        workload.worker_job("kjob", "team-k", 2, "kcd-channel"),
    ]
    manifest.write_text(yaml.safe_dump_all(objects))
    typo = work_dir / "typo.yaml"
    typo.write_text(yaml.safe_dump({**objects[0], "spec": {**objects[0]["spec"], "numNode": 2}}))
    assert KUBECTL is not None
    code, refused = await run([KUBECTL, "--kubeconfig", str(kubeconfig), "apply", "-f", str(typo)], env)
    assert code != 0 and 'strict decoding error: unknown field "spec.numNode"' in refused, refused
    applied = await kubectl(kubeconfig, env, "apply", "-f", str(manifest))
    assert "computedomain.resource.nvidia.com/kcd created" in applied and "job.batch/kjob created" in applied
    await kubectl(kubeconfig, env, "wait", "--for=jsonpath={.status.status}=Ready", "computedomain/kcd",
                  "-n", "team-k", "--timeout=120s")  # fmt: skip
    workers = f"{workload.WORKER_APP_LABEL}=kjob-worker"
    await kubectl(kubeconfig, env, "wait", "--for=jsonpath={.status.phase}=Running", "pod",
                  "-l", workers, "-n", "team-k", "--timeout=120s")  # fmt: skip
    pods = await kubectl(kubeconfig, env, "get", "pods", "-n", "team-k", "-o", "wide")
    assert sorted(line.split()[0] for line in pods.splitlines()[1:]) == ["kjob-0", "kjob-1"], pods
    await kubectl(kubeconfig, env, "delete", "-f", str(manifest), "--timeout=120s")
    await kubectl(kubeconfig, env, "delete", "namespace", "team-k", "--timeout=120s")
    left = await kubectl(kubeconfig, env, "get", "computedomains,resourceclaimtemplates", "-A", "-o", "name")
    assert left.strip() == "", left


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
        if KUBECTL is not None:
            await a_users_own_domain_with_kubectl(kubeconfig, work_dir, env)
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGINT)  # ends the hold; the rack is torn down
        rest, _ = await asyncio.wait_for(process.communicate(), 180)
        seen.append(rest.decode())
    assert process.returncode == 0, "".join(seen)
    assert "every check held" in "".join(seen)
