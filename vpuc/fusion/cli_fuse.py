"""``vpuc fuse FILE.vir``: tokenize the graphs of a file and explain every cut.

Prints, per graph, which ops went into which subgraph, the ops left out and
why, and every boundary of the condensed graph with the decision that made it.
``--json`` gives the same for machines; ``--bodies`` prints the subgraph bodies
as a VIR module instead (what the Linear IR receives), after the data-flow
optimizer with ``--dataflow`` (or the passes of ``--passes``).
"""

from __future__ import annotations

import json
import sys

from vpuc.diagnostics import DiagnosticBag, UsageError, VpucError
from vpuc.fusion.dataflow import DataflowContext, pipeline_names, run_dataflow
from vpuc.fusion.dataflow.layout import PortLayout
from vpuc.fusion.lir.cli import add_lir_arguments, run_lir_cli, wants_lir
from vpuc.fusion.report import as_json, as_text, target_json
from vpuc.fusion.subgraph import tokenize
from vpuc.fusion.targets import TARGET_NAMES, get_target
from vpuc.ir.module import Module
from vpuc.verifier.graph import check_graphs
from vpuc.vir.parser import parse_file
from vpuc.vir.printer import print_graph, print_module


def add_fuse_parser(subparsers) -> None:
    fuse = subparsers.add_parser(
        "fuse", help="tokenize a graph into fused subgraphs and explain every cut",
        description="Tokenize the graph blocks of FILE for a target machine and print which ops "
                    "went into which subgraph and, at every boundary, why it was cut.")
    fuse.add_argument("file", metavar="FILE", help="a .vir file with graph blocks, or an ONNX model")
    from vpuc.onnx_import.cli_import import add_onnx_options
    add_onnx_options(fuse)
    fuse.add_argument("--target", choices=TARGET_NAMES, default="shave",
                      help="the target machine whose limits apply (default: %(default)s)")
    fuse.add_argument("--graph", metavar="NAME", help="only this graph (default: every graph)")
    fuse.add_argument("--json", action="store_true", help="print the report as JSON")
    fuse.add_argument("--bodies", action="store_true",
                      help="print the subgraph bodies as a VIR module instead of the report")
    fuse.add_argument("--dataflow", action="store_true",
                      help="run the target's data-flow pipeline on each body and print the "
                           "bodies (implies --bodies)")
    fuse.add_argument("--passes", metavar="P1,P2",
                      help="run these data-flow passes instead of the target's pipeline "
                           "(implies --dataflow)")
    fuse.add_argument("--layout", action="append", default=[], metavar="VALUE=LAYOUT",
                      help="the layout of an input for canonicalization, e.g. %%x=NCHW16c "
                           "(repeatable; default: planar in the value's dims order)")
    add_lir_arguments(fuse)
    fuse.set_defaults(handler=cmd_fuse)


def _layouts(specs: list[str]) -> dict[str, PortLayout]:
    layouts = {}
    for spec in specs:
        name, sep, text = spec.partition("=")
        if not sep:
            raise UsageError(f"--layout {spec}: expected VALUE=LAYOUT, as in %x=NCHW16c")
        try:
            layouts[name.strip().lstrip("%")] = PortLayout.parse(text)
        except ValueError as exc:
            raise UsageError(f"--layout {spec}: {exc}") from None
    return layouts


def cmd_fuse(args) -> int:
    target = get_target(args.target)
    layouts = _layouts(args.layout)
    names = [n.strip() for n in args.passes.split(",") if n.strip()] if args.passes else None
    dataflow = args.dataflow or args.passes is not None or wants_lir(args)
    passes = pipeline_names(target, names) if dataflow else []
    from vpuc.onnx_import.cli_import import onnx_arguments
    onnx = onnx_arguments(args)
    if onnx:
        from vpuc.onnx_import.source import onnx_as_vir
        from vpuc.vir.parser import parse_text
        module = parse_text(*onnx_as_vir(args.file, onnx["input_shapes"], onnx["precision"])[:2])
    else:
        module = parse_file(args.file)
    bag = DiagnosticBag()
    check_graphs(module, bag)
    bag.raise_if_errors()
    graphs = [g for g in module.graphs if args.graph in (None, g.name)]
    if not graphs:
        what = f"no graph @{args.graph}" if args.graph else "no graph block"
        raise VpucError(f"{args.file}: {what}; vpuc fuse tokenizes graph-level VIR "
                        "(docs/vir.md, Graphs)")
    known = {op.result for g in graphs for op in g.ops}
    for name in layouts:
        if name not in known:
            raise UsageError(f"--layout %{name}: no such value in the graph")
    tokenizations = [tokenize(g, target) for g in graphs]
    bodies = [sub.body for tok in tokenizations for sub in tok.subgraphs]
    for body in bodies:
        run_dataflow(body, DataflowContext(target, layouts), passes)
    if wants_lir(args):
        return run_lir_cli(args, tokenizations, target)
    if args.bodies or dataflow:
        if args.json:
            data = {sub.body.name: "\n".join(print_graph(sub.body)) + "\n"
                    for tok in tokenizations for sub in tok.subgraphs}
            sys.stdout.write(json.dumps({"bodies": data}, indent=2) + "\n")
        else:
            sys.stdout.write(print_module(Module(module.name, module.arch, graphs=bodies)))
        return 0
    if args.json:
        report = {"target": target_json(target), "graphs": [as_json(t) for t in tokenizations]}
        sys.stdout.write(json.dumps(report, indent=2) + "\n")
    else:
        sys.stdout.write("\n".join(as_text(t) for t in tokenizations))
    return 0
