"""Summaries of a py-spy recording (raw format: one `frame;frame;...;leaf count` line per distinct stack).

`summarize(path)` returns the top functions by own samples (the leaf frame) and by inclusive samples (any
frame of the stack, counted once per stack), each as a share of all samples: a sampling profile of a live
process, without cProfile's per-call overhead. Used by bench/controller.py (`--sample`).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path


def _function(frame: str) -> str:
    """`name (path/to/file.py:123)` -> `name (file.py)`: a function, whatever line it was on."""
    name, _, where = frame.partition(" (")
    path = where.rstrip(")").rsplit(":", 1)[0]
    parts = path.split("/")
    short = "/".join(parts[-2:]) if len(parts) > 1 else path
    return f"{name} ({short})"


def summarize(path: Path, top: int = 30) -> str:
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        samples = int(count)
        total += samples
        frames = [_function(frame) for frame in stack.split(";") if frame]
        if not frames:
            continue
        own[frames[-1]] += samples
        for function in set(frames):
            inclusive[function] += samples
    lines = [f"{total} samples"]
    for title, counts in (("own", own), ("inclusive", inclusive)):
        lines.append(f"\ntop {top} by {title} samples:")
        for function, samples in counts.most_common(top):
            lines.append(f"{100 * samples / max(1, total):6.1f} %  {function}")
    return "\n".join(lines) + "\n"
