"""Every document a source file, test, chart file or doc names (`something.md`) exists in the repository.

A citation of a file the repository lacks sends the next reader nowhere; this catches it when the citation is
written, and when a cited document is moved or removed.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SEARCHED = ("cdctl", "tests", "bench", "docs", "charts", "migrations")
SUFFIXES = {".py", ".md", ".yaml", ".tpl", ".txt", ".toml", ".sql", ".json"}
CITATION = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)*[\w.-]+\.md)\b")


def _sources() -> list[Path]:
    files = [ROOT / "README.md", ROOT / "pyproject.toml", ROOT / "Makefile"]
    for top in SEARCHED:
        files += [p for p in (ROOT / top).rglob("*") if p.suffix in SUFFIXES and "__pycache__" not in p.parts]
    return [p for p in files if p.is_file() and p.name != Path(__file__).name]


def _documents() -> dict[str, set[Path]]:
    """Each .md in the repository, by its name and by its path from the root."""
    found: dict[str, set[Path]] = {}
    for doc in ROOT.rglob("*.md"):
        if ".venv" in doc.parts or ".git" in doc.parts:
            continue
        relative = doc.relative_to(ROOT)
        found.setdefault(doc.name, set()).add(relative)
        found.setdefault(relative.as_posix(), set()).add(relative)
    return found


def test_the_scan_finds_the_citations_it_is_for() -> None:
    text = "see docs/architecture.md section 2, and install.md; not foo.mdx or a.md5"
    assert CITATION.findall(text) == ["docs/architecture.md", "install.md"]


def test_every_cited_document_exists() -> None:
    documents = _documents()
    missing = []
    for source in _sources():
        for cited in CITATION.findall(source.read_text(errors="replace")):
            if cited not in documents and Path(cited).name not in documents:
                missing.append(f"{source.relative_to(ROOT)} cites {cited}")
    assert not missing, "\n".join(missing)
