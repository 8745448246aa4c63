"""vpuc: an NPU blob compiler and cycle-approximate simulator.

The Python API (docs/python-api.md), imported on first use so that ``import
vpuc`` stays cheap:

    vpuc.compile(path_or_text, arch=None, format="fb", ...) -> Program
    vpuc.write_blob(program, format=None, path=None) -> bytes
    vpuc.read_blob(bytes_or_path) -> Program
    vpuc.simulate(program, inputs=None, ...) -> Simulation
"""

__version__ = "0.1.0"

__all__ = ["compile", "write_blob", "read_blob", "simulate", "CompileReport", "Simulation"]


def __getattr__(name: str):
    if name in __all__:
        from vpuc import api
        return getattr(api, name)
    raise AttributeError(f"module 'vpuc' has no attribute {name!r}")
