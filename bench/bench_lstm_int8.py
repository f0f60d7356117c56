"""Recurrent models in int8: what static int8, dynamic int8 and dynamic int8 with its LSTMs make of them.

ONNX Runtime's static int8 has no LSTM kernel, and ortlab's dynamic default quantizes MatMul/Gemm only: on a model
whose LSTMs hold much of the weights both leave them in float (ortlab now warns, :mod:`ortlab.transforms.untaken_weights`),
and ``int8 dynamic + LSTM`` (``--quant-mode dynamic --op-types MatMul,Gemm,LSTM``, ORT's DynamicQuantizeLSTM) is the
recipe that takes them; tune tries it on models with an LSTM. Per model: each recipe's file size (share of the
source) and its speed-up over the fp32 source at batch 1, all timed interleaved in one ``ortlab bench`` run
(median of the per-round ratios, 95% interval), on random data of the given shape (timing only; the accuracy of these
recipes is for ``ortlab optimize``'s verdict on real data to say).

Models (``--models DIR``; nothing is downloaded, nothing kept in the repository): ``pip download --no-deps NAME==V``
and unzip the path given.

* ``hey_mycroft_v0.1.onnx``: openwakeword 0.4.0, ``openwakeword/resources/models/`` (2 LSTMs, 99% of the weights;
  input [1, 16, 96]).
* ``common.onnx``: ddddocr 1.6.1, ``ddddocr/`` (a CRNN: 21 Convs, one bidirectional LSTM with 31% of the weights and a
  Gemm; input [1, 1, 64, W], run at W = 256).

Measured 2026-12-06 (Intel Xeon, Sapphire Rapids class: AVX-512, VNNI, AVX-512 BF16, AMX; 2 CPUs; ORT 1.31.1),
``--seconds 8``:

====================  =======================  ============  ======================
model                 recipe                   size          speed-up (95%)
====================  =======================  ============  ======================
hey_mycroft_v0.1      int8 static              102%          0.94× (0.94–0.94)
hey_mycroft_v0.1      int8 dynamic             101%          0.98× (0.98–0.99)
hey_mycroft_v0.1      int8 dynamic + LSTM      29%           0.78× (0.78–0.79)
ddddocr common        int8 static              49%           1.69× (1.66–1.71)
ddddocr common        int8 dynamic             53%           1.28× (1.26–1.29)
ddddocr common        int8 dynamic + LSTM      30%           1.89× (1.87–1.92)
====================  =======================  ============  ======================

A small LSTM (hidden 64) runs slower in int8 at batch 1; the CRNN's (hidden 256 each way) runs faster, and its
dynamic + LSTM model is the fastest and smallest of the three. Also measured by hand, not by this script: the static
int8 model with its LSTM then quantized dynamically (ORT's quantize_dynamic with op types LSTM on the QDQ model) ran
3.14× (3.07–3.18×) at 25% of the size, but its static part changed 33% of 60 rendered text lines' strings (dynamic +
LSTM: 15%), so ortlab offers no such recipe yet.

Run::

    ORT_DISABLE_TELEMETRY=1 python bench/bench_lstm_int8.py --models DIR [--seconds 8]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_third_party as third_party  # its in-process `ortlab … --json`, reused

from ortlab.runtime.hardware import detect

CASES = {"hey_mycroft_v0.1.onnx": (), "common.onnx": ("--shape", "input1=1,1,64,256")}
RECIPES = {
    "int8 static": ["--precision", "int8"],
    "int8 dynamic": ["--precision", "int8", "--quant-mode", "dynamic"],
    "int8 dynamic + LSTM": ["--precision", "int8", "--quant-mode", "dynamic", "--op-types", "MatMul,Gemm,LSTM"],
}


def run_case(model: Path, shape: tuple[str, ...], seconds: float, work: Path) -> list[tuple[str, str, str]]:
    """(recipe, size as a share of the source, speed-up with its interval) of each recipe of ``model``."""
    made = {}
    for name, flags in RECIPES.items():
        out = work / f"{model.stem}-{name.replace(' ', '_').replace('+', 'plus')}"
        third_party.ortlab(name, ["optimize", str(model), str(out), *flags, *shape, "--allow-random-data",
                                  "--no-timing"])
        if (out / "model.onnx").is_file():
            made[name] = out / "model.onnx"
    timed = third_party.ortlab("bench", ["bench", str(model), *map(str, made.values()), *shape,
                                         "--duration", str(seconds)]).result
    # one entry per model in the order given, the fp32 source first (every result is named model.onnx)
    speeds = [s for s in timed.get("speedups", []) if s.get("batch_size") == 1][1:]
    rows = []
    for (name, path), s in zip(made.items(), speeds + [None] * (len(made) - len(speeds))):
        s = s if s and s.get("interleaved") else None
        share = f"{path.stat().st_size / model.stat().st_size:.0%}"
        rows.append((name, share, f"{s['speedup']:.2f}× ({s['low']:.2f}–{s['high']:.2f})" if s else "–"))
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", type=Path, required=True)
    ap.add_argument("--seconds", type=float, default=8.0)
    args = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-lstm-") as tmp:
        for file, shape in CASES.items():
            model = args.models / file
            if not model.is_file():
                rows.append((file, f"missing in {args.models}", "", ""))
                continue
            rows += [(model.stem, *row) for row in run_case(model, shape, args.seconds, Path(tmp))]
    print(detect().summary())
    print("| model | recipe | size | speed-up (95%) |\n|---|---|---|---|")
    for row in rows:
        print(f"| {' | '.join(row)} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
