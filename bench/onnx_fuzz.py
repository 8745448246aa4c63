"""Differential fuzz campaigns: random ONNX models (``tests/fuzz/onnx_models.py``: one op,
small CNNs, transformer blocks, the op forms of opsets 11 to 23) compiled by vpuc and simulated with numerics, against
onnxruntime on the same input (``tests/fuzz/onnx_check.py``).

Each case is made from (family, seed, index) alone, so any can be replayed.  Findings
(``wrong``, ``crash``, ``bound``, ``blob``, ``import``) are saved as ``OUT/KIND-FAMILY-INDEX.onnx`` beside a
``.txt`` with what was found; the report counts the outcomes per family and lists the
reasons vpuc refused models (how much of the space the fuzz reaches).

    python bench/onnx_fuzz.py [--op 400] [--cnn 100] [--transformer 50] [--large 20] [--forms 200]
                              [--normred 100] [--more 100] [--rnn 100]
                              [--extra 100] [--gather 100] [--quant 100]
                              [--seed 1] [--out onnx-fuzz]
    python bench/onnx_fuzz.py --replay cnn:12 [--seed 1]       # remake one case and check it
    python bench/onnx_fuzz.py --op 300 --forms 100 --with-ops Pad,Tile,Expand   # those ops' cases

``--with-ops`` checks only the cases with a node of one of the ops named (the counts are then
of those cases, found among the first ``SCAN`` times as many indices).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import onnx  # noqa: E402

from tests.fuzz.onnx_check import check  # noqa: E402
from tests.fuzz.onnx_models import FAMILIES, make  # noqa: E402

FINDINGS = ("wrong", "crash", "bound", "blob", "import")
SCAN = 200          # --with-ops: indices looked at per case wanted


def _reason(detail: str) -> str:
    """A refusal without its file and node names and numbers, to count alike ones together."""
    text = re.sub(r"^.*?: node '[^']*' \(([^,]*),[^)]*\): ", r"\1: ", detail)
    return re.sub(r"-?\d+(\.\d+)?", "N", text)[:140]


def _cases(family: str, count: int, seed: int, ops: set[str] | None):
    """(index, model) of the family's first ``count`` cases with a node of ``ops`` (any case
    when None)."""
    found = 0
    for index in range(count if ops is None else count * SCAN):
        if found == count:
            return
        model = make(family, seed, index)
        if ops is None or ops & {node.op_type for node in model.graph.node}:
            found += 1
            yield index, model


def campaign(counts: dict[str, int], seed: int, out: Path, ops: set[str] | None = None) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    report: dict = {"seed": seed, "outcomes": {}, "findings": [], "refusals": Counter()}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for family, count in counts.items():
            outcomes = Counter()
            for index, model in _cases(family, count, seed, ops):
                outcome = check(model, Path(tmp), seed=index)
                outcomes[outcome.kind] += 1
                if outcome.kind == "refused":
                    report["refusals"][_reason(outcome.detail)] += 1
                elif outcome.kind in FINDINGS:
                    stem = out / f"{outcome.kind}-{family}-{index}"
                    onnx.save(model, f"{stem}.onnx")
                    stem.with_suffix(".txt").write_text(
                        f"{outcome.kind}: {outcome.detail}\npython bench/onnx_fuzz.py --replay "
                        f"{family}:{index} --seed {seed}\n")
                    report["findings"].append(f"{family}:{index} {outcome.kind}: {outcome.detail}")
                    print(f"{family}:{index} {outcome.kind}: {outcome.detail}", flush=True)
            report["outcomes"][family] = dict(outcomes)
    report["seconds"] = round(time.perf_counter() - started, 1)
    report["refusals"] = dict(report["refusals"].most_common())
    (out / "report.json").write_text(json.dumps(report, indent=1) + "\n")
    return report


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for family, default in zip(FAMILIES, (400, 100, 50, 20, 200, 100, 100, 100, 100, 100, 100), strict=True):
        parser.add_argument(f"--{family}", type=int, default=default, metavar="N",
                            help=f"{family} cases (default {default})")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, default=Path("onnx-fuzz"))
    parser.add_argument("--replay", metavar="FAMILY:INDEX", help="remake one case and check it")
    parser.add_argument("--with-ops", metavar="OP,OP", help="only the cases with a node of these ONNX ops")
    args = parser.parse_args(argv)
    if args.replay:
        family, _, index = args.replay.partition(":")
        if family not in FAMILIES or not index.isdigit():
            parser.error(f"--replay {args.replay}: expected FAMILY:INDEX, FAMILY one of {', '.join(FAMILIES)}")
        model = make(family, args.seed, int(index))
        with tempfile.TemporaryDirectory() as tmp:
            outcome = check(model, Path(tmp), seed=int(index))
        onnx.save(model, f"{family}-{index}.onnx")
        print(f"{family}:{index} -> {family}-{index}.onnx: {outcome.kind} {outcome.detail}")
        return 0 if outcome.kind not in FINDINGS else 1
    ops = set(args.with_ops.split(",")) if args.with_ops else None
    report = campaign({f: getattr(args, f) for f in FAMILIES}, args.seed, args.out, ops)
    for family, outcomes in report["outcomes"].items():
        print(f"{family:12} " + "  ".join(f"{k} {v}" for k, v in sorted(outcomes.items())))
    print(f"{len(report['findings'])} findings in {report['seconds']} s; most common refusals:")
    for reason, n in list(report["refusals"].items())[:12]:
        print(f"  {n:5} {reason}")
    return 1 if report["findings"] else 0


if __name__ == "__main__":
    sys.exit(main())
