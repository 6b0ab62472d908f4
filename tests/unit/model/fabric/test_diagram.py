"""The fabric diagram: the folded structure matches the plan, its bundles carry every link, and it
stays readable (no overlapping text, no text under 10 px, bounded size) from the lab's 2 nodes to
us-east-bm's 448 and beyond.
"""

from __future__ import annotations

import collections
import functools
import io
import itertools
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from railyard.model.catalog import load_catalog
from railyard.model.fabric import LINK_TIERS, FabricPlan, FabricPool, switch_geometry
from railyard.model.fabric.diagram import layout, overlaps, png, render, svg, text_width
from railyard.stack import load

ROOT = Path(__file__).resolve().parents[4]
STACKS = ("lab", "us-east-bm")
SVG_NS = "{http://www.w3.org/2000/svg}"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
QM9700 = switch_geometry(load_catalog().switches["qm9700"], "ndr")


@functools.cache
def stack_fabric(stack: str) -> FabricPlan:
    return load(ROOT / "stacks" / f"Pulumi.{stack}.yaml")[1].fabric


def dgx_fabric(nodes: int, pool: str = "gpu") -> FabricPlan:
    return FabricPlan(kind="infiniband", speed="ndr", switch=QM9700, pools=[FabricPool(pool, 0, nodes, 8)])


def kinds(diagram) -> collections.Counter:
    return collections.Counter(b.kind for b in diagram.boxes)


def rect(box) -> tuple[int, int, int, int]:
    return box.x, box.y, box.x + box.w, box.y + box.h


def inside(inner, outer) -> bool:
    return outer[0] <= inner[0] and outer[1] <= inner[1] and inner[2] <= outer[2] and inner[3] <= outer[3]


def fabrics():
    """The two stacks, and a three-tier fabric at its limit (8,192 nodes), which must fold."""
    return [pytest.param(lambda s=s: stack_fabric(s), id=s) for s in STACKS] + [
        pytest.param(lambda: dgx_fabric(8192), id="8192-nodes")]


# --------------------------------------------------------------------------------------------------
# The folded structure


def test_lab_draws_one_su_of_eight_rail_cells_under_one_box_of_four_spines():
    d = layout(stack_fabric("lab"))
    assert kinds(d) == {"leaf": 1, "rail": 8, "nodes": 1, "spine": 1}
    assert [b.lines for b in d.boxes if b.kind == "rail"] == [(f"r{i}",) for i in range(8)]
    assert [b.lines for b in d.boxes if b.kind in ("leaf", "nodes", "spine")] == [
        ("gpu-su0",), ("2 nodes x 8 NICs",), ("4 spines", "8 links from each leaf to each spine")]


def test_us_east_bm_draws_14_su_boxes_under_4_spine_groups_and_one_core_box():
    f = stack_fabric("us-east-bm")
    d = layout(f)
    assert kinds(d) == {"leaf": 14, "rail": 112, "nodes": 14, "spine": 4, "core": 1}
    groups = [b for b in d.boxes if b.kind == "spine"]
    assert [g.lines for g in groups] == [(f"h100-sg{i}: 32 spines",) for i in range(4)]
    su_per_group = collections.Counter(b.b for b in d.bundles if b.tier == "leaf_spine")
    assert [su_per_group[g] for g in groups] == [f.layouts[0].group_units_of(i) for i in range(4)] == [4, 4, 4, 2]
    assert [b.lines for b in d.boxes if b.kind == "core"] == [
        ("64 cores in 32 planes", "spine j of every group joins plane j (2 cores each)")]
    assert {b.lines for b in d.boxes if b.kind == "nodes"} == {("32 nodes x 8 NICs",)}


def test_a_fabric_of_8192_nodes_folds_identical_sus_and_spine_groups_into_counted_boxes():
    d = layout(dgx_fabric(8192))  # 256 SUs in 64 spine groups of 4
    assert kinds(d)["leaf"] == 13 and kinds(d)["spine"] == 4
    assert ("gpu-sg2..sg62", "61 groups x 32 spines") in [b.lines for b in d.boxes]
    assert ("gpu-su8..su251 (244 SUs)",) in [b.lines for b in d.boxes]
    assert ("7,808 nodes x 8 NICs",) in [b.lines for b in d.boxes]


@pytest.mark.parametrize("make", fabrics())
def test_bundles_carry_every_link_of_each_tier_one_line_per_bundle(make):
    f = make()
    d = layout(f)
    carried = collections.Counter()
    for bundle in d.bundles:
        carried[bundle.tier] += bundle.count
    links = f.summary()["links"]
    assert {t: carried[t] for t in LINK_TIERS} == {t: links[t] for t in LINK_TIERS}
    assert len({(b.a, b.b) for b in d.bundles}) == len(d.bundles), "two lines for one bundle"
    texts = collections.Counter(lb.text for lb in d.labels if lb.background)
    assert texts == collections.Counter(f"{b.count:,} link{'s' if b.count != 1 else ''}" for b in d.bundles)


# --------------------------------------------------------------------------------------------------
# Readable


