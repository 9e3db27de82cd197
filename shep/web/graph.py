"""A workflow's graph drawn as SVG on the server, each node in its state.

The layout reads the graph's own structure (``shep.workflows.shape``): nodes in
the order the workflow declares them; an edge to a node declared earlier (or to
itself) is a loop, drawn as an arc on the right; the other edges go down, and a
node sits one row below the lowest node that leads to it. Conditional edges (a
router's choices) are dashed; gates and questions have shapes of their own.
Every name in the drawing is escaped; the drawing has no script and no style
attribute (the page's Content-Security-Policy allows neither inline).
"""

from __future__ import annotations

from dataclasses import dataclass

from markupsafe import Markup, escape

from events.display import printable
from events.inbox_status import ItemKind
from shep.workflows.shape import END, START, GraphShape, ShapeEdge

WIDTH = 150
HEIGHT = 34
COLUMN_GAP = 22
ROW_GAP = 40
PAD = 16
LOOP_MARGIN = 26
LOOP_STEP = 10
TERMINAL = 9
_LABEL = 19


@dataclass(frozen=True)
class Placed:
    """A node's box: its top-left corner and its row."""

    name: str
    kind: str
    title: str
    x: float
    y: float
    rank: int

    @property
    def terminal(self) -> bool:
        return self.kind in ("start", "end")

    @property
    def center(self) -> float:
        return self.x + WIDTH / 2


@dataclass(frozen=True)
class Layout:
    nodes: dict[str, Placed]
    edges: tuple[ShapeEdge, ...]
    loops: frozenset[tuple[str, str]]
    width: float
    height: float


def layout(shape: GraphShape) -> Layout:
    """Where each node goes (see the module docstring)."""
    order = {node.name: n for n, node in enumerate(shape.nodes)}
    loops = frozenset(
        (e.source, e.target)
        for e in shape.edges
        if e.source in order and e.target in order and order[e.target] <= order[e.source]
    )
    forward = [
        e
        for e in shape.edges
        if (e.source, e.target) not in loops and e.source in order and e.target in order
    ]
    rank: dict[str, int | None] = {}
    for node in shape.nodes:
        before = [rank[e.source] for e in forward if e.target == node.name]
        known = [r for r in before if r is not None]
        rank[node.name] = 0 if node.name == START else (max(known) + 1 if known else None)
    for node in reversed(shape.nodes):
        if rank[node.name] is None:
            after = [rank[e.target] for e in forward if e.source == node.name]
            known = [r for r in after if r is not None]
            rank[node.name] = max(1, min(known) - 1) if known else 1
    ranks = {name: r or 0 for name, r in rank.items()}
    if END in ranks:
        ranks[END] = max((r for n, r in ranks.items() if n != END), default=0) + 1
    rows: dict[int, list[str]] = {}
    for node in shape.nodes:
        rows.setdefault(ranks[node.name], []).append(node.name)
    widest = max((len(names) for names in rows.values()), default=1)
    inner = widest * WIDTH + (widest - 1) * COLUMN_GAP
    placed: dict[str, Placed] = {}
    for node in shape.nodes:
        row = rows[ranks[node.name]]
        span = len(row) * WIDTH + (len(row) - 1) * COLUMN_GAP
        x = PAD + (inner - span) / 2 + row.index(node.name) * (WIDTH + COLUMN_GAP)
        y = PAD + ranks[node.name] * (HEIGHT + ROW_GAP)
        placed[node.name] = Placed(node.name, node.kind, node.title, x, y, ranks[node.name])
    loop_room = LOOP_MARGIN + LOOP_STEP * max(len(loops), 1)
    height = PAD * 2 + (max(ranks.values(), default=0) + 1) * (HEIGHT + ROW_GAP) - ROW_GAP
    return Layout(placed, tuple(shape.edges), loops, PAD * 2 + inner + loop_room, height)


def _label(name: str) -> str:
    shown = printable(name)
    return shown if len(shown) <= _LABEL else shown[: _LABEL - 1] + "\u2026"


