"""Which of a node's attributes its converter read: one it never read is refused.

Issue 11: "an unsupported op or attribute is a clear error naming the ONNX node".
A converter reads the attributes it implements through ``AttributeUse`` (a dict
that remembers each key asked for); an attribute the node sets to anything but
its schema default, and that the converter never asked for, would otherwise be
ignored, and the model would compute something else without a word.
"""

from __future__ import annotations

# Attributes that cannot change the result of a node vpuc converts: ``kernel_shape``
# of a Conv is the weights' shape (ONNX shape inference refuses a mismatch); a
# Dropout's ``seed`` and ``ratio`` (an attribute before opset 12) and a
# BatchNormalization's ``momentum`` only matter in training
# (``training_mode`` is refused); MaxPool's ``storage_order`` only lays out its
# Indices output and Resize's ``cubic_coeff_a`` only weighs cubic mode, both refused.
NO_EFFECT = {("Conv", "kernel_shape"), ("ConvTranspose", "kernel_shape"), ("Dropout", "seed"),
             ("Dropout", "ratio"), ("BatchNormalization", "momentum"), ("MaxPool", "storage_order"),
             ("Resize", "cubic_coeff_a")}


class AttributeUse(dict):
    """The node's attributes, remembering which keys were looked at."""

    def __init__(self, values: dict) -> None:
        super().__init__(values)
        self.read: set[str] = set()

    def __getitem__(self, key):
        self.read.add(key)
        return super().__getitem__(key)

    def get(self, key, default=None):
        self.read.add(key)
        return super().get(key, default)

    def __contains__(self, key) -> bool:
        self.read.add(key)
        return super().__contains__(key)


def unread_attributes(node, use: AttributeUse, opset: int) -> list[str]:
    """The attributes of ``node`` set away from their default that its converter never
    read, each as a phrase naming it, its value and the default vpuc implements, if any."""
    from onnx import defs, helper
    try:
        schema = defs.get_schema(node.op_type, opset, node.domain or "")
    except Exception:                  # no schema: every attribute must have been read
        schema = None
    unread = []
    for attr in node.attribute:
        if attr.name in use.read or (node.op_type, attr.name) in NO_EFFECT:
            continue
        value = _shown(helper.get_attribute_value(attr))
        spec = schema.attributes.get(attr.name) if schema is not None else None
        default = spec.default_value if spec is not None and spec.default_value.type else None
        if default is None:
            unread.append(f"attribute {attr.name}={value} is not supported")
        elif helper.get_attribute_value(default) != helper.get_attribute_value(attr):
            unread.append(f"attribute {attr.name}={value} is not supported (vpuc implements only "
                          f"its default, {_shown(helper.get_attribute_value(default))})")
    return unread


def _shown(value) -> str:
    if isinstance(value, bytes):
        return repr(value.decode(errors="replace"))
    return repr(value) if not isinstance(value, (list, tuple)) else "[" + ", ".join(map(str, value)) + "]"
