"""The formation timeline as a picture: shapes laid out once, written as SVG or painted as PNG.

`layout(view, header=...)` places a `FormationView` (cdctl.projections.formation) on a canvas: the summary
(when `header`), a shared time axis in seconds after the domain was first seen, one row per node (and one
for the domain), each mark where its event happened, shaped and coloured by what it is (a legend explains
every mark), the formation time as a dashed line and the slowest node's name in red. `to_svg(drawing)`
writes it as one SVG element, each mark a group with its event as `<title>` (the hover);
`to_png(drawing, path)` paints the same shapes with matplotlib (the `plot` extra), so the PNG is the same
picture. Pure layout; used by cdctl.projections.formationpage.
"""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass, field
from html import escape
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cdctl.domain.errors import InvalidInput
from cdctl.projections.explain import Explanation
from cdctl.projections.formation import DOMAIN_ROW, MILESTONES, FormationView, Mark

WIDTH = 1200
NAME_W = 170
RIGHT = 40
ROW_H = 22
LINE_H = 18
# Formation milestones: filled circles, one colour each (colour-blind-safe order); the rest by phase.
MILESTONE_COLOURS = dict(
    zip(
        (k for k, _ in MILESTONES),
        ("#9467bd", "#8c564b", "#17becf", "#1f77b4", "#2ca02c", "#000000"),
        strict=True,
    )
)
PHASE_STYLE = {  # phase -> (shape, fill, stroke, legend text)
    "teardown": (
        "square",
        "#ffffff",
        "#7f7f7f",
        "teardown step (worker or daemon claim unprepared, left its clique, daemon stopped, label removed)",
    ),
    "retry": (
        "triangle",
        "#ff7f0e",
        "#b35900",
        "retry (a Prepare that waits, IMEX restarted, an action retried)",
    ),
    "failure": (
        "cross",
        "#d62728",
        "#d62728",
        "failure (Prepare failed for good, IMEX exited, daemon NotReady)",
    ),
    "domain": ("bar", "#444444", "#444444", "domain: observed, Ready, deletion seen, torn down"),
}
FAST, SLOW = "#222222", "#d62728"
XMLNS = ' xmlns="http://www.w3.org/2000/svg"'  # a name, never fetched; inline SVG in HTML needs none

if TYPE_CHECKING:
    from matplotlib.axes import Axes


@dataclass(frozen=True, slots=True)
class Shape:
    """One thing drawn: `kind` rect, line, text or marker (circle, square, triangle, cross, bar)."""

    kind: str
    x: float
    y: float
    w: float = 0.0  # rect: width; line: x2; marker: size
    h: float = 0.0  # rect: height; line: y2
    fill: str = "none"
    stroke: str = "none"
    text: str = ""  # text: the text; marker: its hover (the event)
    size: float = 12.0  # text: font size in px
    anchor: str = "start"  # text: start, middle, end
    bold: bool = False
    dash: bool = False
    css: str = ""  # SVG class (rows and marks, for the page's script)
    data: tuple[tuple[str, str], ...] = ()  # SVG data-* attributes


@dataclass
class Drawing:
    width: float
    height: float
    shapes: list[Shape] = field(default_factory=list)
    title: str = ""


def _tick_step(span: float) -> float:
    """A round step that gives about 8 ticks over `span` seconds."""
    raw = max(span, 0.001) / 8
    power = 10 ** math.floor(math.log10(raw))
    return float(next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw))


def _style(mark: Mark) -> tuple[str, str, str]:
    if mark.phase == "formation":
        colour = MILESTONE_COLOURS.get(mark.key, "#000000")
        return "circle", colour, colour
    shape, fill, stroke, _ = PHASE_STYLE[mark.phase]
    return shape, fill, stroke


