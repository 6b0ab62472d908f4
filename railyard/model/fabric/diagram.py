"""The fabric drawn: tiers of folded boxes joined by bundles, one line per bundle labelled with its
link count (never one line per cable), as SVG or PNG.

`layout` turns a FabricPlan into geometry; `svg` and `png` only paint that geometry, so what the
tests check (counts, overlaps, font sizes) is exactly what both renderers draw. Every text is a
Label whose box comes from a fixed, conservative glyph width, so overlap is checked without a
renderer.

Folding keeps 448 nodes readable: one box per scalable unit holding its leaves as rail cells, one
box for its nodes, one box per spine group (three tiers) or for all spines (two), one box for the
cores. Long runs of identical SUs or spine groups fold into one box that counts them (the first
ones, the folded middle, the last, which may be partial), so a pool's width is bounded at any
size. Pure: no Pulumi, no files.
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import TYPE_CHECKING, Any, Callable, Iterator, NamedTuple
from xml.sax.saxutils import escape

from railyard.model.fabric.names import LINK_TIERS, SWITCH_TIERS, group_name, unit_name

if TYPE_CHECKING:
    from railyard.model.fabric.planner import FabricPlan, PoolLayout

# Text metrics. 0.65 em per glyph covers DejaVu Sans digits (0.636), the usual fallback for
# "sans-serif", as well as Pillow's default font, so an estimated box is never narrower than the
# drawn text; the height of a line is 1.2 em, and the baseline sits 0.35 em below its middle.
# Texts are ASCII ("32 nodes x 8 NICs"): Pillow's default font has no multiplication sign.
CHAR_W, LINE_H, BASELINE = 0.65, 1.2, 0.35
FONT, SMALL, TIER_FONT, TITLE_FONT = 12, 10, 13, 16  # SMALL, the rail cells, is the least readable

MARGIN, TITLE_H, PAD, CELL_GAP, CELL_H = 20, 48, 8, 2, 22
COL_W, COL_GAP, POOL_GAP, TIER_GAP = 200, 24, 48, 64
# Boxes kept before a run folds. Three tiers nest two folds (groups, then SUs in a group), so
# each keeps fewer: at most 4 x 4 SU boxes per pool, about 3,700 px at 200 px. Two tiers keep 8
# per pool, all the SUs of 8 rails a 64-port spine can take.
KEEP_3T, KEEP_2T = 4, 8

STYLE = {  # kind: (fill, stroke)
    "core": ("#fde2e2", "#b03a3a"), "spine": ("#fff1d6", "#a86f00"), "leaf": ("#dcebfa", "#2b6cb0"),
    "rail": ("#ffffff", "#2b6cb0"), "nodes": ("#e3f4e1", "#2f7d32"),
}
LINE_COLOUR, TEXT_COLOUR = "#555555", "#111111"
LAYERS = ("spine_core", "leaf_spine", "node_leaf", "title", "core", "spine", "leaf", "nodes")


def text_width(text: str, size: float) -> float:
    return len(text) * CHAR_W * size


def _pitch(size: int) -> int:
    """Line to line, in whole pixels with a little leading, so rounded lines never touch."""
    return math.ceil(LINE_H * size) + 2


def _many(n: int, noun: str) -> str:
    return f"{n:,} {noun if n == 1 else 'leaves' if noun == 'leaf' else noun + 's'}"


@dataclass(frozen=True)
class Box:
    x: int
    y: int
    w: int
    h: int
    kind: str                  # core | spine | leaf | rail (a leaf cell) | nodes
    lines: tuple[str, ...] = ()

    @property
    def tier(self) -> str:
        return "leaf" if self.kind == "rail" else self.kind


@dataclass(frozen=True)
class Bundle:
    a: Box                     # the lower end
    b: Box
    count: int                 # links (cables) in the bundle
    tier: str                  # node_leaf | leaf_spine | spine_core
    x1: int
    y1: int
    x2: int
    y2: int


@dataclass(frozen=True)
class Label:
    x: int
    y: int                     # the middle of the line
    text: str
    font_size: int
    anchor: str = "middle"     # start | middle | end, as SVG's text-anchor
    tier: str = "title"
    background: bool = False   # bundle labels sit on their line

    @property
    def bbox(self) -> tuple[float, float, float, float]:
        w = text_width(self.text, self.font_size)
        x0 = self.x - {"start": 0, "middle": w / 2, "end": w}[self.anchor]
        h = LINE_H * self.font_size / 2
        return x0, self.y - h, x0 + w, self.y + h


@dataclass
class Diagram:
    width: int
    height: int
    boxes: list[Box] = field(default_factory=list)
    bundles: list[Bundle] = field(default_factory=list)
    labels: list[Label] = field(default_factory=list)


def overlaps(a: tuple[float, ...], b: tuple[float, ...]) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


# --------------------------------------------------------------------------------------------------
# Layout


class _Column(NamedTuple):
    """One SU box: `units` SUs of a pool from `unit` on."""
    pl: PoolLayout
    unit: int
    units: int


class _Block(NamedTuple):
    """One spine box over its columns: `groups` spine groups from `group` (three tiers), or every
    spine (two tiers: pl None)."""
    pl: PoolLayout | None
    group: int
    groups: int
    columns: tuple[_Column, ...]


def _runs(n: int, keep: int) -> list[tuple[int, int]]:
    """(first, count) boxes for n items: each alone up to `keep`, else the first keep-2 alone, the
    middle folded into one, and the last alone (the one that may be partial)."""
    if n <= keep:
        return [(i, 1) for i in range(n)]
    return [(i, 1) for i in range(keep - 2)] + [(keep - 2, n - keep + 1), (n - 1, 1)]


def _blocks(f: FabricPlan) -> list[_Block]:
    if f.tiers == 2:
        columns = tuple(_Column(pl, u, n) for pl in f.layouts for u, n in _runs(pl.units, KEEP_2T))
        return [_Block(None, 0, 0, columns)]
    blocks = []
    for pl in f.layouts:
        for g, n in _runs(pl.groups, KEEP_3T):
            first = g * pl.group_units
            if n == 1:
                cols = tuple(_Column(pl, first + u, k) for u, k in _runs(pl.group_units_of(g), KEEP_3T))
            else:
                cols = (_Column(pl, first, n * pl.group_units),)
            blocks.append(_Block(pl, g, n, cols))
    return blocks


def _nodes(f: FabricPlan, c: _Column) -> int:
    last = c.unit + c.units == c.pl.units
    return (c.units - last) * f.su_nodes + (c.pl.last_unit_nodes if last else 0)


def _nodes_text(f: FabricPlan, c: _Column) -> str:
    return f"{_many(_nodes(f, c), 'node')} x {_many(c.pl.pool.rails, 'NIC')}"


def _su_title(c: _Column) -> str:
    name = unit_name(c.pl.pool.name, c.unit)
    return name if c.units == 1 else f"{name}..su{c.unit + c.units - 1} ({c.units} SUs)"


def _spine_lines(f: FabricPlan, b: _Block) -> tuple[str, ...]:
    if b.pl is None:
        return _many(f.spines, "spine"), f"{_many(f.links_per_spine, 'link')} from each leaf to each spine"
    name = group_name(b.pl.pool.name, b.group)
    if b.groups == 1:
        return (f"{name}: {_many(f.uplinks, 'spine')}",)
    return f"{name}..sg{b.group + b.groups - 1}", f"{b.groups} groups x {_many(f.uplinks, 'spine')}"


def _box_h(lines: int) -> int:
    return lines * _pitch(FONT) + 2 * PAD


def _title(f: FabricPlan) -> tuple[str, str]:
    s = f.summary()
    sw, ln = s["switches"], s["links"]
    switches = ", ".join(_many(sw[t], t) for t in SWITCH_TIERS if sw[t])
    links = ", ".join(f"{ln[t]:,} {t.replace('_', '-')}" for t in LINK_TIERS if ln[t])
    return (f"{s['kind']} {s['speed']} rail-optimized fabric on {s['switch']}: "
            f"{_many(s['nodes'], 'node')} x {_many(s['rails'], 'rail')}, {s['tiers']} tiers",
            f"{switches} ({sw['total']:,} switches); {ln['total']:,} links: {links}")


class _Drawing:
    """The diagram as it grows: boxes and bundles, each with its labels."""

    def __init__(self) -> None:
        self.d = Diagram(0, 0)

    def label(self, x: int, y: int, text: str, size: int = FONT, anchor: str = "middle", tier: str = "title",
              background: bool = False) -> None:
        self.d.labels.append(Label(x, y, text, size, anchor, tier, background))

    def box(self, x: int, y: int, w: int, h: int, kind: str, lines: tuple[str, ...] = (),
            size: int = FONT, top: bool = False) -> Box:
        """A box with its lines centred, or at its top (a leaf box, its rail cells below)."""
        box = Box(x, y, w, h, kind, lines)
        self.d.boxes.append(box)
        y0 = y + PAD if top else y + (h - len(lines) * _pitch(size)) // 2
        for i, text in enumerate(lines):
            self.label(x + w // 2, y0 + i * _pitch(size) + _pitch(size) // 2, text, size, tier=box.tier)
        return box

    def bundle(self, a: Box, b: Box, count: int, tier: str, x: int) -> None:
        """A vertical bundle from the top of a up to the bottom of b, its count halfway."""
        self.d.bundles.append(Bundle(a, b, count, tier, x, a.y, x, b.y + b.h))
        self.label(x, (a.y + b.y + b.h) // 2, _many(count, "link"), tier=tier, background=True)


def layout(fabric: FabricPlan) -> Diagram:
    """The folded drawing of a fabric plan."""
    f, dr = fabric, _Drawing()
    for i, text in enumerate(_title(f)):
        size = TITLE_FONT if i == 0 else FONT
        dr.label(MARGIN, MARGIN + i * (_pitch(TITLE_FONT) + 4) + _pitch(size) // 2, text, size, "start")
    blocks = _blocks(f) if f.tiers else []
    columns = [c for b in blocks for c in b.columns]
    texts = [t for c in columns for t in (_su_title(c), _nodes_text(f, c))]
    if f.tiers == 3:  # a group box may be one column wide; the two-tier spine box spans them all
        texts += [t for b in blocks for t in _spine_lines(f, b)]
    col_w = max([COL_W] + [round(text_width(t, FONT)) + 2 * PAD for t in texts])

    # Rows, top to bottom; then the columns, left to right, a wider gap between pools and groups.
    tiers = ((["core"] if f.tiers == 3 else []) + ["spine", "leaf", "nodes"]) if blocks else []
    heights = {"core": _box_h(2), "spine": _box_h(max((len(_spine_lines(f, b)) for b in blocks), default=1)),
               "leaf": _box_h(1) + CELL_GAP + CELL_H, "nodes": _box_h(1)}
    row, y = {}, MARGIN + TITLE_H + TIER_GAP // 2
    for t in tiers:
        row[t] = y
        dr.label(MARGIN, y + heights[t] // 2, t, TIER_FONT, "start", tier=t)
        y += heights[t] + TIER_GAP
    left = MARGIN + round(max(text_width(t, TIER_FONT) for t in ("core", "spine", "leaf", "nodes"))) + 2 * PAD
    xs, x, prev = {}, left, None  # prev: (block, pool) of the column to the left
    for b in blocks:
        for c in b.columns:
            if prev is not None:
                x += COL_GAP if prev[0] is b and prev[1] is c.pl else POOL_GAP
            xs[c], x, prev = x, x + col_w, (b, c.pl)
    right = x

    # Leaves (rail cells when they fit) over their nodes, one column per SU box.
    leaf_box: dict[_Column, Box] = {}
    for c in columns:
        r, cx = c.pl.pool.rails, xs[c] + col_w // 2
        cell_w = (col_w - 2 * PAD - (r - 1) * CELL_GAP) // r
        cells = cell_w >= text_width(f"r{r - 1}", SMALL) + 4
        lines = (_su_title(c),) + (() if cells else (f"{_many(c.units * r, 'leaf')}, rails 0-{r - 1}",))
        leaf = leaf_box[c] = dr.box(xs[c], row["leaf"], col_w, heights["leaf"], "leaf", lines, top=cells)
        for i in range(r if cells else 0):
            dr.box(xs[c] + PAD + i * (cell_w + CELL_GAP), leaf.y + leaf.h - PAD - CELL_H, cell_w, CELL_H, "rail",
                   (f"r{i}",), SMALL)
        nodes = dr.box(xs[c], row["nodes"], col_w, heights["nodes"], "nodes", (_nodes_text(f, c),))
        dr.bundle(nodes, leaf, _nodes(f, c) * r, "node_leaf", cx)

    # Spines: one box per block over its columns; every leaf bundle goes straight up into it.
    spine_box = {}
    for b in blocks:
        x0, lines = xs[b.columns[0]], _spine_lines(f, b)
        w = max(xs[b.columns[-1]] + col_w - x0, max(round(text_width(t, FONT)) for t in lines) + 2 * PAD)
        spine = spine_box[b] = dr.box(x0, row["spine"], w, heights["spine"], "spine", lines)
        right = max(right, x0 + w)
        for c in b.columns:
            dr.bundle(leaf_box[c], spine, c.units * c.pl.pool.rails * f.uplinks, "leaf_spine", xs[c] + col_w // 2)

    # Cores: one box, whatever the planes. Every group reaches every plane (its spine j is in
    # plane j), so a box per plane would cross groups x planes bundles; a group's bundle carries
    # the uplinks of all its spines, as many as come up from its leaves.
    if f.tiers == 3:
        lines = (f"{_many(f.cores, 'core')} in {_many(f.planes, 'plane')}",
                 f"spine j of every group joins plane j ({_many(f.cores_per_plane, 'core')} each)")
        w = max(right - left, max(round(text_width(t, FONT)) for t in lines) + 2 * PAD)
        core = dr.box(left, row["core"], w, heights["core"], "core", lines)
        right = max(right, left + w)
        for b in blocks:
            assert b.pl is not None, "three tiers: every block is spine groups of a pool"
            g, units = spine_box[b], sum(b.pl.group_units_of(i) for i in range(b.group, b.group + b.groups))
            dr.bundle(g, core, f.uplinks * units * b.pl.pool.rails, "spine_core", g.x + g.w // 2)

    dr.d.width = max([right] + [math.ceil(label.bbox[2]) for label in dr.d.labels]) + MARGIN
    dr.d.height = (y - TIER_GAP if tiers else MARGIN + TITLE_H) + MARGIN
    return dr.d


# --------------------------------------------------------------------------------------------------
# Rendering


def _layers(d: Diagram) -> Iterator[tuple[str, list[Box], list[Bundle], list[Label]]]:
    """Paint order: links under switches; in each layer lines, then boxes, then text."""
    for layer in LAYERS:
        items = ([b for b in d.boxes if b.tier == layer], [b for b in d.bundles if b.tier == layer],
                 [lb for lb in d.labels if lb.tier == layer])
        if any(items):
            yield (layer, *items)


def _num(v: float) -> str:
    return f"{v:.1f}".rstrip("0").rstrip(".")


def svg(d: Diagram) -> str:
    """A standalone SVG 1.1 document."""
    out = ['<?xml version="1.0" encoding="UTF-8"?>',
           f'<svg xmlns="http://www.w3.org/2000/svg" version="1.1" width="{d.width}" height="{d.height}" '
           f'viewBox="0 0 {d.width} {d.height}" font-family="sans-serif" fill="{TEXT_COLOUR}">',
           f'<rect width="{d.width}" height="{d.height}" fill="#ffffff"/>']
    for layer, boxes, bundles, labels in _layers(d):
        out.append(f'<g id="{layer}">')
        out += [f'<line x1="{b.x1}" y1="{b.y1}" x2="{b.x2}" y2="{b.y2}" stroke="{LINE_COLOUR}" stroke-width="2"/>'
                for b in bundles]
        out += [f'<rect x="{b.x}" y="{b.y}" width="{b.w}" height="{b.h}" fill="{STYLE[b.kind][0]}" '
                f'stroke="{STYLE[b.kind][1]}"/>' for b in boxes]
        for lb in labels:
            if lb.background:
                x0, y0, x1, y1 = lb.bbox
                out.append(f'<rect x="{_num(x0)}" y="{_num(y0)}" width="{_num(x1 - x0)}" height="{_num(y1 - y0)}" '
                           'fill="#ffffff"/>')
            out.append(f'<text x="{lb.x}" y="{_num(lb.y + BASELINE * lb.font_size)}" font-size="{lb.font_size}" '
                       f'text-anchor="{lb.anchor}">{escape(lb.text)}</text>')
        out.append("</g>")
    out.append("</svg>")
    return "\n".join(out) + "\n"


def png(d: Diagram) -> bytes:
    """The same drawing as a PNG, painted with Pillow's own scalable font (no system font)."""
    from PIL import Image, ImageDraw, ImageFont

    image = Image.new("RGB", (d.width, d.height), "#ffffff")
    draw = ImageDraw.Draw(image)
    fonts: dict[int, Any] = {}
    for _, boxes, bundles, labels in _layers(d):
        for b in bundles:
            draw.line([(b.x1, b.y1), (b.x2, b.y2)], fill=LINE_COLOUR, width=2)
        for box in boxes:
            draw.rectangle([box.x, box.y, box.x + box.w, box.y + box.h], fill=STYLE[box.kind][0],
                           outline=STYLE[box.kind][1])
        for lb in labels:
            if lb.background:
                draw.rectangle(lb.bbox, fill="#ffffff")
            if lb.font_size not in fonts:
                fonts[lb.font_size] = ImageFont.load_default(size=lb.font_size)
            draw.text((lb.x, lb.y + BASELINE * lb.font_size), lb.text, fill=TEXT_COLOUR, font=fonts[lb.font_size],
                      anchor={"start": "ls", "middle": "ms", "end": "rs"}[lb.anchor])
    buf = io.BytesIO()
    image.save(buf, "PNG", optimize=True)
    return buf.getvalue()


RENDERERS: dict[str, Callable[[Diagram], bytes]] = {".svg": lambda d: svg(d).encode(), ".png": png}


def render(fabric: FabricPlan, name: str) -> bytes:
    """The diagram of a fabric in the format a file name (or a bare suffix) asks for."""
    suffix = (PurePath(name).suffix or name).lower()
    if suffix not in RENDERERS:
        raise ValueError(f"cannot draw a fabric diagram as {suffix!r}: use .svg or .png")
    return RENDERERS[suffix](layout(fabric))
