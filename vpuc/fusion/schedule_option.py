"""The ``--schedule naive|default`` option of ``vpuc compile`` and ``vpuc run`` (kept apart
from ``schedule.py`` so the command line does not import the lowering to build its parser)."""

from __future__ import annotations

SCHEDULE_CHOICES = ("naive", "default")


def add_schedule_option(parser) -> None:
    parser.add_argument("--schedule", choices=SCHEDULE_CHOICES, default="default",
                        help="how a graph is lowered: default overlaps and shares transfers "
                             "across layers; naive is the layer-by-layer schedule, for "
                             "comparison (docs/vir.md, \"Schedules\")")
