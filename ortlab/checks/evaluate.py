"""How much a transformed model differs from its source: output error and the metrics of the model's task.

Both models run sample by sample (batch of one) on the same feed. SQNR of identical outputs is
``float('inf')`` (``OutputError.identical``); ``serial.to_plain`` writes it as the string "inf".
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any
from collections.abc import Sequence

import numpy as np

from ortlab.core import dtypes
from ortlab.settings.config import PreprocessConfig, Target
from ortlab.data.dataset import Dataset, stratified_sample
from ortlab.data.feeds import attention_mask, batch_inputs, check_fits, first_copy, sample_copies
from ortlab.core.errors import Cancelled, DataError
from ortlab.checks.eval_report import EvalReport, OutputError
from ortlab.data.inputs import InputSpec, infer_specs
from ortlab.model.inspect import TensorInfo
from ortlab.core.progress import CancelToken, ProgressEvent, Reporter, null_reporter
from ortlab.runtime import openvino as openvino_runtime
from ortlab.runtime.providers import create_session
from ortlab.checks.task_metrics import TaskAccumulator, per_sample_vector, token_rows, top5_indices
from ortlab.checks.verdict_policy import VerdictPolicy
from ortlab.runtime.providers import ORT_ERRORS, explain_ort_error


# said when the source fails on made-up inputs: a float input that holds a setting (a Dropout ratio, Resize scales)
RANDOM_INPUTS_HINT = (" Its inputs were made up at random: give real data, or the value an input that holds a "
                      "setting takes (--input-value NAME=VALUE).")


def _run(sess, names: list[str], feed: dict[str, np.ndarray], which: str, index: int, hint: str = "") -> list:
    """``sess.run``; ORT's failure becomes one DataError line naming the model and the sample (and ``hint``)."""
    try:
        return sess.run(names, feed)
    except ORT_ERRORS as exc:
        raise DataError(f"The {which} model failed to run on sample {index + 1}: {explain_ort_error(exc).rstrip('.')}."
                        f"{hint}") from None


def session_inputs(sess) -> list[TensorInfo]:
    """A session's inputs as TensorInfo."""
    return [TensorInfo(i.name, dtypes.from_ort(i.type), tuple(i.shape)) for i in sess.get_inputs()]


