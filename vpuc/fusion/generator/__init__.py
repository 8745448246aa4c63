"""The generator: prepared Linear IR to ACT SHAVE kernels (issue 6, part 6).

- ``target_machine.py``: ``TargetMachine``, the op -> emitter table for ACT SHAVE;
- ``emitters/``: the emitters; ``kernel_emitter.py``: prologue, loops, epilogue;
- ``mir.py``: the machine IR they emit; ``context.py``, ``forms.py``, ``values.py``: helpers;
- ``cleanup/``: address-arithmetic clean-ups (simplify, CSE, LICM, strength
  reduction, peepholes) and unroll / schedule;
- ``regalloc.py``: registers for the temporaries;
- ``generate.py``: the driver (``generate(body, name) -> GeneratedKernel``);
- ``contract.py``: the generated argument contract (a ``KernelDecl``);
- ``run.py``: run a generated kernel on numpy arrays; ``profile.py``: cycles per LIR expression.
"""
