"""Numpy references shared by the compiler and the simulator.

``graph.py`` runs a graph op by op in numpy (the oracle of the fusion pipeline,
of generated kernels and of ``vpuc run --reference``).  It depends only on the
IR's plain data (``vpuc.ir``), so ``runtime_sim`` may use it without importing
the parser, the passes or the fusion pipeline.
"""
