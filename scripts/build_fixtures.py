"""Rebuild the third-party-like ONNX fixtures in ``tests/fixtures/`` (see tests/fixtures/README.md).

Needs torch (CPU wheel) and onnx; the app and the tests do not. Run it with an interpreter that has both::

    python3 -m venv /tmp/torchvenv
    /tmp/torchvenv/bin/pip install --index-url https://download.pytorch.org/whl/cpu torch==2.13.0
    /tmp/torchvenv/bin/pip install onnx==1.23.2 numpy
    /tmp/torchvenv/bin/python scripts/build_fixtures.py

Every model is exported with torch's TorchScript exporter (``dynamo=False``) from randomly initialised modules
with fixed seeds, then post-processed with ``onnx`` the way third-party exporters leave models (weights moved
into Constant nodes like Paddle2ONNX or Silero's exports, IR version pinned to 8 so any ONNX Runtime reads them).
"""

from __future__ import annotations

import io
import sys
from pathlib import Path

import numpy as np
import onnx
import torch
from onnx import helper
from torch import nn

OUT = Path(__file__).resolve().parent.parent / "tests" / "fixtures"
IR_VERSION = 8


def _export(module: nn.Module, args: tuple, path: Path, *, opset: int, input_names, output_names,
            dynamic_axes=None, constant_folding: bool = True) -> onnx.ModelProto:
    module.eval()
    buf = io.BytesIO()
    torch.onnx.export(module, args, buf, opset_version=opset, input_names=input_names, output_names=output_names,
                      dynamic_axes=dynamic_axes or {}, do_constant_folding=constant_folding, dynamo=False)
    model = onnx.load_model_from_string(buf.getvalue())
    model.ir_version = IR_VERSION
    model.producer_name, model.producer_version = "ortlab-fixtures", "1"
    return model


def _save(model: onnx.ModelProto, name: str) -> None:
    onnx.checker.check_model(model, full_check=True)
    path = OUT / name
    onnx.save_model(model, str(path))
    print(f"{name}: {path.stat().st_size:,} bytes, {len(model.graph.node)} top-level nodes")


def initializers_to_constants(graph: onnx.GraphProto) -> None:
    """Move every float initializer of ``graph`` into a Constant node (as Paddle2ONNX/Silero exports hold weights)."""
    keep, nodes = [], []
    for t in graph.initializer:
        if t.data_type in (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16) and len(t.dims) >= 1:
            nodes.append(helper.make_node("Constant", [], [t.name], name=f"const_{t.name}", value=t))
        else:
            keep.append(t)
    inputs_to_drop = {n.output[0] for n in nodes}
    kept_inputs = [i for i in graph.input if i.name not in inputs_to_drop]
    del graph.input[:]
    graph.input.extend(kept_inputs)
    del graph.initializer[:]
    graph.initializer.extend(keep)
    body = list(graph.node)
    del graph.node[:]
    graph.node.extend(nodes + body)


# -- 1. a small text-embedding transformer (BERT-like), opset 12 ----------------------------------------------


class _Layer(nn.Module):
    def __init__(self, d: int, heads: int, ffn: int) -> None:
        super().__init__()
        self.heads, self.dh = heads, d // heads
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.ff1, self.ff2 = nn.Linear(d, ffn), nn.Linear(ffn, d)

    def forward(self, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        split = lambda t: t.view(b, s, self.heads, self.dh).transpose(1, 2)
        q, k, v = split(self.q(x)), split(self.k(x)), split(self.v(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) / (self.dh ** 0.5) + bias
        ctx = torch.matmul(torch.softmax(scores, dim=-1), v).transpose(1, 2).reshape(b, s, d)
        x = self.ln1(x + self.o(ctx))
        return self.ln2(x + self.ff2(nn.functional.gelu(self.ff1(x))))


class TextEncoder(nn.Module):
    def __init__(self, vocab: int = 1000, d: int = 64, heads: int = 4, ffn: int = 128, layers: int = 2,
                 max_len: int = 128) -> None:
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(max_len, d)
        self.ln = nn.LayerNorm(d)
        self.layers = nn.ModuleList(_Layer(d, heads, ffn) for _ in range(layers))

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor):
        pos = torch.arange(input_ids.shape[1], device=input_ids.device).unsqueeze(0)
        x = self.ln(self.tok(input_ids) + self.pos(pos))
        bias = (1.0 - attention_mask[:, None, None, :].to(torch.float32)) * -10000.0
        for layer in self.layers:
            x = layer(x, bias)
        mask = attention_mask.unsqueeze(-1).to(torch.float32)
        pooled = (x * mask).sum(1) / mask.sum(1).clamp(min=1.0)
        return x, pooled


def build_text_encoder() -> None:
    torch.manual_seed(0)
    ids = torch.randint(0, 1000, (2, 16), dtype=torch.int64)
    mask = torch.ones(2, 16, dtype=torch.int64)
    model = _export(TextEncoder(), (ids, mask), OUT / "text_encoder.onnx", opset=12,
                    input_names=["input_ids", "attention_mask"], output_names=["last_hidden_state", "pooled"],
                    dynamic_axes={"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"},
                                  "last_hidden_state": {0: "batch", 1: "seq"}, "pooled": {0: "batch"}})
    _save(model, "text_encoder.onnx")