def layout(view: FormationView, *, header: bool, explanation: Explanation | None = None) -> Drawing:
    """The picture of `view`; with an `explanation` (cdctl explain), its critical path is marked on the
    slowest node's row (a line through its steps, a band on the longest wait), and the cause is in the
    header."""
    said = view.summary_lines() + (_cause_lines(explanation) if explanation else [])
    lines = [part for line in said for part in textwrap.wrap(line, 150)] if header else []
    top = 16 + LINE_H * len(lines) + 40
    rows = [view.domain, *view.nodes]
    start, end = view.start_s, max(view.end_s, view.formation_s or 0.0, 0.001)
    plot_w = WIDTH - NAME_W - RIGHT
    legend_items = len(MILESTONES) + len(PHASE_STYLE) + 1
    height = top + ROW_H * len(rows) + 30 + LINE_H * legend_items + 20
    drawing = Drawing(WIDTH, height, title=f"cdctl timeline {view.subject}")
    add = drawing.shapes.append
    add(Shape("rect", 0, 0, WIDTH, height, fill="#ffffff"))

    def x_of(seconds: float) -> float:
        return NAME_W + plot_w * (seconds - start) / (end - start)

    for index, text in enumerate(lines):
        add(
            Shape(
                "text",
                12,
                16 + LINE_H * (index + 1) - 4,
                text=text,
                size=14 if index else 16,
                bold=index == 0,
            )
        )
    axis_y = top - 8
    add(Shape("text", NAME_W, axis_y - 18, text="seconds after the domain was first seen", size=12))
    step = _tick_step(end - start)
    tick = math.floor(start / step) * step
    bottom = top + ROW_H * len(rows)
    while tick <= end + 1e-9:
        if tick >= start - 1e-9:
            x = x_of(tick)
            add(Shape("line", x, axis_y, x, bottom, stroke="#dddddd"))
            add(Shape("text", x, axis_y - 3, text=f"{tick:g}", size=11, anchor="middle"))
        tick += step
    for index, row in enumerate(rows):
        y = top + ROW_H * index
        node = row.name != DOMAIN_ROW
        data = (("node", row.name),) if node else ()
        css = "row node-row" if node else "row domain-row"
        add(Shape("rect", 0, y, WIDTH, ROW_H, fill="#f4f4f4" if index % 2 else "#ffffff", css=css, data=data))
        colour = SLOW if row.name == view.slowest else FAST
        add(
            Shape(
                "text",
                NAME_W - 8,
                y + ROW_H - 7,
                text=row.name,
                size=12,
                anchor="end",
                fill=colour,
                bold=row.name == view.slowest,
            )
        )
        if explanation is not None and row.name == explanation.path_node:
            for leg in explanation.path:
                longest = leg is explanation.longest
                x1, x2 = x_of(leg.start_s), x_of(leg.end_s)
                on_path = (("node", row.name), ("step", leg.key))
                if longest:
                    add(Shape("rect", x1, y + ROW_H / 2 - 4, max(x2 - x1, 1.0), 8, fill=SLOW,
                              css="critical-path longest", data=on_path))  # fmt: skip
                add(Shape("line", x1, y + ROW_H / 2, x2, y + ROW_H / 2, stroke=SLOW, css="critical-path",
                          data=on_path))  # fmt: skip
        for mark in row.marks:
            shape, fill, stroke = _style(mark)
            detail = f" ({mark.detail})" if mark.detail else ""
            hover = f"{row.name}: {mark.label}{detail}, +{mark.offset_s:.3f} s\n{mark.event}"
            hovered = (("key", mark.key), ("node", row.name), ("hover", hover))
            at, css = x_of(mark.offset_s), f"mark {mark.phase}"
            add(Shape("marker", at, y + ROW_H / 2, 11, 0, fill, stroke, shape, css=css, data=hovered))
    if view.formation_s is not None:
        x = x_of(view.formation_s)
        add(Shape("line", x, axis_y, x, bottom, stroke=SLOW, dash=True))
        add(
            Shape(
                "text",
                x + 4,
                bottom + 14,
                text=f"formed: {view.formation_s:.2f} s",
                size=12,
                fill=SLOW,
                bold=True,
            )
        )
    y = bottom + 30
    legend = [("circle", MILESTONE_COLOURS[key], MILESTONE_COLOURS[key], label) for key, label in MILESTONES]
    legend += list(PHASE_STYLE.values())
    for index, (shape, fill, stroke, text) in enumerate(legend):
        add(Shape("marker", 20, y + LINE_H * index, 11, fill=fill, stroke=stroke, text=shape, css="legend"))
        add(Shape("text", 34, y + LINE_H * index + 4, text=text, size=12))
    y += LINE_H * len(legend)
    add(Shape("line", 8, y, 30, y, stroke=SLOW, dash=True))
    add(
        Shape(
            "text",
            34,
            y + 4,
            text="formation time: the last node's worker prepared (its node in red: the slowest)",
            size=12,
        )
    )
    return drawing


