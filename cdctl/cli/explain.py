"""`cdctl explain SUBJECT --db FILE`: why a domain took its time, why a claim waits, what a node went through.

Reads any event log or collected file (`--db`, as the history commands), resolves SUBJECT
(cdctl.projections.explainload), prints the explanation with each line's evidence and how to show it, or
`-o json` the same as data (docs/explain.md). Exit codes as the history commands': 2 bad input (naming
SUBJECT), 3 a file that is not an event log, 75 a locked one. Thin: flags -> projections.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from cdctl.cli.collected import read_events
from cdctl.cli.errors import guarded
from cdctl.cli.options import db_option
from cdctl.projections.evidence import Evidence
from cdctl.projections.explain import Explanation
from cdctl.projections.explainload import load_explanations


@click.command("explain")
@db_option
@click.argument("subject")
@click.option(
    "-o", "--output", type=click.Choice(["text", "json"]), default="text", show_default=True,
    help="text: the explanation, each line citing its event; json: the same as data.",
)  # fmt: skip
@guarded
def explain(db: Path, subject: str, output: str) -> None:
    """Explain SUBJECT from the history: a domain's formation time, its critical path (the slowest node's
    steps with their waits) and the cause of the longest wait traced to its origin; a claim's outcome, last
    error and what it waits for; a node's domains, claims and problems. Each line ends with its evidence,
    [SOURCE #POSITION TYPE], as `cdctl events` lists it.

    SUBJECT: computedomain/NAMESPACE/NAME, resourceclaim/NAMESPACE/NAME, pod/NAMESPACE/NAME (its claims),
    node/NAME, domain/<uid>, claim/<uid> or a bare uid. A collected file (cdctl collect) tells the most.
    """
    found = read_events(db, lambda events: load_explanations(events, subject))
    if output == "json":
        click.echo(json.dumps([e.to_json() for e in found], indent=2))
        return
    for number, explanation in enumerate(found):
        if number:
            click.echo("")
        for line in explanation.text():
            click.echo(line)
    cited = next((ev for e in found for ev in _evidence(e)), None)
    if cited is not None:
        click.echo(f"show an event: {cited.show(str(db))}")


def _evidence(explanation: Explanation) -> list[Evidence]:
    return [c.evidence for c in explanation.chain if c.evidence] + [
        ev for _, ev in explanation.facts if ev is not None
    ]