def feed_for(sess_inputs: Sequence[TensorInfo], feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Cast float arrays to the session's float types (e.g. an fp16 model without kept I/O types)."""
    out = {}
    for t in sess_inputs:
        arr = feed.get(t.name)
        if arr is None:
            raise DataError(f"The candidate model needs input '{t.name}', which the reference model does not have.")
        if arr.dtype.kind == "f" and t.dtype in ("float32", "float16", "float64") and arr.dtype != np.dtype(t.dtype):
            arr = arr.astype(t.dtype)
        out[t.name] = arr
    return out


class _Stats:
    def __init__(self, name: str):
        self.name = name
        self.max_abs = 0.0
        self.sum_abs = self.count = 0.0
        self.ref2 = self.diff2 = self.cand2 = self.dot = 0.0
        # the values seen; NaN/inf in the result where the source is finite; the source's own; those the result
        # does not repeat (OutputError's fields of those names)
        self.counts = dict.fromkeys(("values", "nonfinite", "source_nonfinite", "source_nonfinite_differs"), 0)
        self.real_tokens = self.padding = 0
        self.size_changed = 0  # the samples where the output's shape differs (not compared)
        self.sizes: list[tuple[int, int]] = []  # each sample's (reference, candidate) value counts
        self.signal: list[float] = []
        self.noise: list[float] = []

    def add(self, ref: np.ndarray, cand: np.ndarray, mask: np.ndarray | None = None) -> None:
        """One sample's output; with an attention ``mask``, a per-token output counts at its real tokens only. An
        output whose shape differs between the two (a detector's NMS kept another number of boxes) is counted as
        changed, and its values are left out."""
        self.sizes.append((int(np.size(ref)), int(np.size(cand))))
        if np.shape(ref) != np.shape(cand):
            self.size_changed += 1
            return
        rr, cr = token_rows(ref, mask), token_rows(cand, mask)
        if rr is not None and cr is not None and mask is not None:
            self.real_tokens += len(rr)
            self.padding += int(mask.size) - len(rr)
            ref, cand = rr, cr
        r = np.asarray(ref, dtype=np.float64).ravel()
        c = np.asarray(cand, dtype=np.float64).ravel()
        fr, fc = np.isfinite(r), np.isfinite(c)
        self.counts["values"] += r.size
        self.counts["nonfinite"] += int(np.count_nonzero(fr & ~fc))
        own = int(np.count_nonzero(~fr))
        self.counts["source_nonfinite"] += own
        with np.errstate(all="ignore"):
            if own:  # only there: this runs on every output of every sample
                rs, cs = r[~fr], c[~fr]
                self.counts["source_nonfinite_differs"] += int(np.count_nonzero(
                    ~((np.isnan(rs) & np.isnan(cs)) | (rs == cs))))
            d = r - c
            compared = np.abs(d[fr | fc])  # not where both are NaN/inf
            if compared.size:  # a NaN against a finite value is an infinite difference, not none
                worst = float(np.max(compared))
                self.max_abs = max(self.max_abs, math.inf if math.isnan(worst) else worst)
            if not (fr.all() and fc.all()):  # SQNR, cosine and the mean on the values finite in both
                keep = fr & fc
                r, c, d = r[keep], c[keep], d[keep]
            self.sum_abs += float(np.sum(np.abs(d)))
            self.count += d.size
            r2, d2 = float(r @ r), float(d @ d)
            self.ref2 += r2
            self.cand2 += float(c @ c)
            self.diff2 += d2
            self.dot += float(r @ c)
        self.signal.append(r2)
        self.noise.append(d2)

    def result(self) -> OutputError:
        if math.isnan(self.diff2) or math.isnan(self.dot):
            cosine, sqnr = math.nan, math.nan
        else:
            if self.ref2 == 0 and self.cand2 == 0:
                cosine = 1.0
            elif self.ref2 == 0 or self.cand2 == 0:
                cosine = 0.0
            elif math.isinf(self.ref2) or math.isinf(self.cand2):
                cosine = math.nan
            else:
                cosine = self.dot / math.sqrt(self.ref2 * self.cand2)
            if self.diff2 == 0:
                sqnr = math.inf
            elif self.ref2 == 0 or math.isinf(self.diff2):
                sqnr = -math.inf
            else:
                sqnr = 10.0 * math.log10(self.ref2 / self.diff2)
        mean_abs = self.sum_abs / self.count if self.count else 0.0
        return OutputError(self.name, self.max_abs, mean_abs, cosine, sqnr, **self.counts,
                           sample_signal=self.signal, sample_noise=self.noise, real_tokens=self.real_tokens,
                           padding=self.padding, size_changed=self.size_changed,
                           sample_sizes=[list(x) for x in self.sizes] if self.size_changed else [])


def _class_scores(output: np.ndarray) -> np.ndarray | None:
    """A classifier output of one sample as [1, C] (also [1, C, 1, 1]); None when it is not one."""
    vec = per_sample_vector(output) if output.dtype.kind == "f" else None
    return vec if vec is not None and vec.shape[0] == 1 and vec.shape[1] >= 2 else None


def _pick(dataset: Dataset, n: int | None) -> Dataset:
    if n is not None and n < len(dataset):
        return stratified_sample(dataset, n, seed=0)
    return dataset


def _labels(ds: Dataset) -> list[int]:
    """The samples' labels; callers check ``ds.labeled()`` (every sample has one) first."""
    return [int(s.label) for s in ds.samples if s.label is not None]


def _check_labels(ds: Dataset, n_classes: int) -> None:
    top = max(_labels(ds))
    if top >= n_classes:
        raise DataError(f"The dataset has labels up to {top} ({len(ds.class_names)} classes) but the model outputs "
                        f"{n_classes} scores; use the model's labels for the class folders.")


def _accuracy(preds: list[list[int]], labels: list[int], n_classes: int = 6) -> tuple[float, float | None]:
    top1 = sum(p[0] == y for p, y in zip(preds, labels)) / len(labels)
    # top-5 means something only with more than 5 classes (with 5 or fewer it is always 100%)
    top5 = sum(y in p for p, y in zip(preds, labels)) / len(labels) if len(preds[0]) >= 5 and n_classes > 5 else None
    return top1, top5


class OutputComparison:
    """The reference's and a candidate's outputs, sample by sample (a batch of one each): the error of every output
    and the metrics of the model's task (``policy``: its task, near-tie margin and threshold). :meth:`report` is the
    :class:`EvalReport` of what was added (also the screening of :mod:`ortlab.checks.revert_screen`)."""

    def __init__(self, names: Sequence[str], labeled: bool, policy: VerdictPolicy | None = None,
                 copies: int = 1) -> None:
        self.names = list(names)
        self.copies = copies  # a batch the model fixes, filled with copies of the sample: each is read once
        self.labeled = labeled
        self.policy = policy or VerdictPolicy()
        self.stats = [_Stats(name) for name in self.names]
        self.task: TaskAccumulator | None = None
        self.samples = 0

    def add(self, ref_outputs: Sequence[Any], cand_outputs: Sequence[Any],
            feed: dict[str, np.ndarray] | None = None) -> None:
        """One sample's outputs; ``feed``: what both models were given (its attention mask, when it has one, keeps
        padded positions of per-token outputs out of every figure)."""
        ref_outputs, cand_outputs = first_copy(ref_outputs, self.copies), first_copy(cand_outputs, self.copies)
        if feed is not None:
            feed = dict(zip(feed, first_copy(list(feed.values()), self.copies)))
        mask = attention_mask(feed) if feed is not None else None
        for s, r, c in zip(self.stats, ref_outputs, cand_outputs):
            s.add(r, c, mask)
        if self.task is None:
            p = self.policy
            self.task = TaskAccumulator(self.names, list(ref_outputs), self.labeled, p.task, p.margin, p.threshold)
        self.task.add(list(ref_outputs), list(cand_outputs), mask)
        self.samples += 1

    def report(self, **kwargs: Any) -> EvalReport:
        """The :class:`EvalReport` so far (``kwargs``: its other fields), with the task's metrics and, for a
        classifier, top-1 agreement and top-5 containment."""
        if self.task is not None:
            kwargs["task"] = task = self.task.result()
            cm = task.classification
            if self.task.classes is not None and cm is not None and self.task.classes.ref_top:
                kwargs.update(top1_agreement=cm.agreement, top5_containment=cm.top5_containment)
        return EvalReport(self.samples, [s.result() for s in self.stats], **kwargs)


def evaluate(reference_path, candidate_path, dataset: Dataset, preprocess: PreprocessConfig | None, n: int | None = None,
             target: Target = Target.CPU, reporter: Reporter = null_reporter,
             cancel: CancelToken | None = None, policy: VerdictPolicy | None = None,
             specs: Sequence[InputSpec] | None = None, candidate_runtime: str = "onnxruntime") -> EvalReport:
    """Run both models on the same samples: per-output error, and the metrics of the model's task
    (``task_metrics``: inferred from the outputs and labels unless ``policy.task`` names it; ``policy.margin``
    and ``policy.threshold`` set the near-tie margin and the decision threshold). For a classifier also
    accuracy vs labels (when labeled), top-1 agreement and top-5 containment (more than 5 classes only).
    Reports "verify" progress. ``specs``: the inputs' shapes (:func:`ortlab.data.inputs.infer_specs`; inferred
    when None); the report's ``input_shapes`` says what was fed. ``candidate_runtime`` "openvino" or
    "openvino-bf16" runs the candidate under OpenVINO's CPU runtime compiled in f32 or bf16
    (:data:`ortlab.runtime.openvino.RUNTIME_PRECISION`; its providers name the precision it compiled in)."""
    policy = policy or VerdictPolicy()
    ds = _pick(dataset, n)
    ref, prov_ref = create_session(reference_path, target)
    cand: Any
    if candidate_runtime in openvino_runtime.RUNTIME_PRECISION:
        cand = openvino_runtime.OpenVinoSession(candidate_path, openvino_runtime.RUNTIME_PRECISION[candidate_runtime])
        prov_cand = [f"{openvino_runtime.PROVIDER} ({cand.precision})"]
    else:
        cand, prov_cand = create_session(candidate_path, target)
    ref_in, cand_in = session_inputs(ref), session_inputs(cand)
    if specs is None and ds.kind != "images":
        specs = infer_specs(ref_in, preprocess, ds)
    check_fits(ds, preprocess, ref_in, specs)
    ref_names = [o.name for o in ref.get_outputs()]
    cand_names = [o.name for o in cand.get_outputs()]
    if len(ref_names) != len(cand_names):
        raise DataError(f"The reference has {len(ref_names)} outputs but the candidate has {len(cand_names)}.")
    pair = dict(zip(ref_names, ref_names if set(ref_names) == set(cand_names) else cand_names))
    comparison = OutputComparison(ref_names, ds.labeled(), policy, sample_copies(ds, preprocess, ref_in, specs))
    total = len(ds)
    shapes: dict[str, list[int]] = {}
    for i in range(total):
        if cancel is not None and cancel.cancelled:
            raise Cancelled(step="verify")
        feed = batch_inputs(ds, [i], preprocess, ref_in, specs)
        shapes = shapes or {k: list(v.shape) for k, v in feed.items()}
        r_out = _run(ref, ref_names, feed, "reference", i, RANDOM_INPUTS_HINT if ds.is_random else "")
        c_out = _run(cand, [pair[nm] for nm in ref_names], feed_for(cand_in, feed), "candidate", i)
        comparison.add(r_out, c_out, feed)
        reporter(ProgressEvent("verify", i + 1, total, f"sample {i + 1}/{total}"))
    report = comparison.report(random_data=ds.is_random, providers_ref=prov_ref, providers_cand=prov_cand,
                               input_shapes=shapes,
                               available_samples=0 if ds.is_random else dataset.population or len(dataset))
    acc = comparison.task
    if acc is None:
        return report
    classes = acc.classes
    cm = report.task.classification if report.task is not None else None
    if classes is not None and cm is not None and classes.ref_top and ds.labeled():
        _check_labels(ds, cm.n_classes)
        labels = _labels(ds)
        top1_ref, top5_ref = _accuracy(classes.ref_top, labels, cm.n_classes)
        top1_cand, top5_cand = _accuracy(classes.cand_top, labels, cm.n_classes)
        report = replace(report, top1_accuracy_ref=top1_ref, top5_accuracy_ref=top5_ref, top1_accuracy_cand=top1_cand,
                         top5_accuracy_cand=top5_cand,
                         per_class=_per_class(ds, labels, classes.ref_top, classes.cand_top))
    return report


def _per_class(ds: Dataset, labels: list[int], ref_top: list[list[int]], cand_top: list[list[int]] | None) -> list[dict]:
    rows = []
    for c in sorted(set(labels)):
        idx = [i for i, y in enumerate(labels) if y == c]
        row: dict[str, Any] = {
            "class": ds.class_names[c] if c < len(ds.class_names) else str(c),
            "n": len(idx),
            "ref_acc": sum(ref_top[i][0] == c for i in idx) / len(idx),
        }
        if cand_top is not None:
            row["cand_acc"] = sum(cand_top[i][0] == c for i in idx) / len(idx)
        rows.append(row)
    return rows


def accuracy(model_path, dataset: Dataset, preprocess: PreprocessConfig | None, n: int | None = None,
             target: Target = Target.CPU, reporter: Reporter = null_reporter,
             cancel: CancelToken | None = None) -> dict:
    """One classifier alone: {"n", "top1", "top5" (None when unlabeled), "predictions" (top-1 class per
    sample), "per_class", "random_data", "providers"}."""
    ds = _pick(dataset, n)
    sess, providers = create_session(model_path, target)
    inputs = session_inputs(sess)
    check_fits(ds, preprocess, inputs)
    out0 = sess.get_outputs()[0]
    tops: list[list[int]] = []
    n_classes = 0
    for i in range(len(ds)):
        if cancel is not None and cancel.cancelled:
            raise Cancelled(step="verify")
        got = np.asarray(sess.run([out0.name], batch_inputs(ds, [i], preprocess, inputs))[0])
        logits = _class_scores(got)
        if logits is None:
            raise DataError(f"Output '{out0.name}' has shape {list(got.shape)}; accuracy needs a classifier "
                            f"output [N, classes].")
        tops.append(top5_indices(logits.astype(np.float64)[0]))
        n_classes = int(logits.shape[1])
        reporter(ProgressEvent("verify", i + 1, len(ds), f"sample {i + 1}/{len(ds)}"))
    result: dict[str, Any] = {"n": len(ds), "top1": None, "top5": None, "predictions": [t[0] for t in tops],
                              "per_class": [], "random_data": ds.is_random, "providers": providers}
    if ds.labeled():
        _check_labels(ds, n_classes)
        labels = _labels(ds)
        result["top1"], result["top5"] = _accuracy(tops, labels, n_classes)
        result["per_class"] = _per_class(ds, labels, tops, None)
    return result
