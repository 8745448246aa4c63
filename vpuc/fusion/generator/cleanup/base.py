"""The clean-up pass interface and its configuration."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar


@dataclass(frozen=True)
class CleanupConfig:
    unroll: int = 16                # innermost-loop unroll factor (a power of two)
    hoist_vectors: bool = True      # licm may hoist, cse may merge vector values (register
                                    # pressure: the generator's fallbacks turn it off)

    def with_(self, **changes) -> "CleanupConfig":
        return replace(self, **changes)


class MirPass:
    """Base class; ``name`` is kebab-case and matches the file name."""

    name: ClassVar[str] = ""

    def run(self, mir, target, config: CleanupConfig) -> bool:
        raise NotImplementedError(f"{type(self).__name__} must implement run()")
