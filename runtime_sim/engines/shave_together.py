"""``ShaveEngine.run_together``: deferred invocations of one class run in step.

``runtime_sim.act_defer`` queues ACT tasks whose cycles are known and runs a class's
queued invocations here, through ``invoke.invoke_together``: each invocation runs as
``ShaveEngine.run`` would run it (its bindings, stack, windows; its errors named by its
task), their loops' batches as one (``isa.loop_chunk_many``).
"""

from __future__ import annotations

import time

from runtime_sim.isa.invoke import DEFAULT_STACK_BYTES, invoke_together
from vpuc.diagnostics import VpucError


class RunTogether:
    """Mixed into ``ShaveEngine`` (its bindings, objects, stacks and error helpers)."""

    def run_together(self, items: list[tuple]) -> list[int]:
        """Run the invocations ``items`` ((unit_name, invocation) each, of one class,
        touching disjoint bytes) in step (``invoke_together``); their cycles, in order.
        Errors as ``run``'s, with ``together_index``: which of ``items`` failed."""
        calls = []
        for _, invocation in items:
            task = self._act_task(invocation.task_index)
            obj, entry = self._object(invocation.kernel)
            tile = invocation.tile
            calls.append(dict(obj=obj, cmx=self.memory.cmx(tile), window_e=invocation.window_e,
                              args_offset=invocation.args_offset,
                              args_size=invocation.args_size, entry=entry,
                              arch=self.program.arch,
                              stack_bytes=(self.stacks[tile] if tile < len(self.stacks)
                                           else DEFAULT_STACK_BYTES),
                              bindings=self.bindings(task)))
        clock = time.perf_counter()
        loops: list = []
        try:
            results = invoke_together(calls, loops)
        except VpucError as exc:
            index = getattr(exc, "together_index", 0)
            failure = self._failure(*items[index], exc)
            failure.together_index = index
            raise failure from None
        for index, ((unit_name, invocation), result) in enumerate(zip(items, results)):
            try:
                self._check_status(unit_name, invocation, result)
            except VpucError as exc:        # KernelStatusError
                exc.together_index = index
                raise
        self.seconds += time.perf_counter() - clock
        self.runs += len(items)
        self.together += sum(1 for fast in loops if fast.together)
        return [result.cycles for result in results]