def _cause_lines(explanation: Explanation) -> list[str]:
    """The explanation's cause chain, for a picture's header (the page shows the whole explanation)."""
    if explanation.longest is None or not explanation.chain:
        return []
    longest = explanation.longest
    head = f"why {longest.label} waited {longest.wait_s:.2f} s (the critical path's band):"
    return [
        head,
        *(("<- " if depth else "   ") + cause.text for depth, cause in enumerate(explanation.chain)),
    ]


# ---- SVG ---------------------------------------------------------------------------------------------------
def _marker_svg(shape: Shape) -> str:
    x, y, r = shape.x, shape.y, shape.w / 2
    paint = f'fill="{shape.fill}" stroke="{shape.stroke}" stroke-width="1.5"'
    if shape.text == "circle":
        return f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{r:.1f}" {paint}/>'
    if shape.text == "square":
        return f'<rect x="{x - r:.1f}" y="{y - r:.1f}" width="{2 * r:.1f}" height="{2 * r:.1f}" {paint}/>'
    if shape.text == "triangle":
        points = f"{x:.1f},{y - r:.1f} {x + r:.1f},{y + r:.1f} {x - r:.1f},{y + r:.1f}"
        return f'<polygon points="{points}" {paint}/>'
    if shape.text == "cross":
        return (
            f'<path d="M{x - r:.1f},{y - r:.1f}L{x + r:.1f},{y + r:.1f}M{x - r:.1f},{y + r:.1f}'
            f'L{x + r:.1f},{y - r:.1f}" stroke="{shape.stroke}" stroke-width="3"/>'
        )
    return f'<rect x="{x - 2:.1f}" y="{y - r:.1f}" width="4" height="{2 * r:.1f}" {paint}/>'


def _attrs(shape: Shape, hover: bool) -> str:
    out = f' class="{shape.css}"' if shape.css else ""
    for name, value in shape.data:
        if name != "hover" or hover:
            out += f' data-{name}="{escape(value)}"'
    return out