def _node(node: Placed, state: str, current: bool) -> str:
    classes = f"node kind-{node.kind} state-{state}" + (" current" if current else "")
    tip = escape(printable(f"{node.name}: {node.title} ({node.kind}, {state})"))
    name = escape(printable(node.name))
    if node.terminal:
        cx, cy = node.center, node.y + HEIGHT / 2
        return (
            f'<g class="{classes}" data-node="{name}"><title>{tip}</title>'
            f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="{TERMINAL}"/></g>'
        )
    if node.kind == "gate":
        x, y, w, h = node.x, node.y, WIDTH, HEIGHT
        shape = (
            f'<polygon points="{x + 12:.1f},{y:.1f} {x + w - 12:.1f},{y:.1f} {x + w:.1f},'
            f"{y + h / 2:.1f} {x + w - 12:.1f},{y + h:.1f} {x + 12:.1f},{y + h:.1f} "
            f'{x:.1f},{y + h / 2:.1f}"/>'
        )
    else:
        radius = 16 if node.kind == ItemKind.QUESTION else 5
        shape = (
            f'<rect x="{node.x:.1f}" y="{node.y:.1f}" width="{WIDTH}" height="{HEIGHT}" '
            f'rx="{radius}"/>'
        )
    return (
        f'<g class="{classes}" data-node="{name}"><title>{tip}</title>{shape}'
        f'<text x="{node.center:.1f}" y="{node.y + HEIGHT / 2 + 4:.1f}">'
        f"{escape(_label(node.name))}</text></g>"
    )


def _bottom(node: Placed) -> tuple[float, float]:
    return node.center, node.y + (HEIGHT / 2 + TERMINAL if node.terminal else HEIGHT)


def _top(node: Placed) -> tuple[float, float]:
    return node.center, node.y + (HEIGHT / 2 - TERMINAL if node.terminal else 0)


def _edge(drawn: Layout, edge: ShapeEdge, lane: int) -> str:
    source, target = drawn.nodes[edge.source], drawn.nodes[edge.target]
    loop = (edge.source, edge.target) in drawn.loops
    classes = "edge" + (" cond" if edge.conditional else "") + (" loop" if loop else "")
    if loop and source.name == target.name:
        x, y = source.x + WIDTH, source.y
        path = (
            f"M{x:.1f},{y + 8:.1f} C{x + 30:.1f},{y - 12:.1f} {x + 30:.1f},"
            f"{y + HEIGHT + 12:.1f} {x:.1f},{y + HEIGHT - 8:.1f}"
        )
    elif loop:
        x1, y1 = source.x + WIDTH, source.y + HEIGHT / 2
        x2, y2 = target.x + WIDTH, target.y + HEIGHT / 2
        side = max(x1, x2) + LOOP_MARGIN + LOOP_STEP * lane
        path = f"M{x1:.1f},{y1:.1f} C{side:.1f},{y1:.1f} {side:.1f},{y2:.1f} {x2:.1f},{y2:.1f}"
    else:
        (x1, y1), (x2, y2) = _bottom(source), _top(target)
        bend = max((y2 - y1) / 2, 12)
        path = (
            f"M{x1:.1f},{y1:.1f} C{x1:.1f},{y1 + bend:.1f} {x2:.1f},{y2 - bend:.1f} "
            f"{x2:.1f},{y2:.1f}"
        )
    return f'<path class="{classes}" d="{path}" marker-end="url(#arrow)"/>'


def graph_svg(shape: GraphShape, states: dict[str, str], current: str | None = None) -> Markup:
    """The graph as an ``<svg>`` element; ``states``: each node's state (pending, running,
    waiting, completed, failed, stopped), ``current``: the node in flight."""
    drawn = layout(shape)
    edges = []
    lanes = 0
    for edge in drawn.edges:
        if edge.source not in drawn.nodes or edge.target not in drawn.nodes:
            continue
        loop = (edge.source, edge.target) in drawn.loops and edge.source != edge.target
        edges.append(_edge(drawn, edge, lanes))
        lanes += int(loop)
    nodes = [
        _node(node, "none" if node.terminal else states.get(name, "none"), name == current)
        for name, node in drawn.nodes.items()
    ]
    return Markup(  # noqa: S704 (every name and title in it was escaped above)
        f'<svg class="graph" viewBox="0 0 {drawn.width:.0f} {drawn.height:.0f}" '
        f'width="{drawn.width:.0f}" height="{drawn.height:.0f}" role="img" '
        f'aria-label="the workflow graph" xmlns="http://www.w3.org/2000/svg">'
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
        'markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z"/></marker>'
        "</defs>" + "".join(edges) + "".join(nodes) + "</svg>"
    )
