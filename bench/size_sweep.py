"""Every zoo model at many sizes and CMX budgets: does it compile? (issue 11, section 3)

Compile only (``api.compile``, ``--schedule default`` unless ``--naive``), one case at a
time in this process; a table row per case: the model and its size, the CMX budget, the
outcome and the compile's wall time.  Outcomes:

- ``ok`` (with the program's barriers: virtual count and the physical ids it uses);
- ``error``: a ``VpucError`` (the located, user-facing kind), its first line shown;
  acceptable only where the hardware really cannot do it;
- ``CRASH``: anything else (a traceback is a compiler bug).

A case whose model the builder cannot make is a usage mistake of the sweep, reported as
``model`` and never compiled.

Sizes are irregular on purpose (17, 33, 100: blocks that divide badly, odd rows).
``--quick`` runs a small subset (a minute or two); the default grid takes much longer.
The exit status is 1 when a case crashed, or with ``--strict`` when one failed.

    python bench/size_sweep.py [--quick] [--model NAME ...] [--budget BYTES ...] [--strict]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from vpuc import api  # noqa: E402
from vpuc.diagnostics import VpucError  # noqa: E402
from vpuc.onnx_import import zoo  # noqa: E402

DEFAULT_BUDGET = None        # the compiler's default: half a tile's CMX


def cases(quick: bool) -> list[tuple[str, dict, object]]:
    """(model, builder arguments, builder) per case."""
    images = [17, 33, 64, 100] if quick else [16, 17, 33, 48, 64, 96, 100, 160, 224]
    out: list[tuple[str, dict, object]] = []
    for size in images:
        out.append(("resnet18", {"size": size, "width": 16 if quick else 64,
                                 "classes": 10 if quick else 1000}, zoo.resnet18))
        out.append(("mobilenet_v3_small", {"size": size, "classes": 10 if quick else 1000},
                    zoo.mobilenet_v3_small))
    # the FPN block's coarse input is half the fine one, upsampled by 2: even sizes only
    fpn = [(16, 8), (34, 16), (64, 32), (48, 24)] if quick else \
        [(s, c) for s in (16, 18, 34, 48, 64, 96, 100, 128) for c in (8, 24, 32, 64, 96)]
    out += [("fpn_block", {"size": s, "channels": c}, zoo.fpn_block) for s, c in fpn]
    enc = [(7, 32, 2), (17, 48, 3), (50, 96, 4), (197, 192, 3)] if quick else \
        [(q, w, h) for q in (7, 17, 50, 100, 197) for w, h in ((32, 2), (48, 3), (96, 4),
                                                               (128, 8), (192, 3))]
    out += [("encoder_layer", {"seq": q, "width": w, "heads": h}, zoo.encoder_layer)
            for q, w, h in enc]
    out.append(("small_cnn", {}, zoo.small_cnn))
    return out


def run_case(builder, args: dict, budget, schedule: str, workdir: Path) -> tuple[str, str]:
    try:
        path = builder(**args).save(workdir / "model.onnx", "model")
    except Exception as exc:  # noqa: BLE001 - onnx's shape inference rejects the sizes
        return "model", f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
    try:
        program = api.compile(path, schedule=schedule, cmx_budget=budget)
    except VpucError as exc:
        return "error", str(exc).splitlines()[0]
    except Exception as exc:  # noqa: BLE001 - the sweep reports every crash
        frame = traceback.extract_tb(exc.__traceback__)[-1]
        return "CRASH", f"{type(exc).__name__}: {exc} ({Path(frame.filename).name}:{frame.lineno})"
    barriers = program.module.barriers
    ids = len({b.physical for b in barriers})
    return "ok", f"{len(barriers)} barriers on {ids} ids"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small subset")
    parser.add_argument("--model", action="append", help="only these models (repeatable)")
    parser.add_argument("--budget", action="append", type=int,
                        help="CMX budgets in bytes (repeatable; default: the compiler's "
                             "default, 65536 and 16384; --quick: the default and 16384)")
    parser.add_argument("--naive", action="store_true", help="--schedule naive")
    parser.add_argument("--strict", action="store_true", help="exit 1 on any error too")
    args = parser.parse_args(argv)
    budgets = args.budget or ([DEFAULT_BUDGET, 16384] if args.quick
                              else [DEFAULT_BUDGET, 65536, 16384])
    schedule = "naive" if args.naive else "default"
    rows = [(m, a, b, budget) for m, a, b in cases(args.quick) for budget in budgets
            if not args.model or m in args.model]
    print(f"{'model':20} {'size':28} {'budget':>8} {'outcome':7} {'s':>6}  detail")
    counts: dict[str, int] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for model, margs, builder, budget in rows:
            clock = time.perf_counter()
            outcome, detail = run_case(builder, margs, budget, schedule, Path(tmp))
            seconds = time.perf_counter() - clock
            counts[outcome] = counts.get(outcome, 0) + 1
            size = " ".join(f"{k}={v}" for k, v in margs.items()) or "-"
            shown = "default" if budget is None else str(budget)
            print(f"{model:20} {size:28} {shown:>8} {outcome:7} {seconds:6.1f}  {detail[:160]}",
                  flush=True)
    print("; ".join(f"{k}: {v}" for k, v in sorted(counts.items())))
    return 1 if counts.get("CRASH") or (args.strict and counts.get("error")) else 0


if __name__ == "__main__":
    sys.exit(main())
