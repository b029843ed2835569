"""Fixtures of the rack tests (tests/integration/support.py)."""

from tests.integration.support import work_dir

__all__ = ["work_dir"]