# -- 2. a DB-style dense-map text detector (Paddle-like), opset 11, Constant-node weights ---------------------


def _cbr(cin: int, cout: int, stride: int = 1) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU())


class DBDetector(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.s1, self.s2, self.s3 = _cbr(3, 8, 2), _cbr(8, 16, 2), _cbr(16, 32, 2)
        self.l3, self.l2 = nn.Conv2d(32, 16, 1), nn.Conv2d(16, 16, 1)
        self.head = nn.Sequential(_cbr(16, 8), nn.ConvTranspose2d(8, 8, 2, 2), nn.BatchNorm2d(8), nn.ReLU(),
                                  nn.ConvTranspose2d(8, 1, 2, 2))
        for m in self.modules():  # non-trivial BatchNorm statistics
            if isinstance(m, nn.BatchNorm2d):
                nn.init.uniform_(m.weight, 0.5, 1.5)
                nn.init.uniform_(m.bias, -0.2, 0.2)
                m.running_mean.uniform_(-0.1, 0.1)
                m.running_var.uniform_(0.5, 1.5)

    # fp16 of the measured PP-OCRv4 detector broke its map (SQNR -18 dB): float16 keeps 11 bits, so large constants
    # that nearly cancel lose their difference. The same arithmetic in small: the head's logits (× 30, so they spread
    # around the 0.3 threshold on photos) pass two large offsets 2.95 apart in float32 that round to 3000 and 3004 in
    # float16, so the float16 model's logits all drop by another 1.05 and many map elements cross the threshold.
    # int8 cannot hold the offset activations either (their range must include 0): static int8 breaks too.
    GAIN, OFFSETS = 30.0, (3000.3, 3003.25)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        c2 = self.s2(self.s1(x))
        c3 = self.s3(c2)
        p = self.l2(c2) + nn.functional.interpolate(self.l3(c3), scale_factor=2.0, mode="nearest")
        return torch.sigmoid((self.head(p) * self.GAIN + self.OFFSETS[0]) - self.OFFSETS[1])


def build_db_detector() -> None:
    torch.manual_seed(1)
    x = torch.rand(1, 3, 64, 96)
    model = _export(DBDetector(), (x,), OUT / "db_detector.onnx", opset=11, input_names=["x"],
                    output_names=["maps"], constant_folding=False,
                    dynamic_axes={"x": {0: "batch", 2: "height", 3: "width"},
                                  "maps": {0: "batch", 2: "height", 3: "width"}})
    initializers_to_constants(model.graph)
    _save(model, "db_detector.onnx")


# -- 3. a YOLO-style detector: [1,3,640,640] → [1, 8400, 4+1+classes], opset 12 --------------------------------


class YoloLike(nn.Module):
    def __init__(self, classes: int = 3) -> None:
        super().__init__()
        self.no = 5 + classes
        self.stem = nn.Sequential(_cbr(3, 8, 2), _cbr(8, 8, 2), _cbr(8, 16, 2))           # /8
        self.d16, self.d32 = _cbr(16, 16, 2), _cbr(16, 16, 2)
        self.heads = nn.ModuleList(nn.Conv2d(16, self.no, 1) for _ in range(3))
        self.strides = (8, 16, 32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p8 = self.stem(x)
        p16 = self.d16(p8)
        p32 = self.d32(p16)
        outs = []
        for feat, head, stride in zip((p8, p16, p32), self.heads, self.strides):
            y = head(feat)
            b, _, h, w = y.shape
            y = y.view(b, self.no, h * w).permute(0, 2, 1).sigmoid()
            gy, gx = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
            grid = torch.stack((gx, gy), -1).view(1, h * w, 2).to(y.dtype)
            xy = (y[..., 0:2] * 2 - 0.5 + grid) * stride
            wh = (y[..., 2:4] * 2) ** 2 * stride * 4
            outs.append(torch.cat((xy, wh, y[..., 4:]), -1))
        return torch.cat(outs, 1)


def build_yolo() -> None:
    torch.manual_seed(2)
    x = torch.rand(1, 3, 640, 640)
    model = _export(YoloLike(), (x,), OUT / "yolo_detector.onnx", opset=12, input_names=["images"],
                    output_names=["output0"])
    _save(model, "yolo_detector.onnx")


# -- 4. a voice-activity RNN with state [layers, batch, hidden] and an If on the sample rate ------------------


class VadCore(nn.Module):
    def __init__(self, frame: int = 256, hidden: int = 32) -> None:
        super().__init__()
        self.enc16 = nn.Sequential(nn.Linear(frame, 64), nn.ReLU(), nn.Linear(64, hidden))
        self.enc8 = nn.Sequential(nn.Linear(frame // 2, 64), nn.ReLU(), nn.Linear(64, hidden))
        self.rnn = nn.GRU(hidden, hidden, num_layers=2)
        self.out = nn.Linear(hidden, 1)

    def forward(self, x: torch.Tensor, state: torch.Tensor, sr: torch.Tensor):
        if bool(sr == 16000):
            feat = self.enc16(x)
            feat = torch.maximum(feat, 0.1 * feat)  # Max: an op ORT's float16 converter keeps in float32
        else:
            feat = self.enc8(x[:, : x.shape[1] // 2])
            feat = torch.cumsum(feat, dim=1) / 8.0  # CumSum: also kept in float32
        y, new_state = self.rnn(feat.unsqueeze(0), state)
        return torch.sigmoid(self.out(y[0])), new_state


def build_vad() -> None:
    torch.manual_seed(3)
    core = VadCore()
    scripted = torch.jit.script(core)
    x, state, sr = torch.rand(1, 256), torch.zeros(2, 1, 32), torch.tensor(16000, dtype=torch.int64)
    model = _export(scripted, (x, state, sr), OUT / "vad_rnn.onnx", opset=13, input_names=["input", "state", "sr"],
                    output_names=["output", "stateN"],
                    dynamic_axes={"input": {0: "batch"}, "state": {1: "batch"}, "output": {0: "batch"},
                                  "stateN": {1: "batch"}})
    initializers_to_constants(model.graph)
    _save(model, "vad_rnn.onnx")


# -- 5. an fp16 model: float16 weights, inputs and outputs ---------------------------------------------------


class SmallNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1), nn.ReLU(), nn.Conv2d(8, 16, 3, 2, 1), nn.ReLU(),
                                      nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.fc = nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.features(x))


def build_fp16() -> None:
    torch.manual_seed(4)
    net = SmallNet().half()
    x = torch.rand(1, 3, 32, 32).half()
    model = _export(net, (x,), OUT / "fp16_net.onnx", opset=17, input_names=["x"], output_names=["logits"],
                    dynamic_axes={"x": {0: "batch"}, "logits": {0: "batch"}})
    assert all(t.data_type == onnx.TensorProto.FLOAT16 for t in model.graph.initializer if len(t.dims))
    _save(model, "fp16_net.onnx")


BUILDERS = {"text_encoder": build_text_encoder, "db_detector": build_db_detector, "yolo_detector": build_yolo,
            "vad_rnn": build_vad, "fp16_net": build_fp16}


def main(names: list[str]) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    np.random.seed(0)
    for name in names or list(BUILDERS):
        BUILDERS[name]()


if __name__ == "__main__":
    main(sys.argv[1:])
