"""The SHAVE ISA in the simulator: semantics (the one definition of every opcode),
the cycle table, window-mapped memory and the exact interpreter."""

from runtime_sim.isa.cycles import CYCLES, Cost, finish, issue
from runtime_sim.isa.interpreter import (LoadedKernel, Program, RunResult, load_kernel, run,
                                         run_kernel)
from runtime_sim.isa.memory import AccessFault, WindowMemory
from runtime_sim.isa.semantics import (NUM_REGISTER_KEYS, SEMANTICS, Access, Semantic,
                                       operand_access, register_key)

__all__ = [
    "CYCLES", "Cost", "finish", "issue", "register_key", "LoadedKernel", "Program", "RunResult",
    "load_kernel", "run", "run_kernel", "AccessFault", "WindowMemory", "NUM_REGISTER_KEYS",
    "SEMANTICS", "Access", "Semantic", "operand_access",
]
