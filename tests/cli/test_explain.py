"""`cdctl explain`: a domain, a claim, a pod's claims and a node explained from a log, each line citing
the event behind it, the same as JSON, and bad subjects refused in one line with exit code 2."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from cdctl.cli.errors import run
from tests.cli.conftest import invoke

DOMAIN = "computedomain/team-a/nvl72-job"


def test_a_domain_gets_its_formation_time_and_critical_path_each_step_citing_its_event(log: Path) -> None:
    code, out, _ = invoke("explain", "--db", str(log), DOMAIN)
    assert code == 0, out
    assert re.search(r"formed in \d+\.\d\d s: the last of 4 nodes, gb200-r01-n0\d", out)
    steps = [line for line in out.splitlines() if re.match(r"  \+ *\d", line)]
    assert steps and all(re.search(r"\[#\d+ Claim|\[#\d+ Clique|\[#\d+ Domain", line) for line in steps)
    assert sum("<- longest wait" in line for line in steps) == 1
    # the demo's log is one component's: what it lacks is said, with the log that would tell it
    assert "note: no node has 'daemon started' here: the IMEX daemons' logs would tell it" in out
    shown = out.splitlines()[-1]
    assert shown.startswith("show an event: cdctl events --db ") and "--type" in shown


def test_json_is_the_same_explanation_as_data(log: Path) -> None:
    code, out, _ = invoke("explain", "--db", str(log), DOMAIN, "-o", "json")
    assert code == 0
    [explanation] = json.loads(out)
    assert explanation["kind"] == "computedomain" and explanation["formation_s"] > 0
    path = explanation["critical_path"]
    assert path["node"].startswith("gb200-r01-n0") and path["steps"]
    assert all(step["evidence"]["position"] > 0 for step in path["steps"])
    assert path["longest"] in [step["key"] for step in path["steps"]]


def test_a_pod_is_explained_by_the_claims_made_for_it_and_a_node_by_what_it_served(log: Path) -> None:
    code, out, _ = invoke("explain", "--db", str(log), "node/gb200-r01-n02")
    assert code == 0, out
    assert "node gb200-r01-n02: 1 ComputeDomain, 2 claims" in out
    code, out, _ = invoke("explain", "--db", str(log), "-o", "json", "pod/team-a/nope")
    assert code == 2


@pytest.mark.parametrize(
    ("subject", "said"),
    [
        ("computedomain/team-a/missing", "no computedomain team-a/missing observed in"),
        ("pod/x", "'pod/x' is not pod/NAMESPACE/NAME"),
        ("computedomain/Bad_Name/x", "is not computedomain/NAMESPACE/NAME"),
        ("channels/c1", "is not domain/<uid>, claim/<uid> or KIND/NS/NAME"),
    ],
)
def test_a_bad_subject_is_one_line_naming_it_and_exits_2(log: Path, subject: str, said: str) -> None:
    code, out, err = invoke("explain", "--db", str(log), subject)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "SUBJECT" in err and said in err


def test_a_compacted_log_says_what_lies_before_its_horizon(tmp_path: Path) -> None:
    from tests.collect.test_horizon import node_log

    path = tmp_path / "events.db"
    horizon = run(node_log(path))  # c0..c11 compacted through position 22; c3 unprepared and c20 after it
    code, out, _ = invoke("explain", "--db", str(path), "claim/c20")
    assert code == 0, out
    assert f"note: this log was compacted: what happened before position {horizon + 1} (" in out
    # c3's Prepare was compacted away: explained as far as the log goes, not refused
    code, out, _ = invoke("explain", "--db", str(path), "claim/c3")
    assert code == 0, out
    assert "its Prepare lies before the compaction horizon" in out and "ClaimUnprepared at" in out
