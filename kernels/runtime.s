// runtime: the ACT SHAVE runtime (management) kernel of a tile.
//   contract: runtime()            no arguments (argsSize = 0)
// On the real NPU37XX this firmware sits on each ACT SHAVE, pulls work items
// from the task queue and calls each kernel's entry with (argsAddr, argsSize).
// In vpuc the simulator's ACT SHAVE engine models that loop itself -- it
// dispatches every SW task straight to its kernel entry point (see
// runtime_sim/isa/invoke.py) -- so the library's runtime kernel only has to be
// real machine code with the right ABI: it returns status 0 and halts.
    .global runtime
    .text
runtime:
    li       s0, 0
    halt
