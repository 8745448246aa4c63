"""Which ACT SHAVE invocations are alike: ``ShaveEngine``'s classes of invocations.

Two invocations of a kernel take the same cycles when their WIN_E images are equal
but for the memrefs' ``dataAddr`` fields (``runtime_sim.engines.shave``'s docstring
says why): an invocation's static key is its kernel and its image with those fields
zeroed, found from the params struct the kernel's declaration lays out.  A timing-only
run charges a class the cycles of its first run (``timing_classes``, ``_cycles_key``);
a run with numerics queues a class's invocations to run together (``class_of``).  An
invocation with a dynamic memref (its dims written at run time) has no static key, nor
has one reading a memref in DDR (its DDR reads are charged per invocation).
"""

from __future__ import annotations

from vpuc.abi.contract import contract_slots
from vpuc.abi.memref import MEMREF_OFFSETS
from vpuc.ir.tasks import SwKernelTask
from vpuc.program import InvocationImage

_DATA_ADDR, _IS_STATIC = MEMREF_OFFSETS["dataAddr"], MEMREF_OFFSETS["isStatic"]


class InvocationClasses:
    """Mixed into ``ShaveEngine`` (its ``program`` and ``bindings``)."""

    def _start_classes(self) -> None:
        self._address_fields: dict[str, tuple[int, ...]] = {}   # kernel -> memref offsets
        self._static_keys: dict[int, tuple] = {}        # id(invocation) -> (it, its key)

    def class_of(self, invocation: InvocationImage) -> tuple | None:
        """What invocations run together share (``_static_key``)."""
        return self._static_key(invocation)

    def _cycles_key(self, invocation: InvocationImage, task: SwKernelTask) -> tuple:
        """What a timing-only invocation's cycles depend on: the kernel and its WIN_E image
        with every memref's ``dataAddr`` zeroed (see the module docstring).  A dynamic
        memref's dims are in CMX, written at run time: such an invocation is only the same
        as itself (its image, tile and bindings)."""
        key = self._static_key(invocation)
        if key is None:
            return (invocation.kernel, invocation.tile, invocation.window_e,
                    id(self.bindings(task)))
        return key

    def _static_key(self, invocation: InvocationImage) -> tuple | None:
        """``_cycles_key`` of an invocation without dynamic memrefs; None for one with
        (remembered per invocation: numerics asks it of each twice)."""
        known = self._static_keys.get(id(invocation))
        if known is not None and known[0] is invocation:
            return known[1]
        key = self._static_key_of(invocation)
        self._static_keys[id(invocation)] = (invocation, key)
        return key

    def _static_key_of(self, invocation: InvocationImage) -> tuple | None:
        at = self._address_fields.get(invocation.kernel)
        if at is None:
            at = self._address_fields[invocation.kernel] = self._memref_offsets(invocation)
        image = invocation.window_e
        aperture = self.program.arch.ddr_aperture
        masked = bytearray(image)
        for offset in at:
            start = invocation.args_offset + offset
            if not int.from_bytes(image[start + _IS_STATIC:start + _IS_STATIC + 4], "little"):
                return None
            address = int.from_bytes(image[start + _DATA_ADDR:start + _DATA_ADDR + 4], "little")
            if address >= aperture:
                return None         # reads DDR: charged by what it reads (ShaveEngine.run)
            masked[start + _DATA_ADDR:start + _DATA_ADDR + 4] = bytes(4)
        return invocation.kernel, bytes(masked)

    def reads_ddr(self, invocation: InvocationImage) -> bool:
        """Whether a memref of the invocation points into the DDR aperture (an input left in
        DDR, ``vpuc/abi/ddr_aperture.py``): read off its image, no task made."""
        at = self._address_fields.get(invocation.kernel)
        if at is None:
            at = self._address_fields[invocation.kernel] = self._memref_offsets(invocation)
        image, aperture = invocation.window_e, self.program.arch.ddr_aperture
        for offset in at:
            start = invocation.args_offset + offset + _DATA_ADDR
            if int.from_bytes(image[start:start + 4], "little") >= aperture:
                return True
        return False

    def timing_classes(self, invocations: list[InvocationImage]) -> list[int | None]:
        """Timing-only: a class number per invocation, equal for invocations with the same
        ``_cycles_key`` (so the same remembered cycles), None for one whose key only the run
        knows (a dynamic memref).  Each distinct image is masked once: the blocks of a layer
        repeat a handful of images thousands of times."""
        by_image: dict[tuple, int | None] = {}
        by_key: dict[tuple, int] = {}
        classes: list[int | None] = []
        for inv in invocations:
            image = (inv.kernel, inv.args_offset, inv.args_size, bytes(inv.window_e))
            number = by_image.get(image, -1)
            if number == -1:
                key = self._static_key(inv)
                number = by_image[image] = (None if key is None
                                            else by_key.setdefault(key, len(by_key)))
            classes.append(number)
        return classes

    def _memref_offsets(self, invocation: InvocationImage) -> tuple[int, ...]:
        """Offsets of the memrefs in the kernel's params struct (empty when its declaration
        does not lay out ``args_size`` bytes: then the whole image is the key)."""
        decl = next((k for k in self.program.module.kernels if k.name == invocation.kernel),
                    None)
        if decl is None:
            return ()
        offsets, offset = [], 0
        for slot in contract_slots(decl):
            if slot.memref:
                offsets.append(offset)
            offset += slot.size
        return tuple(offsets) if offset == invocation.args_size else ()
