"""Helpers for the generator tests: generate kernels for graphs and check them against numpy."""

from __future__ import annotations

import numpy as np

from fusion_testlib import Builder  # noqa: F401  (re-exported for the tests)
from vpuc.fusion.generator.generate import GeneratedKernel, generate
# Which ops the generated code approximates (documented accuracy, not bit-exact) and FMA
# contraction are defined once, in the library: `vpuc run --reference` uses them too, to
# check generated kernels against the graphs their objects record.
from vpuc.fusion.generator.kernel_graph import APPROXIMATE, approximate, contracted  # noqa: F401
from runtime_sim.isa.cycles_only import data_dependence, invoke_cycles_only
from runtime_sim.isa.interpreter import load_kernel
from runtime_sim.isa.invoke import invocation_memory
from vpuc.fusion.generator.run import KernelRun, prepare, run_kernel
from vpuc.reference.graph import run_graph, run_graph_values
from vpuc.fusion.subgraph import tokenize
from vpuc.fusion.targets import get_target
from vpuc.ir.graph import Graph

SHAVE = get_target("shave")


def same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a, b, equal_nan=True)


def run_both(kernel: GeneratedKernel, inputs: list, shapes: list, **kw) -> KernelRun:
    """Run on the exact interpreter and the fast path; both must agree bit for bit and in cycles."""
    exact = run_kernel(kernel, inputs, shapes, fast=False, **kw)
    fast = run_kernel(kernel, inputs, shapes, fast=True, **kw)
    assert exact.status == 0 and fast.status == 0, (exact.status, fast.status)
    assert exact.cycles == fast.cycles, (exact.cycles, fast.cycles)
    assert np.array_equal(exact.cmx, fast.cmx), "fast path and interpreter left different CMX"
    check_cycles_only(kernel, inputs, shapes, exact, **kw)
    return exact


def check_cycles_only(kernel: GeneratedKernel, inputs: list, shapes: list, full: KernelRun,
                      dynamic_meta: bool = True, skew: int = 0, **_) -> None:
    """A timing-only simulation's cycles-only run of the kernel gives the full run's cycles;
    it may leave the kernel to the full run only when a dynamic operand's dims (in CMX)
    decide them, or the kernel's cycles may depend on data."""
    placed, cmx, image = prepare(kernel, inputs, shapes, dynamic_meta=dynamic_meta, skew=skew)
    scratch = np.zeros_like(cmx)
    got = invoke_cycles_only(kernel.obj, scratch, image.image, image.args_offset,
                             image.args_size)
    if got is None:
        dims_in_cmx = any(p.meta is not None for p in placed)
        assert dims_in_cmx or data_dependence(
            load_kernel(kernel.obj, invocation_memory(kernel.obj, scratch, image.image))
            .program), "the cycles-only run gave up on a kernel its analysis accepts"
        return
    assert (got.cycles, got.scalar_regs[0]) == (full.cycles, full.status)


def check_outputs(expected: list, got: list, approx: bool, rtol=1e-4, atol=1e-5) -> None:
    assert len(expected) == len(got)
    for e, g in zip(expected, got):
        e = np.asarray(e)
        assert e.shape == g.shape and e.dtype == g.dtype, (e.shape, g.shape, e.dtype, g.dtype)
        if approx:
            ef, gf = e.astype(np.float64), g.astype(np.float64)
            ok = np.isclose(gf, ef, rtol=rtol, atol=atol, equal_nan=True)
            assert ok.all(), f"max diff {np.nanmax(np.abs(gf - ef)[~ok])}: {ef[~ok][:4]} vs {gf[~ok][:4]}"
        else:
            assert same(e, g), f"differs: {e.ravel()[:6]} vs {g.ravel()[:6]}"


def to_memory(x: np.ndarray, logical, memory) -> np.ndarray:
    """A logical array in the memory shape the data-flow optimizer gave its port."""
    return np.transpose(np.asarray(x), logical.order.perm).reshape(memory.bound_shape
                                                                   if memory.is_static else -1)


def check_graph(graph: Graph, inputs: dict, both: bool = True, **kw) -> list[GeneratedKernel]:
    """Generate a kernel per subgraph of ``graph``; each must compute, bit for bit, what the
    reference executor computes for its data-flow-optimized body, and what the unfused
    graph computes (bit for bit, or within rounding where an FMA contracted two ops)."""
    kernels = []
    values, _ = run_graph_values(graph, inputs)
    for sub in tokenize(graph, SHAVE).subgraphs:
        kernel = generate(sub.body, sub.name)
        args = [values[p.result] for p in sub.body.parameters]
        ins = {p.result: values[p.result] for p in sub.body.parameters}
        expected = run_graph(sub.body, ins)
        shapes = [e.shape for e in expected]
        run = run_both(kernel, args, shapes, **kw) if both else run_kernel(kernel, args, shapes, **kw)
        opt = kernel.body
        mem_in = {p.result: to_memory(values[p.result], src.type, p.type)
                  for p, src in zip(opt.parameters, sub.body.parameters)}
        if all(p.type.is_static for p in opt.parameters):
            exact = run_graph(opt, mem_in)
            got = [to_memory(o, src.type, r.type) for o, src, r in
                   zip(run.outputs, sub.body.results, opt.results)]
            check_outputs(exact, got, approximate(opt))
        check_outputs(expected, run.outputs, approximate(sub.body) or contracted(opt),
                      rtol=2e-3 if contracted(opt) else 1e-4,
                      atol=1e-3 if contracted(opt) else 1e-5)
        kernels.append(kernel)
    return kernels
