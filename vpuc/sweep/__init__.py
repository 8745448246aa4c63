"""``vpuc sweep``: design-space sweeps over architectures x models x compile options on Dask
(docs/sweep.md)."""
