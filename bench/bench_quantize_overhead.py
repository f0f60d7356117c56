"""What does the engine's static quantization cost on top of ONNX Runtime's own call?

Interleaved rounds on the digits_cnn sample (pre-processed once with the engine, so both sides quantize the
same graph): (a) ``ortlab.transforms.quantize.quantize_static_model`` with the engine's ``CalibrationReader`` over the
sample's calibration images, (b) a bare ``onnxruntime.quantization.quantize_static`` call with the same
settings and a plain reader that decodes the same PNGs into identical arrays. Prints median wall time of
each, the ratio of the medians and the median of the per-round ratios (a paired figure that cancels drift
in machine load; target ≤ 1.10×), and whether both wrote the same model.

    python bench/bench_quantize_overhead.py [--rounds 11]
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402
from onnxruntime.quantization import (CalibrationDataReader, CalibrationMethod, QuantFormat, QuantType,  # noqa: E402
                                      quantize_static)
from PIL import Image  # noqa: E402

from ortlab.data.loaders import load_image_folder  # noqa: E402
from ortlab.settings.config import QuantConfig  # noqa: E402
from ortlab.model.inspect import inspect_model, sha256_file  # noqa: E402
from ortlab.transforms.calibration import CalibrationReader  # noqa: E402
from ortlab.transforms.quantize import preprocess_for_quantization, quantize_static_model  # noqa: E402


class PlainReader(CalibrationDataReader):
    """What a person would write by hand: open each PNG, normalise it, hand it over."""

    def __init__(self, files: list[Path], input_name: str, mean: float, std: float):
        self.files, self.input_name, self.mean, self.std = files, input_name, mean, std
        self.pos = 0

    def get_next(self):
        if self.pos >= len(self.files):
            return None
        img = Image.open(self.files[self.pos]).convert("L")
        self.pos += 1
        x = (np.asarray(img, dtype=np.float32) / 255.0 - self.mean) / self.std
        return {self.input_name: x[None, None, :, :]}


def main() -> int:
    """Run the comparison and print the table."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=11)
    args = ap.parse_args()
    from ortlab.data.samples import get_sample, samples_root

    if not (samples_root() / "digits_cnn" / "manifest.json").is_file():
        print(f"digits_cnn sample not found in {samples_root()}; nothing to compare.")
        return 0

    logging.getLogger().setLevel(logging.ERROR)
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        sample = get_sample("digits_cnn")
        pre = sample.preprocess
        if pre.channels != 1 or len(pre.mean) != 1 or pre.scale.value != "0-1" or tuple(pre.size) != (32, 32):
            print(f"unexpected sample preprocessing {pre}; the plain reader only handles 32×32 grayscale.")
            return 0
        shutil.copytree(sample.calibration_dir, tmp / "calibration")
        src = tmp / "source.onnx"
        src.write_bytes(sample.model_path.read_bytes())
        model = tmp / "preprocessed.onnx"
        preprocess_for_quantization(src, model)
        inputs = inspect_model(model).inputs
        ds = load_image_folder(tmp / "calibration", class_names=sample.labels)
        files = [Path(s.source) for s in ds.samples]
        q = QuantConfig(calibration_samples=len(ds))

        # identical inputs on both sides
        eng_reader = CalibrationReader(ds, pre, inputs)
        plain = PlainReader(files, inputs[0].name, pre.mean[0], pre.std[0])
        worst = max(float(np.abs(eng_reader.get_next()[inputs[0].name] - plain.get_next()[inputs[0].name]).max())
                    for _ in range(len(ds)))
        assert worst < 1e-5, f"the readers disagree by {worst}"

        def engine(out: Path) -> None:
            quantize_static_model(model, out, q, CalibrationReader(ds, pre, inputs))

        def bare(out: Path) -> None:
            cwd = os.getcwd()
            os.chdir(tmp)  # ORT may write calibration files into the current directory
            try:
                quantize_static(str(model), str(out), PlainReader(files, inputs[0].name, pre.mean[0], pre.std[0]),
                                quant_format=QuantFormat.QDQ, per_channel=q.per_channel, reduce_range=q.reduce_range,
                                activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                                calibrate_method=CalibrationMethod.MinMax,
                                calibration_providers=["CPUExecutionProvider"],
                                extra_options={"WeightSymmetric": q.symmetric_weight,
                                               "ActivationSymmetric": q.symmetric_activation})
            finally:
                os.chdir(cwd)

        times: dict[str, list[float]] = {"engine": [], "bare": []}
        digests: dict[str, set[str]] = {"engine": set(), "bare": set()}
        for r in range(args.rounds):
            order = [("engine", engine), ("bare", bare)]
            if r % 2:
                order.reverse()
            for name, fn in order:
                out = tmp / f"{name}-{r}.onnx"
                start = time.perf_counter()
                fn(out)
                times[name].append(time.perf_counter() - start)
                digests[name].add(sha256_file(out))
        e, b = statistics.median(times["engine"]), statistics.median(times["bare"])
        print(f"model: digits_cnn (pre-processed), {len(ds)} calibration images, MinMax, QDQ, per-channel, "
              f"U8S8; {args.rounds} interleaved rounds")
        print(f"{'variant':<40} {'median s':>9} {'min s':>7} {'max s':>7}")
        for label, key in (("engine quantize_static_model + reader", "engine"),
                           ("bare onnxruntime quantize_static", "bare")):
            print(f"{label:<40} {statistics.median(times[key]):>9.3f} {min(times[key]):>7.3f} {max(times[key]):>7.3f}")
        same = digests["engine"] == digests["bare"] and len(digests["engine"]) == 1
        paired = statistics.median(x / y for x, y in zip(times["engine"], times["bare"]))
        print(f"ratio engine/bare: of medians {e / b:.3f}×, median per round {paired:.3f}× (target ≤ 1.10×); "
              f"identical output models: {'yes' if same else 'no'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
