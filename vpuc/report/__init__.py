"""The HTML report of a run: ``vpuc report DIR -o report.html`` and ``vpuc run --html``.

Reads a report directory (``runtime_sim/layer_report.py`` writes it) and renders one
self-contained HTML file with plotly (``plots.py``); it never imports the compiler.
"""
