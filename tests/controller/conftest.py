"""Fixtures shared by the controller's command-line tests."""

from __future__ import annotations

import pytest

from cdctl.cli import controller as cli
from cdctl.controller.settings import ControllerSettings


@pytest.fixture
def captured(monkeypatch: pytest.MonkeyPatch) -> list[ControllerSettings]:
    """The settings `cdctl controller` would serve with, instead of serving."""
    seen: list[ControllerSettings] = []

    async def fake_serve(settings: ControllerSettings) -> None:
        seen.append(settings)

    monkeypatch.setattr(cli, "serve", fake_serve)
    return seen
