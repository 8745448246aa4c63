"""Attention and RotaryEmbedding (opset 23) decomposed at import into the ops an exported
encoder layer is made of, which the lowering takes as it takes the zoo's encoder
(``zoo.encoder_layer``): Reshape and Transpose into heads, ``MatMul(Q, K^T)``, a scale,
an additive mask, ``Softmax`` over the keys, ``MatMul(P, V)``, the heads merged back.

Attention:

- Q, K, V as ``[B, heads, S, d]`` or as ``[B, S, heads * d]`` with ``q_num_heads`` and
  ``kv_num_heads``; fewer K/V heads than Q heads (grouped-query attention): each K/V
  head read by ``q_heads / kv_heads`` consecutive Q heads, a ``Gather`` of the heads;
- ``scale`` (default ``1/sqrt(d)``) multiplies ``Q K^T`` (ONNX scales Q and K by its root
  each: the same product, rounded differently);
- ``attn_mask`` additive (float) or boolean (true takes part): a masked score gets the
  lowest finite value of the graph's type, which the softmax's exponential takes to 0
  (ONNX's ``-inf`` does the same where a row keeps any key); a mask narrower than the keys
  is padded as masked; ``is_causal`` masks key ``j > i`` for query ``i``; a constant mask
  and the causal one become one constant; a row with every key masked (ONNX: zeros) is
  refused when the mask is a constant (a computed one leaves that row a softmax of its masked scores, not zeros);
- ``softcap`` other than 0, past key/value inputs and the present key/value and
  ``qk_matmul_output`` outputs are refused with the node named.

RotaryEmbedding: ``x1``, ``x2`` the two halves of the first ``rotary_embedding_dim``
features of each head (``interleaved``: the even and odd ones, by stride-2 Slices), then
``x1 cos - x2 sin`` and ``x1 sin + x2 cos`` put back (interleaved: as pairs, a Concat on
a new last axis and a Reshape), the other features after them.  The caches are gathered
by constant ``position_ids`` at import; without them they are ``[B, S, rotary/2]`` values.
"""

from __future__ import annotations

import numpy as np

from vpuc.ir.types import ElemType
from vpuc.onnx_import.builder import GraphBuilder

NUMPY_OF = {ElemType.F16: np.float16, ElemType.F32: np.float32}


def _input(node, i: int) -> str | None:
    return node.input[i] if len(node.input) > i and node.input[i] else None


