"""`cdctl timeline -o FILE`: the formation timeline written as a page (.html), a picture (.svg) or a PNG.

`write(view, path)` picks the format from the file's suffix. The page is one self-contained file that needs
no network when viewed: the summary on top, the timeline as inline SVG (cdctl.projections.formationdraw),
its CSS, and a little script that shows the event behind a mark on hover, dims the rows a name filter does
not match, and says how many of the domain's nodes it drew (`#status`; the browser test reads it). The SVG
and the PNG carry the summary in the picture, and each mark of the SVG its event as a `<title>`. Used by
cdctl.cli.timeline and cdctl.sim.rack.timelines.
"""

from __future__ import annotations

import json
from html import escape
from pathlib import Path

from cdctl.domain.errors import InvalidInput, PermanentError
from cdctl.projections.explain import Explanation
from cdctl.projections.formation import FormationView
from cdctl.projections.formationdraw import layout, to_png, to_svg

FORMATS = (".html", ".svg", ".png")

_CSS = """
body { font-family: "DejaVu Sans", Arial, sans-serif; margin: 16px; color: #222; }
header h1 { font-size: 18px; margin: 0 0 6px; }
header p { margin: 2px 0; font-size: 14px; }
header .slow { color: #d62728; }
#explanation h2 { font-size: 15px; margin: 10px 0 4px; }
#explanation pre { font-size: 12px; background: #fafafa; border-left: 3px solid #d62728; padding: 6px 8px;
                   white-space: pre-wrap; }
#controls { margin: 10px 0; font-size: 13px; }
#tip { position: absolute; max-width: 640px; background: #fffbe6; border: 1px solid #c9b458; padding: 6px 8px;
       font: 12px/1.35 monospace; white-space: pre-wrap; word-break: break-all; pointer-events: none;
       box-shadow: 0 2px 6px rgba(0,0,0,.2); }
svg g.mark { cursor: pointer; }
svg g.mark:hover > * { stroke-width: 3; }
svg .dim { opacity: 0.15; }
"""

_SCRIPT = """
(function () {
  "use strict";
  var expected = JSON.parse(document.getElementById("expected-nodes").textContent);
  var tip = document.getElementById("tip");
  var marks = document.querySelectorAll("svg g.mark");
  var rows = document.querySelectorAll("svg rect.node-row");
  marks.forEach(function (mark) {
    mark.addEventListener("mouseenter", function () {
      tip.textContent = mark.dataset.hover; tip.hidden = false;
    });
    mark.addEventListener("mousemove", function (e) {
      tip.style.left = (e.pageX + 14) + "px"; tip.style.top = (e.pageY + 14) + "px";
    });
    mark.addEventListener("mouseleave", function () { tip.hidden = true; });
  });
  var filter = document.getElementById("filter");
  filter.addEventListener("input", function () {
    var wanted = filter.value.trim();
    document.querySelectorAll("svg [data-node]").forEach(function (el) {
      el.classList.toggle("dim", wanted !== "" && el.dataset.node.indexOf(wanted) < 0);
    });
  });
  var drawn = new Set();
  rows.forEach(function (row) { drawn.add(row.dataset.node); });
  var missing = expected.filter(function (name) { return !drawn.has(name); });
  var status = document.getElementById("status");
  status.textContent = "drawn: " + drawn.size + " of " + expected.length + " nodes, " +
    marks.length + " marks" + (missing.length ? "; missing: " + missing.join(", ") : "");
  document.body.dataset.drawnNodes = String(drawn.size);
})();
"""


def page(view: FormationView, explanation: Explanation | None = None) -> str:
    """The self-contained HTML page; `explanation` (cdctl explain) on top, its critical path marked."""
    drawing = layout(view, header=False, explanation=explanation)
    summary = view.summary_lines()
    lines = "\n".join(
        f'<p class="slow">{escape(line)}</p>'
        if line.startswith(("slowest node", "the node furthest behind"))
        else f"<p>{escape(line)}</p>"
        for line in summary[1:]
    )
    # JSON inside <script>: no "<", ">" or "&" from a name may reach the HTML parser
    nodes = json.dumps([row.name for row in view.nodes])
    nodes = nodes.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{escape(drawing.title)}</title>
<style>{_CSS}</style>
</head>
<body>
<header>
<h1>{escape(summary[0])}</h1>
{lines}
</header>
{_explained(explanation)}
<div id="controls">
<label>nodes matching <input id="filter" type="search" placeholder="gb200-r00"></label>
<span id="status">(the script did not run: hover and filter need JavaScript)</span>
</div>
{to_svg(drawing)}
<div id="tip" hidden></div>
<script type="application/json" id="expected-nodes">{nodes}</script>
<script>{_SCRIPT}</script>
</body>
</html>
"""


def _explained(explanation: Explanation | None) -> str:
    if explanation is None:
        return ""
    text = "\n".join(explanation.text())
    return f'<section id="explanation"><h2>cdctl explain</h2><pre>{escape(text)}</pre></section>'


def check_output(path: Path) -> str:
    """The format `path` asks for (its suffix); InvalidInput naming -o when it is none of FORMATS or its
    directory does not exist."""
    suffix = path.suffix.lower()
    if suffix not in FORMATS:
        problem = f"{path}: write .html, .svg or .png (not {suffix or 'a name without a suffix'})"
        raise InvalidInput("cdctl timeline", "-o", problem)
    if not path.parent.is_dir():
        raise InvalidInput("cdctl timeline", "-o", f"{path}: directory {path.parent} does not exist")
    return suffix


def write(view: FormationView, path: Path, explanation: Explanation | None = None) -> None:
    """Write the view as .html, .svg or .png, by `path`'s suffix (with `explanation` on top)."""
    suffix = check_output(path)
    try:
        if suffix == ".png":
            to_png(layout(view, header=True, explanation=explanation), path)
        elif suffix == ".svg":
            path.write_text(
                to_svg(layout(view, header=True, explanation=explanation), standalone=True) + "\n"
            )
        else:
            path.write_text(page(view, explanation))
    except OSError as exc:
        raise PermanentError(f"{path}: cannot write: {exc.strerror or exc}") from None
