"""How the reading commands print: `-o table|wide|json|yaml`, kubectl's way. Called by cdctl.cli.history.

One `Printer` per command run takes items (plain dicts: the command's JSON shape, documented per command in
docs/cli.md) a batch at a time and writes them as

- `table`: plain aligned columns (no boxes, no wrapping, no colour), an upper-case header printed once;
  widths are fixed by the first batch, so a long log or `--follow` streams without holding every row;
- `wide`: the same, with the columns a command keeps for wide (an event's full `data`);
- `json`: one JSON array of the items (streamed as it is read); with `--follow`, one item per line instead;
- `yaml`: a YAML list of the items (a list streams as it grows, so `--follow` keeps it).

An empty result prints "No <noun> found." on stderr (table and wide; json prints `[]`, yaml `[]`), exit 0.
`summarize` turns an event's data into the short readable text of the SUMMARY column.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TextIO, TypeVar, cast

import click
import yaml

FORMATS = ("table", "wide", "json", "yaml")
F = TypeVar("F", bound=Callable[..., Any])
SUMMARY_WIDTH = 120
GAP = "   "  # three spaces between columns, as kubectl prints them

# Fields a summary leaves out: identifiers and hashes are long and already in other columns or the data.
_HIDDEN = {"hash", "anchor_hash", "snapshot_digest", "output"}
SHORT = 24  # a list of values longer than this is summarized by its length
# Free-text fields, said last after a colon.
_MESSAGES = ("reason", "error", "detail")


def output_option(command: F) -> F:
    """Add `-o/--output table|wide|json|yaml` and `--json` (the same as `-o json`) to a reading command;
    its callback receives one `output` argument."""

    @functools.wraps(command)
    def with_output(*args: Any, output: str, as_json: bool, **kwargs: Any) -> Any:
        return command(*args, output="json" if as_json else output, **kwargs)

    with_output = click.option("--json", "as_json", is_flag=True, help="The same as -o json.")(with_output)
    return cast(F, click.option(
        "-o", "--output", type=click.Choice(FORMATS), default="table", show_default=True,
        help="table: aligned columns; wide: more columns (an event's data); json or yaml: the items"
        " (docs/cli.md has each command's shape).",
    )(with_output))  # fmt: skip


@dataclass(frozen=True, slots=True)
class Column:
    """A table column: its header and how to get its cell from an item; `wide`: only with -o wide,
    `narrow`: only without it (a summary that -o wide replaces by the full text)."""

    header: str
    cell: Callable[[dict[str, Any]], Any]
    wide: bool = False
    narrow: bool = False


def columns_of(names: Sequence[str], upper: bool = True, summarized: Sequence[str] = ()) -> list[Column]:
    """A column per item key (`sql`, `streams`, `replay`): the header is the key (upper-case unless asked).
    A key in `summarized` holds an event's data as JSON text: summarized, in full with -o wide."""
    columns: list[Column] = []
    for name in names:
        header = name.upper() if upper else name
        if name in summarized:
            columns.append(Column(header, _summarized(name), narrow=True))
            columns.append(Column(header, _getter(name), wide=True))
        else:
            columns.append(Column(header, _getter(name)))
    return columns


def _summarized(name: str) -> Callable[[dict[str, Any]], Any]:
    def cell(item: dict[str, Any]) -> str:
        text = item.get(name)
        try:
            data = json.loads(text) if isinstance(text, str) and text.startswith("{") else text
        except ValueError:
            data = text
        return summarize(data) if isinstance(data, dict) else cell_text(data)

    return cell


def _getter(name: str) -> Callable[[dict[str, Any]], Any]:
    return lambda item: item.get(name)


