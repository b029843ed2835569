"""Faults on demand for reliability tests: error shares, queued errors, response delays (all requests, or
those of one path), dropped watches.

A `FaultPlan` hangs off the running ApiServer (cdctl.sim.apiserver.server); its aiohttp middleware
(cdctl.sim.apiserver.handlers) asks `decide()` before every API request. Tests flip the plan at will; a seeded
RNG keeps shares reproducible. Dropping watches and restarting are methods of ApiServer, since they act on
open connections.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass, field

from cdctl.sim.apiserver.errors import ApiError, error_for_code

EXEMPT_PATHS = ("/healthz", "/readyz", "/livez")


@dataclass
class FaultDecision:
    delay_s: float
    error: ApiError | None


@dataclass
class FaultPlan:
    """What the server does wrong, and how often. All zero: a healthy server."""

    error_share: float = 0.0
    error_codes: tuple[int, ...] = (429, 500, 503)
    delay_s: float = 0.0
    include_watches: bool = True
    seed: int = 0
    queued_errors: deque[int] = field(default_factory=deque)
    slow_paths: dict[str, float] = field(default_factory=dict)  # path fragment -> extra delay
    injected: int = 0
    _rng: random.Random = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)

    def fail_share(self, share: float, codes: tuple[int, ...] = (429, 500, 503)) -> None:
        """Answer `share` (0..1) of requests with one of `codes`."""
        if not 0.0 <= share <= 1.0:
            raise ValueError(f"share must be within 0..1, got {share}")
        self.error_share, self.error_codes = share, codes

    def fail_next(self, *codes: int) -> None:
        """Answer the next requests, one per code, with these codes (deterministic faults)."""
        self.queued_errors.extend(codes)

    def delay(self, seconds: float) -> None:
        self.delay_s = max(0.0, seconds)

    def slow(self, path_fragment: str, seconds: float) -> None:
        """Delay every request whose path contains `path_fragment` (one slow resource, e.g. a big list)."""
        self.slow_paths[path_fragment] = max(0.0, seconds)

    def heal(self) -> None:
        self.error_share, self.delay_s = 0.0, 0.0
        self.queued_errors.clear()
        self.slow_paths.clear()

    def decide(self, path: str, is_watch: bool) -> FaultDecision:
        if path in EXEMPT_PATHS or (is_watch and not self.include_watches):
            return FaultDecision(0.0, None)
        delay = self.delay_s + sum(s for fragment, s in self.slow_paths.items() if fragment in path)
        code: int | None = None
        if self.queued_errors:
            code = self.queued_errors.popleft()
        elif self.error_share and self._rng.random() < self.error_share:
            code = self._rng.choice(self.error_codes)
        if code is None:
            return FaultDecision(delay, None)
        self.injected += 1
        return FaultDecision(delay, error_for_code(code, f"injected fault {code} (simulated API server)"))
