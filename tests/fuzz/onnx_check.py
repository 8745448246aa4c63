"""One case of the differential fuzz: an ONNX model through ``vpuc.compile`` and the
simulator with numerics, against onnxruntime on the same f16-valued input and with the
same f16-rounded weights.

Outcomes:

- ``ok``: the outputs agree within the whole-model tolerance of docs/onnx-import.md
  (cosine similarity >= 0.999 and max |diff| <= 1% of the output's range, or of its
  magnitude when that is larger: an output of one constant has no range), and the
  simulated cycles are at least the schedule-free lower bound;
- ``refused``: vpuc says why it cannot take the model (a ``VpucError``): allowed,
  unless the error is located in the program lower-graph wrote (``<lower-graph ...>``:
  a lowering that broke the verifier's rules is vpuc's bug, counted as ``crash``);
- ``wrong``: another shape, a NaN or inf, or outside the tolerance;
- ``disputed``: outside the tolerance of onnxruntime but within that of ONNX's own
  reference evaluator (the spec's executable definition).  Nearest Resize at a
  rounding tie is one: x_original = 3.0 exactly in real arithmetic, and onnxruntime's
  float32 arithmetic floors it to 2;
- ``bound``: fewer simulated cycles than the lower bound, which no schedule can do;
- ``blob``: the program written as a FlatBuffer or ELF blob and read back does not run
  to the same outputs (bit for bit: one program, one input) and cycles;
- ``import``: the module ``vpuc import`` writes (VIR text and its consts folder), compiled,
  makes another blob than compiling the ONNX model directly (but for the names of the
  source and of the constants' files, which differ by design, and for the outputs of size
  0, which VIR text cannot hold; skipped with ``round_trip=False``);
- ``crash``: any other exception (an internal error);
- ``invalid``: ONNX's checker or onnxruntime refuses the model the generator made.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx

from tests.fuzz.onnx_gather import extra_feeds
from tests.onnx_import.onnx_testlib import rounded_to_f16
from vpuc.diagnostics import LOWERED_SOURCE
from vpuc.onnx_import.model import deprecated_but_run

COSINE = 0.999
RANGE_SHARE = 0.01


@dataclass
class Outcome:
    kind: str
    detail: str = ""
    cycles: float = 0.0


def check(model: onnx.ModelProto, workdir: Path, seed: int = 0, round_trip: bool = True) -> Outcome:
    import onnxruntime as ort
    from runtime_sim.bound_input import program_bound
    from vpuc import api
    from vpuc.diagnostics import VpucError
    try:
        model = onnx.shape_inference.infer_shapes(model, strict_mode=True)
        onnx.checker.check_model(model)
    except Exception as exc:
        if not deprecated_but_run(str(exc).strip()):      # as vpuc's import takes it
            return Outcome("invalid", str(exc).splitlines()[0][:200])
    path = workdir / "case.onnx"
    onnx.save(model, path)
    # onnxruntime computes with the weights vpuc computes with: every float constant rounded
    # to f16, as the import does (docs/onnx-import.md, "Precision"), so a small output of
    # large cancelling terms is not charged the weights' rounding (resize scales are sizes
    # or powers of two here, exact in f16)
    weights16 = rounded_to_f16(_copy(model))
    rounded = workdir / "case.f16.onnx"
    onnx.save(weights16, rounded)
    dims = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    x = np.random.default_rng(seed).standard_normal(dims).astype(np.float16)
    extra = extra_feeds(model, seed)        # integer and bool inputs besides x (onnx_gather)
    feeds = {"x": x, **extra}
    try:
        options = ort.SessionOptions()
        options.log_severity_level = 3
        want = ort.InferenceSession(str(rounded), options, providers=["CPUExecutionProvider"]).run(
            None, {"x": x.astype(np.float32), **extra})[0]
    except Exception as exc:
        return Outcome("invalid", f"onnxruntime: {str(exc).splitlines()[0][:200]}")
    try:
        program = api.compile(path)
        sim = api.simulate(program, feeds)
        got = next(iter(sim.outputs.values())).astype(np.float32)
        bound = program_bound(sim.result.plan, sim.result.timeline).cycles
        # bit for bit: the read-back plan is the in-memory one field for field
        # (runtime_sim/plan_columns.py), so the same numpy calls run in the same order on
        # one machine with one BLAS thread (vpuc.perf.single_threaded_blas)
        for fmt in ("fb", "elf"):
            again = api.simulate(api.read_blob(api.write_blob(program, fmt)), feeds)
            same = all(np.array_equal(a, b, equal_nan=True)
                       for a, b in zip(sim.outputs.values(), again.outputs.values()))
            if not same or again.cycles != sim.cycles:
                return Outcome("blob", f"{fmt}: outputs {'equal' if same else 'differ'}, "
                                       f"cycles {again.cycles:,.0f} against {sim.cycles:,.0f}")
    except VpucError as exc:
        text = str(exc).splitlines()[0]
        return Outcome("crash" if text.startswith(LOWERED_SOURCE) else "refused", text)
    except Exception as exc:                      # noqa: BLE001 - what the fuzz looks for
        return Outcome("crash", f"{type(exc).__name__}: {exc}"[:300])
    if got.shape != want.shape:
        return Outcome("wrong", f"shape {got.shape}, onnxruntime {want.shape}")
    if not np.isfinite(got).all():
        return Outcome("wrong", f"{int((~np.isfinite(got)).sum())} values not finite")
    differ = _differs(got, want)
    if differ:
        from onnx.reference import ReferenceEvaluator
        try:
            spec = ReferenceEvaluator(weights16).run(None, {"x": x.astype(np.float32), **extra})[0]
        except Exception as exc:                  # noqa: BLE001 - a mode it does not know
            return Outcome("wrong", f"{differ}; the ONNX reference cannot say "
                                    f"({type(exc).__name__}: {str(exc).splitlines()[0][:100]})")
        if spec.shape == got.shape and not _differs(got, spec):
            return Outcome("disputed", f"onnxruntime: {differ}; the ONNX reference agrees")
        return Outcome("wrong", differ)
    if bound > sim.cycles * (1 + 1e-9):
        return Outcome("bound", f"{sim.cycles:,.0f} cycles under the bound {bound:,.0f}", sim.cycles)
    if not round_trip:                            # a second compile: left to campaigns
        return Outcome("ok", cycles=sim.cycles)
    try:
        printed = api.compile(_imported(path, workdir / "import"))
    except Exception as exc:                      # noqa: BLE001 - the direct compile took it
        return Outcome("import", f"{type(exc).__name__}: {str(exc).splitlines()[0]}"[:300])
    if _named_alike(printed) != _named_alike(program):
        return Outcome("import", "the module vpuc import writes compiles to another blob")
    return Outcome("ok", cycles=sim.cycles)


def _imported(path: Path, folder: Path) -> Path:
    """What ``vpuc import`` writes for ``path``: the VIR module, its constants in a folder
    beside it."""
    from vpuc.onnx_import import import_onnx, write_import
    vir = folder / "case.vir"
    write_import(import_onnx(path), vir)
    return vir


def _named_alike(program) -> bytes:
    """The program's blob with the source's name and every constant file's path replaced
    by one spelling (the module imported in memory names its constants ``mem:...``, the
    printed one names files in its consts folder); the constants' bytes stay."""
    from dataclasses import replace

    from vpuc import api
    module = program.module
    buffers = [replace(b, init=replace(b.init, path=f"const:{b.name}"))
               if b.init is not None and b.init.path is not None else b for b in module.buffers]
    # and without the outputs of size 0: VIR has no tensor of size 0, so the module vpuc
    # import writes leaves them out (docs/onnx-import.md, "Empty values")
    alike = replace(program, module=replace(module, buffers=buffers),
                    provenance={**program.provenance, "source": ""}, empty_outputs={})
    return api.write_blob(alike, "fb")


def _copy(model: onnx.ModelProto) -> onnx.ModelProto:
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    return copy


def _differs(got: np.ndarray, want: np.ndarray) -> str:
    """Why ``got`` is outside the whole-model tolerance of ``want``; "" when it is within."""
    if not want.size:
        return ""
    want = want.astype(np.float64)       # an int8 output's range overflows int8
    # the range, or the magnitude of an output that is constant (a softmax over one element)
    span = float(max(want.max() - want.min(), np.abs(want).max()))
    error = float(np.abs(got - want).max())
    norms = float(np.linalg.norm(got) * np.linalg.norm(want))
    cosine = float(got.ravel() @ want.ravel()) / norms if norms else 1.0
    if error > RANGE_SHARE * max(span, 1e-3) or (norms and cosine < COSINE):
        return f"max |diff| {error:.4g} of range {span:.4g}, cosine {cosine:.6f}"
    return ""
