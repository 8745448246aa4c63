"""The Linear IR: the control-flow-oriented IR of the fusion pipeline (docs/lir.md).

- ``values.py``: integers known at compile time or computed from run-time dims;
- ``expression.py``, ``kinds.py``: expressions, ports, descriptors, connectors, kinds;
- ``loop_info.py``: loop infos and the loop manager;
- ``linear_ir.py``: the container, its helpers and the kernel interface;
- ``builder.py``: a data-flow-optimized subgraph body -> LinearIR;
- ``pipeline.py``: ``lower_subgraph``, the control-flow and preparation passes in
  order (``vpuc/fusion/controlflow``, ``vpuc/fusion/prepare``), timed, with print hooks;
- ``printer.py``, ``serialize.py``: text, JSON control flow (round-trips) and data flow;
- ``registers.py``: register files with the ACT SHAVE ABI's reservations;
- ``contract.py``: what an emitter reads (pointers, loop shifts, run-time values);
- ``interpreter.py``: a numpy interpreter, the executable meaning of the contract;
- ``validate.py``: invariants checked after every pass;
- ``cli.py``: the ``vpuc fuse --lir`` options.
"""