def to_svg(drawing: Drawing, *, standalone: bool = False) -> str:
    """The drawing as one `<svg>` element; `standalone`: a file of its own (the XML namespace, and each
    mark's event only as its `<title>`)."""
    out = [
        f'<svg{XMLNS if standalone else ""} width="{drawing.width:.0f}" height="{drawing.height:.0f}"'
        f' viewBox="0 0 {drawing.width:.0f} {drawing.height:.0f}"'
        ' font-family="DejaVu Sans, Arial, sans-serif" role="img">',
        f"<title>{escape(drawing.title)}</title>",
    ]
    for shape in drawing.shapes:
        if shape.kind == "rect":
            out.append(
                f'<rect x="{shape.x:.1f}" y="{shape.y:.1f}" width="{shape.w:.1f}"'
                f' height="{shape.h:.1f}" fill="{shape.fill}"{_attrs(shape, False)}/>'
            )
        elif shape.kind == "line":
            dash = ' stroke-dasharray="5,4"' if shape.dash else ""
            out.append(
                f'<line x1="{shape.x:.1f}" y1="{shape.y:.1f}" x2="{shape.w:.1f}" y2="{shape.h:.1f}"'
                f' stroke="{shape.stroke}"{dash}{_attrs(shape, False)}/>'
            )
        elif shape.kind == "text":
            weight = ' font-weight="bold"' if shape.bold else ""
            fill = "#222222" if shape.fill == "none" else shape.fill
            out.append(
                f'<text x="{shape.x:.1f}" y="{shape.y:.1f}" font-size="{shape.size:g}"'
                f' text-anchor="{shape.anchor}" fill="{fill}"{weight}>{escape(shape.text)}</text>'
            )
        else:
            hover = dict(shape.data).get("hover", "")
            title = f"<title>{escape(hover)}</title>" if hover else ""
            out.append(f"<g{_attrs(shape, not standalone)}>{title}{_marker_svg(shape)}</g>")
    out.append("</svg>")
    return "\n".join(out)


# ---- PNG ---------------------------------------------------------------------------------------------------
def to_png(drawing: Drawing, path: Path, dpi: int = 100) -> None:
    """Paint the drawing's shapes with matplotlib's Agg renderer (no display, no system libraries)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        from matplotlib import patches
        from matplotlib import pyplot as plt
    except ImportError:
        raise InvalidInput(
            "cdctl timeline",
            "-o",
            f"{path}: a PNG needs matplotlib: pip install 'cdctl[plot]' (or write .svg/.html)",
        ) from None
    figure = plt.figure(figsize=(drawing.width / dpi, drawing.height / dpi), dpi=dpi)
    axes = figure.add_axes((0, 0, 1, 1))
    axes.set_xlim(0, drawing.width)
    axes.set_ylim(drawing.height, 0)
    axes.axis("off")
    points = 72 / dpi  # a px in points
    for shape in drawing.shapes:
        if shape.kind == "rect":
            axes.add_patch(
                patches.Rectangle((shape.x, shape.y), shape.w, shape.h, facecolor=shape.fill, linewidth=0)
            )
        elif shape.kind == "line":
            axes.plot(
                [shape.x, shape.w],
                [shape.y, shape.h],
                color=shape.stroke,
                linewidth=1,
                linestyle=(0, (5, 4)) if shape.dash else "-",
            )
        elif shape.kind == "text":
            align = {"start": "left", "end": "right"}.get(shape.anchor, "center")
            axes.text(
                shape.x,
                shape.y,
                shape.text,
                fontsize=shape.size * points,
                ha=align,
                va="baseline",
                color="#222222" if shape.fill == "none" else shape.fill,
                fontweight="bold" if shape.bold else "normal",
            )
        else:
            _paint_marker(axes, shape)
    figure.savefig(path, dpi=dpi, format="png")
    plt.close(figure)


def _paint_marker(axes: Axes, shape: Shape) -> None:
    from matplotlib import patches

    x, y, r = shape.x, shape.y, shape.w / 2
    style: dict[str, Any] = {"facecolor": shape.fill, "edgecolor": shape.stroke, "linewidth": 1.2}
    if shape.text == "circle":
        axes.add_patch(patches.Circle((x, y), r, **style))
    elif shape.text == "square":
        axes.add_patch(patches.Rectangle((x - r, y - r), 2 * r, 2 * r, **style))
    elif shape.text == "triangle":
        axes.add_patch(patches.Polygon([(x, y - r), (x + r, y + r), (x - r, y + r)], closed=True, **style))
    elif shape.text == "cross":
        for dx in (r, -r):
            axes.plot([x - dx, x + dx], [y - r, y + r], color=shape.stroke, linewidth=2.2)
    else:
        axes.add_patch(patches.Rectangle((x - 2, y - r), 4, 2 * r, **style))
