"""Where a scatter plot's point labels go so that none covers another, or a point.

Plotly places each text label at a fixed position beside its marker and does not
avoid collisions: on ResNet-18's roofline, stage 4's four convolutions lie within a
label's height of each other and their names overprinted.  ``place_labels`` picks,
for each label in order of importance, the first of plotly's positions around its
point whose box covers no label placed before it and no other point's marker (in a
dense cluster, where every position covers a marker, one that covers no label), and
leaves the label off (the point still names itself on hover) when every position
covers a label.

The boxes are estimated in pixels from the axis ranges, which the caller fixes
(``axis_range``), and a plot area no larger than the real one (the report's width is
the browser window's, at least ``PLOT_WIDTH`` wide in practice): on a wider plot,
points only move apart while labels keep their size, so labels apart here stay apart
there.  Text is estimated at ``CHAR_WIDTH`` pixels a character, on the generous side
of plotly's 12-pixel default font.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

PLOT_WIDTH = 700         # pixels: the smallest plot area the report is drawn at
CHAR_WIDTH = 7.5         # pixels per character of plotly's default 12 px font, generously
LINE_HEIGHT = 16         # pixels per text line
MARKER = 7               # pixels from a marker's centre to the edge of its box (size 11, padded)
# plotly's positions, nearest first; (dx, dy) of the label box's centre from the point,
# in units of (half the box width + MARKER, half the box height + MARKER)
POSITIONS = {"top center": (0, 1), "bottom center": (0, -1), "middle right": (1, 0),
             "middle left": (-1, 0), "top right": (1, 1), "top left": (-1, 1),
             "bottom right": (1, -1), "bottom left": (-1, -1)}

Box = tuple[float, float, float, float]        # x0, y0, x1, y1 in pixels, y up


def axis_range(values: Sequence[float], pad: float = 0.05) -> list[float]:
    """A log axis range (log10 units, as plotly takes it) holding ``values`` with
    ``pad`` of the span on each side."""
    lo, hi = math.log10(min(values)), math.log10(max(values))
    span = max(hi - lo, 1e-9)
    return [lo - pad * span, hi + pad * span]


def _overlaps(a: Box, b: Box) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def place_labels(points: Sequence[tuple[float, float]], labels: Sequence[str],
                 order: Sequence[int], x_range: Sequence[float], y_range: Sequence[float],
                 height: float) -> tuple[list[str], list[str]]:
    """For log-log ``points`` with ``labels`` ("" for none), each label's text ("" where
    it is left off) and plotly ``textposition``; ``order``: the points' indices, most
    important label first; ``x_range``/``y_range``: the axes' log10 ranges; ``height``:
    the plot area's height in pixels."""
    def pixels(x: float, y: float) -> tuple[float, float]:
        fx = (math.log10(x) - x_range[0]) / (x_range[1] - x_range[0])
        fy = (math.log10(y) - y_range[0]) / (y_range[1] - y_range[0])
        return fx * PLOT_WIDTH, fy * height

    centres = [pixels(x, y) for x, y in points]
    markers = [(cx - MARKER, cy - MARKER, cx + MARKER, cy + MARKER) for cx, cy in centres]
    placed: list[Box] = []
    text = [""] * len(points)
    where = ["top center"] * len(points)
    for i in order:
        if not labels[i]:
            continue
        half_w, half_h = len(labels[i]) * CHAR_WIDTH / 2, LINE_HEIGHT / 2
        cx, cy = centres[i]
        boxes = {}
        for position, (dx, dy) in POSITIONS.items():
            bx, by = cx + dx * (half_w + MARKER), cy + dy * (half_h + MARKER)
            box = (bx - half_w, by - half_h, bx + half_w, by + half_h)
            if (box[0] >= 0 and box[2] <= PLOT_WIDTH and box[1] >= 0 and box[3] <= height
                    and not any(_overlaps(box, other) for other in placed)):
                boxes[position] = box
        # a position that hides no other point if there is one, else one that hides points
        # but no label (in a dense cluster: they still name themselves on hover)
        clear = [pos for pos, box in boxes.items()
                 if not any(_overlaps(box, m) for j, m in enumerate(markers) if j != i)]
        position = clear[0] if clear else next(iter(boxes), None)
        if position is not None:
            placed.append(boxes[position])
            text[i], where[i] = labels[i], position
    return text, where
