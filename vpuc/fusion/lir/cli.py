"""The Linear IR options of ``vpuc fuse``: lower every subgraph and print its LIR.

``--lir`` runs the data-flow optimizer, then ``lower_subgraph`` (the
control-flow and preparation pipelines) on each subgraph body and prints the
final LIR.  ``--lir-passes`` runs chosen passes instead, ``--lir-until`` stops
after one; ``--print-around P`` prints the LIR just before and just after pass
P (what the golden tests of every pass show), ``--print-after-all`` after
every pass.  ``--lir-json control|data`` prints the serialized control flow or
data flow instead of text; ``--lir-timings`` appends the time of each pass.
``--buffer-mode simple`` selects allocate-buffers' non-optimized mode and
``--vec-registers N`` shrinks the vector register file (to watch spills).
"""

from __future__ import annotations

import json
import sys

from vpuc.diagnostics import UsageError
from vpuc.fusion.lir.linear_ir import LinearIR, LoweringConfig
from vpuc.fusion.lir.pipeline import lir_pass_names, lower_subgraph
from vpuc.fusion.lir.printer import print_lir
from vpuc.fusion.lir.serialize import control_flow_json, data_flow_json


def add_lir_arguments(parser) -> None:
    group = parser.add_argument_group("Linear IR (implies --dataflow)")
    group.add_argument("--lir", action="store_true",
                       help="lower each subgraph to the Linear IR and print it")
    group.add_argument("--lir-passes", metavar="P1,P2",
                       help="run these LIR passes instead of the whole pipeline")
    group.add_argument("--lir-until", metavar="PASS", help="stop the LIR pipeline after PASS")
    group.add_argument("--print-around", metavar="PASS",
                       help="print the LIR before and after PASS (runs the pipeline up to it)")
    group.add_argument("--print-after-all", action="store_true",
                       help="print the LIR after every pass")
    group.add_argument("--lir-json", choices=("control", "data"),
                       help="print the serialized control flow or data flow instead of text")
    group.add_argument("--lir-timings", action="store_true", help="print the time of each pass")
    group.add_argument("--buffer-mode", choices=("optimized", "simple"), default="optimized",
                       help="allocate-buffers mode (default: %(default)s)")
    group.add_argument("--vec-registers", type=int, metavar="N",
                       help="allocate from only N vector registers (shows insert-reg-spills)")


def wants_lir(args) -> bool:
    return bool(args.lir or args.lir_passes or args.lir_until or args.print_around
                or args.print_after_all or args.lir_json or args.lir_timings)


def _render(lir: LinearIR, json_kind: str | None) -> str:
    if json_kind == "control":
        return json.dumps(control_flow_json(lir), indent=1) + "\n"
    if json_kind == "data":
        return json.dumps(data_flow_json(lir), indent=1) + "\n"
    return print_lir(lir)


def run_lir_cli(args, tokenizations, target) -> int:
    names = [n.strip() for n in args.lir_passes.split(",") if n.strip()] \
        if args.lir_passes else None
    until = args.lir_until or args.print_around
    passes = lir_pass_names(names, until)
    if args.print_around and args.print_around not in passes:
        raise UsageError(f"--print-around {args.print_around}: the pass is not in the pipeline "
                         "being run")
    config = LoweringConfig(target, buffer_mode=args.buffer_mode)
    if args.vec_registers is not None:
        if args.vec_registers < 1:
            raise UsageError("--vec-registers needs at least 1 register")
        config.registers = config.registers.with_budget(vec=args.vec_registers)
    out = sys.stdout
    json_kind = args.lir_json

    def before(name: str, lir: LinearIR) -> None:
        if name == args.print_around:
            out.write(f"// before {name}\n" + _render(lir, json_kind))

    def after(name: str, lir: LinearIR) -> None:
        if args.print_after_all or name == args.print_around:
            out.write(f"// after {name}\n" + _render(lir, json_kind))

    for tok in tokenizations:
        for sub in tok.subgraphs:
            lir = lower_subgraph(sub.body, target, config, passes, after, before)
            if not args.print_around and not args.print_after_all:
                out.write(_render(lir, json_kind))
            if args.lir_timings:
                total = sum(t for _, t in lir.timings)
                out.write(f"// timings of @{lir.name}: {total * 1e3:.3f} ms\n")
                for name, seconds in lir.timings:
                    out.write(f"//   {name:<38} {seconds * 1e3:8.3f} ms\n")
    return 0

