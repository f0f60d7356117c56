"""The calibration reader ONNX Runtime's calibrator pulls samples from (next to ``quantize.py``, its only user).

It turns dataset samples into model feeds with the run's preprocessing, reports "calibrate" progress and
honours cancel between samples.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
from onnxruntime.quantization import CalibrationDataReader

from ortlab.settings.config import PreprocessConfig
from ortlab.data.dataset import Dataset
from ortlab.data.feeds import batch_inputs, check_fits, check_image_input, sample_copies
from ortlab.data.preprocess import preprocess_image
from ortlab.core.errors import Cancelled, DataError
from ortlab.core.progress import CancelToken, ProgressEvent, Reporter, null_reporter
from ortlab.data.inputs import infer_specs

if TYPE_CHECKING:
    from ortlab.data.inputs import InputSpec
    from ortlab.model.inspect import TensorInfo


class CalibrationReader(CalibrationDataReader):
    """Feeds ORT's calibrator one sample per ``get_next()``; reports "calibrate" progress and honours cancel.
    ``specs`` (:func:`ortlab.data.inputs.infer_specs`) are the inputs' shapes; inferred from the model, ``cfg`` and
    ``ds`` when None."""

    def __init__(self, ds: Dataset, cfg: PreprocessConfig | None, model_inputs: Sequence[TensorInfo],
                 reporter: Reporter = null_reporter, cancel: CancelToken | None = None,
                 specs: Sequence[InputSpec] | None = None):
        if specs is None and ds.kind != "images":

            specs = infer_specs(model_inputs, cfg, ds)
        check_fits(ds, cfg, model_inputs, specs)
        self.ds, self.cfg, self.model_inputs = ds, cfg, list(model_inputs)
        self.specs = list(specs) if specs is not None else None
        # checked once here, so each image goes straight from file to tensor
        self._image_input = check_image_input(cfg, model_inputs).name if ds.kind == "images" and cfg else None
        self._copies = sample_copies(ds, cfg, model_inputs, specs)  # a fixed batch: the image repeated to fill it
        self.reporter, self.cancel = reporter, cancel
        self._start, self._end = 0, len(ds)
        self._pos = 0

    @property
    def is_random(self) -> bool:
        return self.ds.is_random

    def get_next(self) -> dict[str, np.ndarray] | None:
        if self.cancel is not None and self.cancel.cancelled:
            raise Cancelled(step="calibrate")
        i = self._start + self._pos
        if i >= self._end:
            return None
        if self._image_input is not None and self.cfg is not None:
            image = preprocess_image(self.ds.load_image(i), self.cfg)[None]
            feed = {self._image_input: np.repeat(image, self._copies, axis=0) if self._copies > 1 else image}
        else:
            feed = batch_inputs(self.ds, [i], self.cfg, self.model_inputs, self.specs)
        _check_finite(feed, i, len(self.ds))
        self._pos += 1
        total = self._end - self._start
        self.reporter(ProgressEvent("calibrate", self._pos, total, f"calibration sample {self._pos}/{total}"))
        return feed

    def rewind(self) -> None:
        """Start again from the first sample."""
        self._pos = 0

    def __len__(self) -> int:
        return len(self.ds)

    def set_range(self, start_index: int, end_index: int) -> None:
        self._start, self._end = max(0, start_index), min(len(self.ds), end_index)
        self._pos = 0


def _check_finite(feed: dict[str, np.ndarray], index: int, total: int) -> None:
    """Refuses a calibration sample with NaN or infinite values: no activation range can be computed from them
    (ONNX Runtime's calibrator fails with "scale issue", or the ranges it writes are meaningless)."""
    for name, array in feed.items():
        if np.issubdtype(array.dtype, np.floating) and not np.isfinite(array).all():
            bad = int(array.size - np.count_nonzero(np.isfinite(array)))
            raise DataError(f"Calibration sample {index + 1} of {total} holds NaN or infinite values in input "
                            f"'{name}' ({bad} of {array.size}): no activation range can be computed from them. "
                            "Give calibration data with finite values only.", step="calibrate")