@pytest.mark.parametrize("make", fabrics())
def test_no_two_labels_overlap(make):
    d = layout(make())
    clashes = [(a.text, b.text) for a, b in itertools.combinations(d.labels, 2) if overlaps(a.bbox, b.bbox)]
    assert not clashes


@pytest.mark.parametrize("make", fabrics())
def test_every_label_is_at_least_10_px(make):
    small = [(lb.text, lb.font_size) for lb in layout(make()).labels if lb.font_size < 10]
    assert not small


@pytest.mark.parametrize("make", fabrics())
def test_boxes_do_not_overlap_and_rail_cells_sit_in_their_leaf_box(make):
    d = layout(make())
    outer = [b for b in d.boxes if b.kind != "rail"]
    clashes = [(a.lines, b.lines) for a, b in itertools.combinations(outer, 2) if overlaps(rect(a), rect(b))]
    assert not clashes
    leaves = [rect(b) for b in d.boxes if b.kind == "leaf"]
    assert all(any(inside(rect(c), leaf) for leaf in leaves) for c in d.boxes if c.kind == "rail")


@pytest.mark.parametrize("make", fabrics())
def test_every_label_is_inside_a_box_or_clear_of_it(make):
    d = layout(make())
    straddling = [(lb.text, b.lines) for lb in d.labels for b in d.boxes
                  if overlaps(lb.bbox, rect(b)) and not inside(lb.bbox, rect(b))]
    assert not straddling
    assert all(inside(lb.bbox, (0, 0, d.width, d.height)) for lb in d.labels)


@pytest.mark.parametrize("make", fabrics())
def test_the_drawing_stays_under_4000_px_wide(make):
    assert layout(make()).width <= 4000


# --------------------------------------------------------------------------------------------------
# SVG


@pytest.mark.parametrize("stack", STACKS)
def test_svg_is_a_standalone_document_with_one_group_per_tier(stack):
    d = layout(stack_fabric(stack))
    text = svg(d)
    assert len(text.encode()) < 200_000
    root = ET.fromstring(text)
    assert root.tag == f"{SVG_NS}svg" and root.get("version") == "1.1"
    assert (root.get("width"), root.get("height"), root.get("viewBox")) == (
        str(d.width), str(d.height), f"0 0 {d.width} {d.height}")
    assert "sans-serif" in root.get("font-family")
    tiers = {"title", "spine", "leaf", "nodes", "node_leaf", "leaf_spine"}
    if stack == "us-east-bm":
        tiers |= {"core", "spine_core"}
    assert {g.get("id") for g in root.iter(f"{SVG_NS}g")} == tiers
    drawn = collections.Counter(t.text for t in root.iter(f"{SVG_NS}text"))
    assert drawn == collections.Counter(lb.text for lb in d.labels)


def test_svg_escapes_names_that_are_not_xml():
    root = ET.fromstring(svg(layout(dgx_fabric(2, pool='a&b<"c>'))))
    assert 'a&b<"c>-su0' in {t.text for t in root.iter(f"{SVG_NS}text")}


@pytest.mark.parametrize("stack", STACKS)
def test_the_same_plan_draws_the_same_bytes(stack):
    first = render(stack_fabric(stack), ".svg")
    again = load(ROOT / "stacks" / f"Pulumi.{stack}.yaml")[1].fabric
    assert render(again, "fabric.svg") == first


def test_a_fabric_without_nodes_draws_only_its_title():
    d = layout(dgx_fabric(0))
    assert d.boxes == [] and d.bundles == [] and len(d.labels) == 2
    ET.fromstring(svg(d))


# --------------------------------------------------------------------------------------------------
# PNG


@pytest.mark.parametrize("stack", STACKS)
def test_png_decodes_at_the_size_of_the_layout(stack):
    image_module = pytest.importorskip("PIL.Image")
    d = layout(stack_fabric(stack))
    data = png(d)
    assert data.startswith(PNG_SIGNATURE)
    assert len(data) < 1_500_000
    with image_module.open(io.BytesIO(data)) as image:
        image.load()
        assert image.size == (d.width, d.height)


@pytest.mark.parametrize("stack", STACKS)
def test_the_width_estimate_is_never_narrower_than_pillows_text(stack):
    font_module = pytest.importorskip("PIL.ImageFont")
    fonts: dict[int, object] = {}
    for lb in layout(stack_fabric(stack)).labels:
        if lb.font_size not in fonts:
            fonts[lb.font_size] = font_module.load_default(size=lb.font_size)
        assert fonts[lb.font_size].getlength(lb.text) <= text_width(lb.text, lb.font_size), lb.text


def test_png_rendering_is_deterministic():
    pytest.importorskip("PIL")
    assert render(stack_fabric("lab"), ".png") == render(stack_fabric("lab"), "out/fabric.PNG")


# --------------------------------------------------------------------------------------------------
# Formats


def test_render_refuses_a_suffix_it_cannot_draw_naming_it():
    with pytest.raises(ValueError, match=r"'\.pdf'"):
        render(stack_fabric("lab"), "fabric.pdf")
