"""A BERT-style front end (vpuc/onnx_import/zoo_bert.py): int64 token ids, token types and
attention mask as model inputs, word and token-type embeddings gathered at run time, the
position embeddings folded, LayerNorm, one encoder layer with the additive mask.  Compiled,
simulated with numerics, against onnxruntime (on the f16-rounded weights) within a bound
derived from the f16 roundings, and each layer against the f16 graph reference."""

import numpy as np
import pytest

from onnx_testlib import rounded_to_f16
from vpuc import api
from vpuc.onnx_import.zoo_bert import bert_embeddings_encoder

U16 = 2.0 ** -11       # f16's unit roundoff


def _feeds(seq, vocab, padded):
    rng = np.random.default_rng(7)
    mask = np.ones((1, seq), np.int64)
    mask[0, seq - padded:] = 0
    return {"input_ids": rng.integers(-vocab, vocab, (1, seq)).astype(np.int64),
            "token_type_ids": (np.arange(seq) >= seq // 2).astype(np.int64)[None],
            "attention_mask": mask}


@pytest.mark.parametrize("padded, vocab", [(0, 100), (5, 100), (0, 10000)])
def test_bert_front_end_against_onnxruntime(tmp_path, padded, vocab):
    """vocab 10000: the 1.28 MB word-embedding table exceeds the 1 MiB CMX budget and the
    gather reads its rows in DDR (``vpuc/fusion/lower_gather.py``)."""
    import onnxruntime as ort
    seq = 16
    path = bert_embeddings_encoder(seq=seq, vocab=vocab).save(tmp_path / "bert.onnx", "bert")
    feeds = _feeds(seq, vocab, padded)
    program = api.compile(path)
    if vocab > 1000:
        tables = {t.inputs[0].buffer for tl in program.module.task_lists for t in tl.tasks
                  if (getattr(t, "kernel", None) or "").startswith("gather")}
        buffers = {b.name: b for b in program.module.buffers}
        assert any(name in buffers and buffers[name].kind.value != "cmx" and
                   buffers[name].type.dims == (vocab, 64) for name in tables)
    names = program.source_names
    sim = api.simulate(program, {names.get(k, k): v.astype(np.int32) for k, v in feeds.items()},
                       reference=True)
    assert not sim.races
    assert not sim.layer_check.failed            # every layer within its derived bound
    [got] = sim.result.outputs.values()
    session = ort.InferenceSession(rounded_to_f16(path).SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    [want] = session.run(None, feeds)
    # Each layer the per-layer check covers rounds its output to f16 once (relative error u
    # of its magnitude); LayerNorm and Softmax renormalise, so those errors add along the
    # path at most once per layer, each at most u of the largest output magnitude.
    roundings = len(sim.layer_check.layers)
    bound = roundings * U16 * float(np.max(np.abs(want)))
    assert float(np.max(np.abs(got.astype(np.float32) - want))) <= bound


def test_an_out_of_vocabulary_id_names_the_word_embedding_gather(tmp_path, capsys):
    from vpuc.cli import main
    path = bert_embeddings_encoder(seq=8, vocab=50).save(tmp_path / "bert.onnx", "bert")
    feeds = _feeds(8, 50, 0)
    feeds["input_ids"][0, 2] = 50
    args = []
    for name, value in feeds.items():
        np.save(tmp_path / f"{name}.npy", value)
        args += ["--input", f"{name}=@{tmp_path / (name + '.npy')}"]
    assert main(["run", path, *args]) == 1
    err = capsys.readouterr().err
    assert "Gather: index 50 is out of range" in err and "Traceback" not in err
