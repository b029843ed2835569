"""`cdctl sim rack`'s channel isolation options: the plans they make and the combinations refused."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from cdctl.cli.main import cli
from cdctl.domain.errors import InvalidInput
from cdctl.sim.rack.rackcommand import RackOptions, shared_rack_plans
from cdctl.sim.rack.settings import RackSettings


def test_four_domains_split_the_racks_gpus_into_single_gpu_pods_each_in_its_namespace() -> None:
    plans = shared_rack_plans(18, 2, RackOptions("channel", domains=4))
    assert [(p.name, p.namespace, p.workers, p.jobs, p.gpus_per_pod) for p in plans] == [
        ("cd-a", "team-a", 18, 2, 1),
        ("cd-b", "team-b", 18, 2, 1),
        ("cd-c", "team-c", 18, 2, 1),
        ("cd-d", "team-d", 18, 2, 1),
    ]
    assert plans[0].spec_num_nodes() == 9  # 36 single-GPU pods fill nine 4-GPU nodes
    assert [p.name for p in shared_rack_plans(4, 1, RackOptions("channel", domains=28))][26:] == [
        "cd-aa",
        "cd-ab",
    ]


@pytest.mark.parametrize(
    ("options", "nodes", "rack_domains", "problem"),
    [
        (RackOptions(domains=4), 18, False, "--domains need --isolation channel"),
        (
            RackOptions(imex_channel_count=4, pods_per_domain=2),
            18,
            False,
            "--pods-per-domain, --imex-channel-count need --isolation channel",
        ),
        (
            RackOptions("channel", domains=2),
            18,
            True,
            "--rack-domains and --isolation channel cannot be combined",
        ),
        (RackOptions("channel", domains=9), 2, False, "--domains 9 leaves no GPU for a pod on 2 nodes"),
        (
            RackOptions("channel", domains=2, pods_per_domain=5),
            2,
            False,
            "--domains 2 x --pods-per-domain 5 single-GPU pods do not fit the 8 GPUs of a 2-node rack",
        ),
        (RackOptions("channel", domains=4), 18, False, None),
        (RackOptions(), 18, False, None),
    ],
)
def test_option_problems_name_the_flags(
    options: RackOptions, nodes: int, rack_domains: bool, problem: str | None
) -> None:
    assert options.problem(nodes, rack_domains) == problem


def test_the_command_refuses_domains_without_channel_isolation_before_starting_anything() -> None:
    keep = Path(tempfile.mkdtemp(prefix="cdo-", dir="/tmp"))  # short enough for the plugins' sockets
    try:
        result = CliRunner().invoke(cli, ["sim", "rack", "--domains", "4", "--keep", str(keep)])
        assert result.exit_code == 2
        assert "--domains need --isolation channel" in result.output
        assert not (keep / "logs").exists()
    finally:
        shutil.rmtree(keep, ignore_errors=True)


def test_settings_refuse_an_unknown_isolation_and_a_bad_channel_count(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="isolation: must be 'domain' or 'channel'"):
        RackSettings(tmp_path, isolation="tenant")
    with pytest.raises(InvalidInput, match="--imex-channel-count: must be between 2 and 2048, got 1"):
        RackSettings(tmp_path, isolation="channel", imex_channel_count=1)
    assert RackSettings(tmp_path, isolation="channel").runs_workers
    assert not RackSettings(tmp_path).runs_workers