def cell_text(value: Any) -> str:
    """A cell on one line: None is empty, containers are compact JSON, newlines are escaped."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict | list | tuple):
        value = json.dumps(value, separators=(",", ":"), sort_keys=True, default=str)
    return str(value).replace("\r", "\\r").replace("\n", "\\n").replace("\t", " ")


class Printer:
    """Writes a command's items in the chosen format, a batch at a time (see the module docstring)."""

    def __init__(
        self,
        output: str,
        columns: Sequence[Column],
        noun: str,
        *,
        follow: bool = False,
        out: TextIO | None = None,
    ) -> None:
        self.output = output
        wide = output == "wide"
        self.columns = [c for c in columns if (wide or not c.wide) and not (wide and c.narrow)]
        self.noun = noun
        self.follow = follow
        self._out = out
        self._widths: list[int] | None = None
        self.count = 0

    def write(self, text: str) -> None:
        click.echo(text, file=self._out, nl=False)

    def add(self, items: Iterable[dict[str, Any]]) -> None:
        batch = list(items)
        if not batch:
            return
        if self.output in ("table", "wide"):
            self._add_rows(batch)
        elif self.output == "json":
            self._add_json(batch)
        else:
            self.write(_yaml(batch))
        self.count += len(batch)

    def close(self) -> None:
        """End the output: close a JSON array; say so on stderr when nothing was found."""
        if self.output == "json" and not self.follow:
            self.write("\n]\n" if self.count else "[]\n")
        elif self.output == "yaml" and not self.count:
            self.write("[]\n")
        if not self.count and self.output in ("table", "wide"):
            click.echo(f"No {self.noun} found.", err=True)

    def _add_json(self, batch: list[dict[str, Any]]) -> None:
        if self.follow:
            self.write("".join(json.dumps(item, default=str) + "\n" for item in batch))
            return
        text = ",\n".join("  " + json.dumps(item, default=str) for item in batch)
        self.write(("[\n" if not self.count else ",\n") + text)
        # The closing bracket comes with close(); a reader sees the items as they are read.

    def _add_rows(self, batch: list[dict[str, Any]]) -> None:
        rows = [[cell_text(column.cell(item)) for column in self.columns] for item in batch]
        if self._widths is None:
            headers = [column.header for column in self.columns]
            self._widths = [max(len(text) for text in cells) for cells in zip(headers, *rows, strict=True)]
            rows.insert(0, headers)
        self.write("".join(self._line(row) + "\n" for row in rows))

    def _line(self, cells: Sequence[str]) -> str:
        assert self._widths is not None
        last = len(cells) - 1
        return GAP.join(
            text if index == last else text.ljust(width)
            for index, (text, width) in enumerate(zip(cells, self._widths, strict=True))
        )


def print_items(output: str, columns: Sequence[Column], noun: str, items: Iterable[dict[str, Any]]) -> None:
    printer = Printer(output, columns, noun)
    printer.add(items)
    printer.close()


def print_document(output: str, document: Any) -> None:
    """One document (replay, verify, version) as JSON or YAML."""
    click.echo(_yaml(document) if output == "yaml" else json.dumps(document, indent=2, default=str), nl=False)
    if output != "yaml":
        click.echo()


def _yaml(value: Any) -> str:
    """YAML of JSON's types (datetimes and the like as text), keys in the items' order, lines never folded."""
    plain = json.loads(json.dumps(value, default=str))
    return yaml.safe_dump(plain, sort_keys=False, allow_unicode=True, width=1 << 20)


def summarize(data: dict[str, Any], width: int = SUMMARY_WIDTH) -> str:
    """An event's data in a few words: `action kind namespace/name on node`, then the other short fields as
    key=value, then the reason or error. Identifiers (`*uid`, hashes) are left to -o wide and json."""
    if not isinstance(data, dict):
        return _clip(cell_text(data), width)
    used: set[str] = set()
    words: list[str] = []
    for key in ("action", "change", "kind"):
        if isinstance(data.get(key), str) and data[key]:
            words.append(data[key])
            used.add(key)
    name = data.get("name")
    if isinstance(name, str) and name:
        namespace = data.get("namespace")
        words.append(f"{namespace}/{name}" if isinstance(namespace, str) and namespace else name)
        used |= {"name", "namespace"}
    for key in ("node", "node_name"):
        if isinstance(data.get(key), str) and data[key]:
            words.append(f"on {data[key]}")
            used.add(key)
    for key, value in data.items():
        if (
            key in used
            or key in _MESSAGES
            or key in _HIDDEN
            or _is_identifier(key)
            or value in (None, "", [])
        ):
            continue
        if isinstance(value, dict):
            continue  # a nested object (an observed status) is -o wide's
        if isinstance(value, list) and len(value) <= 3 and all(_short(v) for v in value):
            words.append(f"{key}={','.join(cell_text(v) for v in value)}")
        elif isinstance(value, list):
            words.append(f"{key}=[{len(value)}]")
        else:
            words.append(f"{key}={cell_text(value)}")
    messages = [cell_text(data[key]) for key in _MESSAGES if data.get(key)]
    text = " ".join(words)
    if messages:
        text = f"{text}: {'; '.join(messages)}" if text else "; ".join(messages)
    return _clip(text, width)


def _short(value: Any) -> bool:
    return not isinstance(value, dict | list) and len(cell_text(value)) <= SHORT


def _is_identifier(key: str) -> bool:
    return key == "uid" or key.endswith("_uid") or key.endswith("_hash")


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"
