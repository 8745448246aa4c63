"""The FlatBuffer writer's shared pieces: the builder, vectors and strings written once
and shared, tables through the generated ``Start``/``Add<Field>``/``End`` functions, and
the ``ForceDefaults`` switch (``writer_fb`` explains when it is on).  ``writer_fb`` builds
the blob's tables on top of these.
"""

from __future__ import annotations

from contextlib import contextmanager

from schema.vpu_blob import BarrierReference, KernelDataReference, KeyValue
from vpuc.blob.fb_builder import FastBuilder

DATA_ALIGN = 64


class FbWriterBase:
    def __init__(self, builder=FastBuilder) -> None:
        self.b = builder(1 << 16)
        self._vectors: dict[tuple, int] = {}
        self._shared: dict[tuple, int] = {}
        self.data: list[bytes] = []              # Blob.kernel_data, by index
        self._data_index: dict[bytes, int] = {}

    @contextmanager
    def forced(self):
        """Write every scalar of the tables built inside, defaults included."""
        self.b.ForceDefaults(True)
        try:
            yield
        finally:
            self.b.ForceDefaults(False)

    # --- shared pieces -----------------------------------------------------------

    def string(self, text: str | None) -> int | None:
        return None if text is None else self.b.CreateSharedString(text)

    def scalars(self, code: str, values) -> int | None:
        """A vector of scalars ('I', 'i', 'Q', 'B', '?', 'd'); None stays absent."""
        if values is None:
            return None
        key = (code, tuple(values))
        off = self._vectors.get(key)
        if off is None:
            b = self.b
            width = _WIDTH[code]
            b.StartVector(width, len(values), width)
            prepend = getattr(b, _PREPEND[code])
            for v in reversed(values):
                prepend(v)
            off = self._vectors[key] = b.EndVector()
        return off

    def shared(self, key: tuple, build) -> int:
        """Build a table or vector once per distinct key; FlatBuffers lets many
        fields point at one object, and the reader decodes it once too."""
        off = self._shared.get(key)
        if off is None:
            off = self._shared[key] = build()
        return off

    def offsets(self, offs: list[int]) -> int:
        def build() -> int:
            b = self.b
            b.StartVector(4, len(offs), 4)
            for off in reversed(offs):
                b.PrependUOffsetTRelative(off)
            return b.EndVector()
        return self.shared(("offsets", tuple(offs)), build)

    def aligned_bytes(self, data: bytes) -> int:
        self.b.Prep(DATA_ALIGN, len(data))       # the data, not its length, lands aligned
        return self.b.CreateByteVector(data)

    def data_ref(self, name: str | None, data: bytes, offset: int, size: int) -> int:
        """A KernelDataReference to ``data[offset:offset + size]`` of a shared KernelData."""
        index = self._data_index.get(data)
        if index is None:
            index = self._data_index[data] = len(self.data)
            self.data.append(data)
        def build() -> int:
            name_off = self.string(name)
            b = self.b
            KernelDataReference.Start(b)
            if name_off is not None:
                KernelDataReference.AddName(b, name_off)
            KernelDataReference.AddDataIndex(b, index)
            KernelDataReference.AddOffset(b, offset)
            KernelDataReference.AddSize(b, size)
            return KernelDataReference.End(b)
        return self.shared(("data_ref", name, index, offset, size, self.b.forceDefaults), build)

    def key_values(self, pairs) -> int:
        return self.offsets([self.table(KeyValue, key=self.string(kv.key),
                                        value=self.string(kv.value)) for kv in pairs])

    def barriers(self, waits, updates) -> int:
        def build() -> int:
            w, u = self.scalars("I", waits), self.scalars("I", updates)
            b = self.b
            BarrierReference.Start(b)
            BarrierReference.AddWaitBarriers(b, w)
            BarrierReference.AddUpdateBarriers(b, u)
            return BarrierReference.End(b)
        return self.shared(("barriers", tuple(waits), tuple(updates)), build)

    def table(self, module, **fields) -> int:
        """A table through ``module``'s generated Start/Add<Field>/End, fields in the
        order given; None stays absent, a callable builds an inline struct."""
        b = self.b
        module.Start(b)
        for name, value in fields.items():
            if value is not None:
                getattr(module, "Add" + _camel(name))(b, value(b) if callable(value) else value)
        return module.End(b)

    def number_fields(self, value) -> tuple[int, float, bool]:
        return (value.value, 0.0, True) if value.is_int else (0, value.value, False)


_WIDTH = {"I": 4, "i": 4, "Q": 8, "B": 1, "?": 1, "d": 8}
_PREPEND = {"I": "PrependUint32", "i": "PrependInt32", "Q": "PrependUint64",
            "B": "PrependUint8", "?": "PrependBool", "d": "PrependFloat64"}


def _camel(name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in name.split("_"))
