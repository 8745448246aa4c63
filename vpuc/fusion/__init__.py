"""The fusion pipeline after OpenVINO's Snippets (issue 6).

- ``reference.py``: runs a graph in numpy; the oracle for every stage.
- ``targets/``: target machines (ACT SHAVE, x64) with their limits and marking passes.
- ``tokenizer.py``: greedy tokenization of a graph into subgraphs, every cut explained.
- ``subgraph.py``: the tokenizer's output: subgraph bodies and the condensed graph.
- ``dataflow/``: the data-flow optimizer on subgraph bodies.
- ``lir/``: the Linear IR and ``lower_subgraph`` (docs/lir.md).
- ``controlflow/``, ``prepare/``: its control-flow passes and the generator's preparation passes.
- ``report.py``, ``cli_fuse.py``: ``vpuc fuse`` (text and JSON reports).
"""
