"""A BERT-style front end as exporters write it (HuggingFace's ``BertModel`` through
``torch.onnx.export``): token ids and an attention mask as int64 model inputs.

    input_ids [1, S] (int64)  -> Gather(word_embeddings [vocab, W])      run-time indices
    position ids 0..S-1       -> Gather(position_embeddings [512, W])    constant: folds
    token_type_ids [1, S]     -> Gather(token_type_embeddings [2, W])    run-time indices
    Add, Add -> LayerNormalization -> the encoder layer(s) of ``zoo.encoder_blocks``
    attention_mask [1, S] (int64 0/1) -> Unsqueeze [1, 1, 1, S] -> Cast float
        -> (1 - m) * -10000 -> added to every head's scores (HuggingFace's
        ``get_extended_attention_mask``; f16 holds -10000)

``bert_embeddings_encoder()`` is the small test model (a vocabulary of 100);
``bert_base_vocab()`` has BERT's 30522-word vocabulary at DeiT-Tiny's width (30522 x 192
f16 = 11.7 MB, far beyond CMX), for bench/schedule_bench.py.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from vpuc.onnx_import.zoo import ModelBuilder, encoder_blocks

MAX_POSITIONS = 512
MASKED = -10000.0          # HuggingFace BERT's additive mask for padded tokens


def bert_embeddings_encoder(seq: int = 16, width: int = 64, heads: int = 2, vocab: int = 100,
                            mlp: int = 4, layers: int = 1, seed: int = 0) -> ModelBuilder:
    m = ModelBuilder(seed)
    ids = m.input("input_ids", [1, seq], TensorProto.INT64)
    types = m.input("token_type_ids", [1, seq], TensorProto.INT64)
    mask = m.input("attention_mask", [1, seq], TensorProto.INT64)
    words = m.node("Gather", [m.weight((vocab, width), 0.5, "word_embeddings"), ids], axis=0)
    positions = m.node("Gather", [m.weight((MAX_POSITIONS, width), 0.5, "position_embeddings"),
                                  m.init(np.arange(seq, dtype=np.int64)[None], "position_ids")],
                       axis=0)
    kinds = m.node("Gather", [m.weight((2, width), 0.5, "token_type_embeddings"), types], axis=0)
    x = m.node("Add", [m.node("Add", [words, positions]), kinds])
    x = m.node("LayerNormalization", [x, m.weight((width,), 0.1, "emb_ln_g"),
                                      m.weight((width,), 0.02, "emb_ln_b")], axis=-1, epsilon=1e-12)
    wide = m.node("Unsqueeze", [mask, m.init(np.asarray([1, 2], np.int64), "mask_axes")])
    wide = m.node("Cast", [wide], to=TensorProto.FLOAT)
    wide = m.node("Sub", [m.init(np.asarray(1.0, np.float32), "one"), wide])
    additive = m.node("Mul", [wide, m.init(np.asarray(MASKED, np.float32), "masked")])
    m.output(encoder_blocks(m, x, seq, width, heads, mlp, layers, mask=additive))
    return m


def bert_base_vocab(seq: int = 128, seed: int = 0) -> ModelBuilder:
    """BERT's vocabulary (30522 words) at width 192, 3 heads: the bench's BERT front end."""
    return bert_embeddings_encoder(seq=seq, width=192, heads=3, vocab=30522, seed=seed)
