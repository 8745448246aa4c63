"""lower-graph for several graph blocks, or graph blocks beside hand-written tasks.

The semantics (docs/vir.md, "Several graph blocks, and graphs beside tasks"):

- A block's **interface** is its Parameters and the values its Results return,
  module-level tensors named like the values.  A Parameter reads a declared
  DDR buffer of its name, else the value an earlier block returns, else a
  network ``input`` of its name (one per name, however many blocks read it).  A
  returned value writes a declared ``output``/``ddr`` buffer of its name, else
  becomes a ``ddr`` buffer when a later block reads it and an ``output`` when
  none does.  Every other name of a block is local to it (``block_names.py``
  puts it under ``GRAPH.``).
- **Blocks run one after another**, in written order: each block's first task
  in every queue waits on a barrier ``%PREVIOUS.done`` that the previous block's
  last task in every queue updates (a queue runs in order, so that is after
  all of the previous block's tasks).  A block's ``waits(...)`` barriers join
  that entry, its ``updates(...)`` barriers that exit.
- **Hand-written tasks** are ordered against blocks by barriers only: a task
  runs after a block if a chain of barriers (and queue order) leads from the
  block's ``updates`` to it, before a block if one leads from it to the
  block's ``waits``.  ``block_order.py`` places every block's tasks in each
  task list accordingly; a task that touches a block's interface tensor
  without such a chain is an error at the task.

Each block is lowered alone (``lower_graph.lower_block``); the merged module
then goes through the usual passes, whose verifier and barrier replay check
the whole program.
"""

from __future__ import annotations

from vpuc.diagnostics import VpucError
from vpuc.fusion.block_names import Namespace
from vpuc.fusion.block_order import Block, place_blocks
from vpuc.fusion.blocked_program import label, sanitize
from vpuc.ir.module import Barrier, Buffer, BufferKind, Module
from vpuc.ir.symbols import SymbolTable
from vpuc.ir.tasks import TaskList
from vpuc.verifier import verify_module
from vpuc.verifier.graph_blocks import result_values


def lower_blocks(module: Module, ctx, lower_block) -> None:
    """Replace every graph block of ``module`` by tasks (see the module docstring);
    ``lower_block(graph, module, ctx, rename)`` lowers one block to a parsed Module."""
    verify_module(module, ctx.arch).raise_if_errors()
    symbols = SymbolTable(module)
    interface = _interface(module, symbols)
    module.buffers += [b for b in interface if b.name not in symbols.buffers]
    taken = {*symbols.buffers, *symbols.views, *symbols.barriers, *(b.name for b in interface)}
    blocks: list[Block] = []
    for k, graph in enumerate(module.graphs):
        names = {op.result for op in graph.parameters} | {
            op.result for op in result_values(graph)}
        space = Namespace(label(sanitize(graph.name)), names)
        lowered = lower_block(graph, module, ctx, space)
        _merge_declarations(module, lowered, names, taken, graph)
        done = None
        if k + 1 < len(module.graphs):
            done = _fresh_barrier(module, f"{space.prefix}.done", taken, graph)
        entry = tuple(graph.waits) + ((blocks[-1].done,) if blocks else ())
        blocks.append(Block(graph, {tl.executor: tl.tasks for tl in lowered.task_lists},
                            entry, tuple(graph.updates) + ((done,) if done else ()), done,
                            reads={op.result for op in graph.parameters},
                            writes={op.result for op in result_values(graph)}))
    lists = place_blocks(module, blocks)
    by_executor = {tl.executor: tl for tl in module.task_lists}
    module.task_lists = [by_executor.get(executor) or TaskList(executor)
                         for executor in lists]
    for task_list in module.task_lists:
        task_list.tasks = lists[task_list.executor]
    module.graphs = []
    module.attributes["graph"] = "lowered"
    # Which tasks the lowering made (labels "BLOCK.*"): rules for lowered programs only
    # (verifier/dpu_channels.py) leave the hand-written ones to their authors.
    module.attributes["graph-blocks"] = ",".join(label(sanitize(b.graph.name)) for b in blocks)


def _interface(module: Module, symbols: SymbolTable) -> list[Buffer]:
    """The module-level buffers of the blocks' interface tensors nobody declared."""
    returned = {v.result: v for g in module.graphs for v in result_values(g)}
    read = {op.result for g in module.graphs for op in g.parameters}
    out: dict[str, Buffer] = {}
    for graph in module.graphs:
        for op in graph.parameters:
            if op.result not in returned and op.result not in symbols.buffers:
                out.setdefault(op.result, Buffer(op.result, BufferKind.INPUT, op.type,
                                                 loc=op.loc))
        for op in result_values(graph):
            kind = BufferKind.DDR if op.result in read else BufferKind.OUTPUT
            out.setdefault(op.result, Buffer(op.result, kind, op.type, loc=op.loc))
    return list(out.values())


def _merge_declarations(module: Module, lowered: Module, interface: set[str],
                        taken: set[str], graph) -> None:
    """Add the lowered block's declarations to ``module``: its own buffers, views,
    barriers and layer lines (the interface buffers are the module's), the kernels it
    needs, its runtime if the module has none."""
    own_runtime = module.runtime is not None and lowered.runtime is not None \
        and module.runtime.kernel != lowered.runtime.kernel
    for kernel in lowered.kernels:
        if own_runtime and kernel.name == lowered.runtime.kernel:
            continue                                 # the module's runtime serves
        same = next((k for k in module.kernels if k.name == kernel.name), None)
        if same is None:
            module.kernels.append(kernel)
        elif same != kernel:
            raise VpucError(f"kernel @{kernel.name} is declared here differently from the "
                            f"kernel of that name graph @{graph.name}'s lowering uses; rename it",
                            same.loc)
    if module.runtime is None:
        module.runtime = lowered.runtime
    for item in [*lowered.buffers, *lowered.views, *lowered.barriers]:
        if item.name in interface:
            continue
        if item.name in taken:
            first = next(x for x in (*module.buffers, *module.views, *module.barriers)
                         if x.name == item.name)
            raise VpucError(f"%{item.name} is a name graph @{graph.name}'s lowering uses (the "
                            f"names of its program start with '{label(sanitize(graph.name))}.'); "
                            "rename it", first.loc)
        taken.add(item.name)
    module.buffers += [b for b in lowered.buffers if b.name not in interface]
    module.views += lowered.views
    module.barriers += lowered.barriers
    keys = {la.key: la for la in module.layers}
    for layer in lowered.layers:
        if layer.key in keys:
            raise VpucError(f'layer "{layer.key}" names the tasks of graph @{graph.name}\'s '
                            "lowering too; rename it", keys[layer.key].loc)
        module.layers.append(layer)


def _fresh_barrier(module: Module, name: str, taken: set[str], graph) -> str:
    if name in taken:
        first = next(x for x in (*module.buffers, *module.views, *module.barriers)
                     if x.name == name)
        raise VpucError(f"%{name} is the barrier that ends graph @{graph.name}; rename it",
                        first.loc)
    taken.add(name)
    module.barriers.append(Barrier(name))
    return name
