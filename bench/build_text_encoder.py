"""Build a MiniLM-sized BERT encoder (6 layers, hidden 384, 12 heads, FFN 1536) as ONNX, for the tuning bench.

The same module kind as ``tests/fixtures/text_encoder.onnx`` (``scripts/build_fixtures.py``: post-LN encoder
layers, inputs ``input_ids``/``attention_mask``, outputs ``last_hidden_state``/``pooled``, opset 12), at the
size of sentence-transformers' all-MiniLM-L6-v2. Weights are random with a fixed seed (BERT's N(0, 0.02)
init), or, with ``--safetensors``, read from a BERT ``model.safetensors`` of that shape (parsed with numpy:
nothing from the weight file is executed). Needs torch (CPU wheel) and onnx, like ``build_fixtures.py``; the
app does not::

    /tmp/torchvenv/bin/python bench/build_text_encoder.py OUT.onnx [--safetensors model.safetensors]
"""

from __future__ import annotations

import argparse
import json
import struct
import sys
from pathlib import Path

import numpy as np
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
from build_fixtures import IR_VERSION, TextEncoder, _export

VOCAB, D, HEADS, FFN, LAYERS, MAX_LEN = 30522, 384, 12, 1536, 6, 512


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """The float32 tensors of a .safetensors file (an 8-byte header length, a JSON header, raw data)."""
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        if meta["dtype"] != "F32":
            continue  # e.g. position_ids (I64): not a weight
        a, b = meta["data_offsets"]
        out[name] = np.frombuffer(raw[8 + n + a:8 + n + b], dtype=np.float32).reshape(meta["shape"])
    return out


def load_bert(model: TextEncoder, weights: dict[str, np.ndarray]) -> None:
    """Copy BertModel weights (names with or without a ``bert.`` prefix) into ``model``."""
    w = {k.removeprefix("bert."): torch.from_numpy(v.copy()) for k, v in weights.items()}
    sd = {"tok.weight": w["embeddings.word_embeddings.weight"],
          # segment 0 everywhere: its embedding is added to every position
          "pos.weight": w["embeddings.position_embeddings.weight"] + w["embeddings.token_type_embeddings.weight"][0],
          "ln.weight": w["embeddings.LayerNorm.weight"], "ln.bias": w["embeddings.LayerNorm.bias"]}
    for i in range(LAYERS):
        p = f"encoder.layer.{i}."
        for ours, theirs in (("q", "attention.self.query"), ("k", "attention.self.key"), ("v", "attention.self.value"),
                             ("o", "attention.output.dense"), ("ff1", "intermediate.dense"), ("ff2", "output.dense"),
                             ("ln1", "attention.output.LayerNorm"), ("ln2", "output.LayerNorm")):
            sd[f"layers.{i}.{ours}.weight"], sd[f"layers.{i}.{ours}.bias"] = w[p + theirs + ".weight"], \
                w[p + theirs + ".bias"]
    model.load_state_dict(sd)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--safetensors", help="BERT weights (6 layers, hidden 384) instead of random ones.")
    args = ap.parse_args()
    torch.manual_seed(0)
    model = TextEncoder(vocab=VOCAB, d=D, heads=HEADS, ffn=FFN, layers=LAYERS, max_len=MAX_LEN)
    for m in model.modules():
        if isinstance(m, nn.LayerNorm):
            m.eps = 1e-12
        elif isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)
            if isinstance(m, nn.Linear):
                nn.init.zeros_(m.bias)
    if args.safetensors:
        load_bert(model, read_safetensors(Path(args.safetensors)))
    ids = torch.randint(0, VOCAB, (2, 16), dtype=torch.int64)
    mask = torch.ones(2, 16, dtype=torch.int64)
    onnx_model = _export(model, (ids, mask), Path(args.out), opset=12, input_names=["input_ids", "attention_mask"],
                         output_names=["last_hidden_state", "pooled"],
                         dynamic_axes={"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"},
                                       "last_hidden_state": {0: "batch", 1: "seq"}, "pooled": {0: "batch"}})
    onnx_model.ir_version = IR_VERSION
    import onnx

    onnx.save_model(onnx_model, args.out)
    print(f"{args.out}: {Path(args.out).stat().st_size:,} bytes, {'real' if args.safetensors else 'random'} weights")


if __name__ == "__main__":
    main()
