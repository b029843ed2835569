"""The real tier's collection rules: every test here is marked `real` (`make test-real` runs them; `make test`
leaves them out), and all of them skip with one line naming what is missing when the realk8s kit is not
built (tests/real/kit.py). Each may take up to REAL_TEST_TIMEOUT_S, not the suite's per-test limit. A failed
test's work directory (logs, node directories, container records) is kept, and its path printed."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.real import kit

HERE = Path(__file__).parent
REAL_TEST_TIMEOUT_S = 900


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reason = kit.missing()
    for item in items:
        if HERE in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.real)
            # A real control plane and six hollow kubelets start per test: minutes, not the suite's limit.
            item.add_marker(pytest.mark.timeout(REAL_TEST_TIMEOUT_S))
            if reason is not None:
                item.add_marker(pytest.mark.skip(reason=reason))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    report = yield
    if report.when == "call":
        item.stash[CALL_FAILED] = report.failed
    return report


CALL_FAILED = pytest.StashKey[bool]()


@pytest.fixture
def work_dir(request: pytest.FixtureRequest) -> Iterator[Path]:
    # Unix socket paths are limited to 108 bytes: a short root, not pytest's tmp_path.
    root = Path(tempfile.mkdtemp(prefix="cdreal-", dir="/tmp"))
    yield root
    if request.node.stash.get(CALL_FAILED, False):
        print(f"\nkept the failed test's work directory: {root}")
        return
    shutil.rmtree(root, ignore_errors=True)