def _heads(b: GraphBuilder, name: str, heads: int | None, what: str) -> tuple[str, int]:
    """``name`` as ``[B, heads, S, d]``, and its head count."""
    shape = b.shape(name)
    value = b.value(name)
    if len(shape) == 4:
        return value, shape[1]
    if len(shape) != 3:
        raise b.error(f"Attention {what} has rank {len(shape)}; expected 3 or 4")
    if not heads or shape[2] % heads:
        raise b.error(f"Attention {what} of hidden size {shape[2]} needs the num_heads attribute "
                      f"of a 3-D input dividing it; got {heads}")
    split = b.op("Reshape", [value], {"shape": (shape[0], shape[1], heads, shape[2] // heads)})
    return b.op("Transpose", [split], {"order": (0, 2, 1, 3)}), heads


def _mask_bias(b: GraphBuilder, node, attrs, sq: int, skv: int) -> str | None:
    """The additive bias of ``attn_mask`` and ``is_causal``, or None when there is none."""
    lowest = float(np.finfo(NUMPY_OF[b.elem]).min)
    causal = bool(attrs.get("is_causal", 0))
    name = _input(node, 3)
    if name is None and not causal:
        return None
    causal_bias = np.where(np.arange(skv)[None, :] <= np.arange(sq)[:, None], 0.0, lowest) if causal else 0.0
    if name is not None and not b.is_known(name):
        mask = b.value(name)
        if b.shape(name)[-1] != skv:
            raise b.error(f"Attention attn_mask '{name}' has {b.shape(name)[-1]} keys of {skv}: a "
                          "computed mask must cover every key")
        if not b.types[mask].elem.is_float:           # a boolean: true takes part
            mask = b.op("Select", [mask, b.constant(np.float32(0.0), f"{node.output[0]}.kept"),
                                   b.constant(np.float32(lowest), f"{node.output[0]}.masked")])
        if causal:
            mask = b.op("Add", [mask, b.constant(causal_bias.astype(np.float32), f"{node.output[0]}.causal")])
        return mask
    bias = np.zeros((sq, skv), np.float64) + causal_bias
    if name is not None:
        mask = np.asarray(b.array(name))
        wanted = skv - mask.shape[-1]
        if wanted < 0:
            raise b.error(f"Attention attn_mask '{name}' has {mask.shape[-1]} keys of {skv}")
        fill = False if mask.dtype == np.bool_ else -np.inf
        mask = np.pad(mask, [(0, 0)] * (mask.ndim - 1) + [(0, wanted)], constant_values=fill)
        if mask.dtype == np.bool_:
            mask = np.where(mask, 0.0, lowest)
        bias = bias + np.maximum(mask.astype(np.float64), lowest)
    if (bias.max(axis=-1) <= lowest).any():
        raise b.error("Attention masks every key of a query row (ONNX makes that row zeros); "
                      "vpuc does not take it")
    return b.constant(np.maximum(bias, lowest).astype(np.float32), f"{node.output[0]}.mask")


def _attention(b, node, attrs):
    if float(attrs.get("softcap", 0.0)) != 0.0:
        raise b.error(f"Attention softcap={attrs['softcap']} is not supported (only 0: no cap)")
    if _input(node, 4) or _input(node, 5):
        raise b.error("Attention with past_key / past_value (a KV cache) is not supported")
    if any(n for n in node.output[1:]):
        raise b.error("Attention's present_key, present_value and qk_matmul_output outputs are "
                      "not supported; use Y alone")
    attrs.get("qk_matmul_output_mode", 0)           # matters only for the output refused above
    attrs.get("softmax_precision")                  # the softmax computes in f32 whatever it asks
    q_shape = b.shape(node.input[0])
    q, heads = _heads(b, node.input[0], attrs.get("q_num_heads"), "Q")
    k, kv_heads = _heads(b, node.input[1], attrs.get("kv_num_heads"), "K")
    v, v_heads = _heads(b, node.input[2], attrs.get("kv_num_heads"), "V")
    if kv_heads != v_heads or heads % kv_heads:
        raise b.error(f"Attention has {heads} Q heads, {kv_heads} K heads and {v_heads} V heads; "
                      "K and V need one count dividing Q's")
    if kv_heads != heads:                           # grouped-query: repeat each K/V head
        reads = tuple(h // (heads // kv_heads) for h in range(heads))
        k = b.op("Gather", [k], {"axis": 1, "indices": reads})
        v = b.op("Gather", [v], {"axis": 1, "indices": reads})
    d, sq, skv = b.types[q].dims[3], b.types[q].dims[2], b.types[k].dims[2]
    scale = attrs.get("scale")
    scale = 1.0 / np.sqrt(d) if scale is None else float(scale)
    scores = b.op("MatMul", [q, b.op("Transpose", [k], {"order": (0, 1, 3, 2)})])
    scores = b.op("Multiply", [scores, b.constant(np.float32(scale), f"{node.output[0]}.scale")])
    bias = _mask_bias(b, node, attrs, sq, skv)
    if bias is not None:
        scores = b.op("Add", [scores, bias])
    weights = b.op("Softmax", [scores], {"axis": 3})
    if len(q_shape) == 4:
        b.op("MatMul", [weights, v], out=node.output[0])
        return
    y = b.op("Transpose", [b.op("MatMul", [weights, v])], {"order": (0, 2, 1, 3)})
    dv = b.types[v].dims[3]
    b.op("Reshape", [y], {"shape": (q_shape[0], sq, heads * dv)}, out=node.output[0])


def _caches(b: GraphBuilder, node, half: int) -> tuple[str, str]:
    """cos and sin as ``[B, S, half]`` graph values (gathered by constant position ids)."""
    ids = _input(node, 3)
    out = []
    for name, what in ((node.input[1], "cos"), (node.input[2], "sin")):
        if ids is not None:
            positions = np.asarray(b.array(ids)).astype(np.int64)
            if not b.is_known(name):
                raise b.error(f"RotaryEmbedding {what}_cache '{name}' must be a constant when "
                              "position_ids are given")
            cache = np.asarray(b.array(name))
            if positions.min() < 0 or positions.max() >= cache.shape[0]:
                raise b.error(f"RotaryEmbedding position_ids reach {int(positions.max())}; the "
                              f"{what} cache has {cache.shape[0]} positions")
            table = cache[positions]
            value = b.constant(table, f"{node.output[0]}.{what}")
        else:
            value = b.value(name)
        if b.types[value].dims[-1] != half:
            raise b.error(f"RotaryEmbedding {what} cache has {b.types[value].dims[-1]} values per "
                          f"position; rotary_embedding_dim / 2 is {half}")
        out.append(value)
    return out[0], out[1]


def _rotary(b, node, attrs):
    shape = b.shape(node.input[0])
    interleaved = bool(attrs.get("interleaved", 0))
    heads = int(attrs.get("num_heads", 0))
    x = b.value(node.input[0])
    if len(shape) == 3:                       # [B, S, H*d] -> [B, S, H, d]: caches at [B, S, 1, r/2]
        if not heads or shape[2] % heads:
            raise b.error(f"RotaryEmbedding of a 3-D input of hidden size {shape[2]} needs "
                          f"num_heads dividing it; got {heads}")
        x = b.op("Reshape", [x], {"shape": (shape[0], shape[1], heads, shape[2] // heads)})
        head_axis = 2
    elif len(shape) == 4:                     # [B, H, S, d]: caches at [B, 1, S, r/2]
        head_axis = 1
    else:
        raise b.error(f"RotaryEmbedding input has rank {len(shape)}; expected 3 or 4")
    dims = b.types[x].dims
    d = dims[3]
    rotary = int(attrs.get("rotary_embedding_dim", 0)) or d
    if rotary % 2 or rotary > d:
        raise b.error(f"RotaryEmbedding rotary_embedding_dim {rotary} must be even and at most "
                      f"the head size {d}")
    half = rotary // 2
    cos, sin = _caches(b, node, half)
    cache_dims = list(b.types[cos].dims)
    cache_dims.insert(head_axis, 1)
    cos, sin = (b.op("Reshape", [c], {"shape": tuple(cache_dims)}) for c in (cos, sin))

    def part(begin: int, end: int, step: int) -> str:
        return b.op("Slice", [x], {"begin": (0, 0, 0, begin), "end": (dims[0], dims[1], dims[2], end),
                                   "step": (1, 1, 1, step)})
    if interleaved:
        x1, x2 = part(0, rotary, 2), part(1, rotary, 2)
    else:
        x1, x2 = part(0, half, 1), part(half, rotary, 1)
    real = b.op("Subtract", [b.op("Multiply", [x1, cos]), b.op("Multiply", [x2, sin])])
    imag = b.op("Add", [b.op("Multiply", [x1, sin]), b.op("Multiply", [x2, cos])])
    last = len(shape) == 4
    whole = node.output[0] if last and rotary == d else None     # the rotated features are all of it
    if interleaved:
        pairs = [b.op("Reshape", [t], {"shape": tuple(dims[:3]) + (half, 1)}) for t in (real, imag)]
        paired = b.op("Concat", pairs, {"axis": 4})
        rotated = b.op("Reshape", [paired], {"shape": tuple(dims[:3]) + (rotary,)}, out=whole)
    else:
        rotated = b.op("Concat", [real, imag], {"axis": 3}, out=whole)
    if rotary < d:
        rotated = b.op("Concat", [rotated, part(rotary, d, 1)], {"axis": 3},
                       out=node.output[0] if last else None)
    if not last:
        b.op("Reshape", [rotated], {"shape": tuple(shape)}, out=node.output[0])


ATTENTION_CONVERTERS = {"Attention": _attention, "RotaryEmbedding": _rotary}
