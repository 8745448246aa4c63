"""vpuc: an NPU blob compiler and cycle-approximate simulator."""

__version__ = "0.1.0"
