"""Is a candidate safe to ship? A verdict — ok, degraded, broken or unknown — with the reasons, from an evaluation.

The default policy (:class:`VerdictPolicy`; every threshold is a field and a CLI flag):

* **broken** when any float output has SQNR below ``min_sqnr_db`` (10 dB) or cosine below ``min_cosine`` (0.9),
  or NaN/inf values where the reference has finite ones (e.g. fp16 overflow);
* classification: confident top-1 flips (the fp32 reference's top-1 vs top-2 softmax margin is at least
  ``margin``, 0.1) above ``max_confident_flips`` (1%) → degraded, above ``broken_confident_flips`` (5%) →
  broken. Near-tie flips (margin below 0.1) are counted and shown but do not count against the model;
* dense maps (heat maps, segmentation): the share of elements that land on the other side of the decision
  threshold (``threshold``, 0.3) above ``max_crossing`` (1%) → degraded, above ``broken_crossing`` (5%) → broken.
  A map on which the reference finds nothing (no element above the threshold in any evaluation sample) cannot
  judge the result: its SQNR and cosine measure background noise, so they are shown but do not count, and the
  verdict is at best **unknown** ("give evaluation data on which the model detects something"). A candidate
  that finds things there still crosses the threshold and is graded as above. A map the reference finds almost
  nothing on (above the threshold on fewer than 0.1% of elements) is judged as usual, and a degraded or broken
  verdict says that its SQNR and cosine are decided by those few elements;
* boxes (YOLO-style detectors): both models' detections are decoded (score above ``threshold``, per-class NMS)
  and matched by class and IoU ≥ 0.5; F1 of the candidate's detections against the reference's below
  ``min_det_f1`` (0.95) → degraded, below ``broken_det_f1`` (0.8) → broken. The score channels' and the box
  channels' SQNR are reported apart (box pixels dominate the whole output's SQNR) and each is held to the
  ``min_sqnr_db`` bar like a whole output (scores at 9.4 dB are broken however well the boxes do);
* sequences (an OCR recognizer's per-position class probabilities, greedy CTC decoded): the share of samples
  whose decoded string changed above ``max_changed_strings`` (2%) → degraded, above ``broken_changed_strings``
  (10%) → broken; the character error rate is shown with it;
* embeddings: nearest-neighbour agreement across the evaluation set (a change to a neighbour the float model finds
  within 0.01 cosine of its nearest is a near-tie, shown but not counted) below ``min_nn_agreement`` (90%) →
  degraded, below ``broken_nn_agreement`` (70%) → broken; any sample's cosine below ``min_cosine`` → degraded.
  A vector per sample (a sentence embedding) is judged before per-token outputs; per-token outputs of a model fed
  an attention mask are judged (SQNR and cosine too) on the real tokens only, and the reasons say so;
* integer outputs are compared exactly: differing elements above ``max_confident_flips`` → degraded, above
  ``broken_confident_flips`` → broken;
* evaluated on random data, or on samples that were also used for calibration: at best **degraded** ("not a
  verdict on accuracy");
* no evaluation at all: **unknown**, never ok;
* an int8 run that quantized nothing (its ``QuantCoverage`` counts no node): at best **degraded**, "nothing was
  quantized" first: the result is the float model, whatever its outputs say.

Every verdict names the figure that decided it (:attr:`Verdict.deciding`, :attr:`Verdict.deciding_text`): the
first reason at its level, task metrics before SQNR (the detections' F1, the changed strings, confident flips,
nearest-neighbour agreement, threshold crossings; SQNR for plain tensors). The CLI, the Compare page and the
report show that figure first.

The deciding figure carries its 95% interval from the sample count (:attr:`Verdict.uncertainty`,
:mod:`ortlab.checks.uncertainty`: Wilson for shares and F1; a bootstrap over samples for SQNR and for dense-map
crossings, whose elements within a sample are not independent; none for exact outputs). When the interval reaches
across a bar of the policy the verdict is **on the edge** (:attr:`Verdict.edge`): the level stands as measured, and
the sentence says about how many samples would settle it (``--verify-samples N``).

When the evaluated model was optimized by ORT and its outputs differ from the same graph with optimizations
disabled beyond tolerance (``EvalReport.parity``), the verdict still judges what ships (the optimized model
against the source) and says so in :attr:`Verdict.parity`, naming the level that stays within tolerance.

This module needs neither numpy nor ONNX Runtime: stored evaluations can be judged again with another policy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any
from enum import StrEnum

from ortlab.settings.config import setting
from collections.abc import Callable

from ortlab.checks.eval_report import DenseMapMetrics, EvalReport, OutputError, Task, TaskMetrics
from ortlab.checks.uncertainty import Uncertainty, share_uncertainty, sqnr_uncertainty, wilson_uncertainty

__all__ = ["DEFAULT_POLICY", "NOTHING_QUANTIZED", "Level", "Verdict", "VerdictPolicy", "judge", "not_evaluated", "worse_or_equal"]


class Level(StrEnum):
    OK = "ok"
    DEGRADED = "degraded"
    BROKEN = "broken"
    UNKNOWN = "unknown"


_RANK = {Level.OK: 0, Level.UNKNOWN: 1, Level.DEGRADED: 2, Level.BROKEN: 3}


def worse_or_equal(level: Level, bar: Level) -> bool:
    """Whether ``level`` is at ``bar`` or worse (ok < unknown < degraded < broken)."""
    return _RANK[Level(level)] >= _RANK[Level(bar)]


@dataclass(frozen=True)
class VerdictPolicy:
    """How an evaluation becomes a verdict, and the task settings the evaluation itself uses."""

    task: Task = setting(Task.AUTO, "What the model's outputs mean: auto infers it from the outputs (and labels); "
                         "classification, dense_map (heat maps, segmentation), boxes (YOLO-style), embedding, generic.",
                         label="Task")
    margin: float = setting(0.1, "A top-1 flip is a near-tie (not counted against the model) when the reference's "
                            "softmax margin between its top-1 and top-2 classes is below this.",
                            label="Near-tie margin", min=0.0, max=1.0, step=0.01)
    threshold: float = setting(0.3, "Decision threshold of dense maps and detection scores (probabilities; "
                               "logit outputs are passed through a sigmoid first).",
                               label="Decision threshold", min=0.0, max=1.0, step=0.05)
    min_sqnr_db: float = setting(10.0, "Broken when any float output's SQNR is below this (dB).",
                                 label="Min SQNR (dB)", min=-100.0, max=200.0, step=1.0, flag="--min-sqnr-db")
    min_cosine: float = setting(0.9, "Broken when any float output's cosine similarity is below this; degraded "
                                "when one embedding sample's is.", label="Min cosine", min=-1.0, max=1.0,
                                step=0.01)
    max_confident_flips: float = setting(0.01, "Degraded when confident top-1 flips (or differing integer "
                                         "elements) exceed this share of the samples.",
                                         label="Max confident flips", min=0.0, max=1.0, step=0.01)
    broken_confident_flips: float = setting(0.05, "Broken when confident top-1 flips (or differing integer "
                                            "elements) exceed this share.", label="Broken confident flips",
                                            min=0.0, max=1.0, step=0.01)
    max_crossing: float = setting(0.01, "Degraded when more than this share of a dense map's elements cross the "
                                  "decision threshold.", label="Max threshold crossings", min=0.0, max=1.0,
                                  step=0.01)
    broken_crossing: float = setting(0.05, "Broken when more than this share of a dense map's elements cross the "
                                     "decision threshold.", label="Broken threshold crossings", min=0.0, max=1.0,
                                     step=0.01)
    min_det_f1: float = setting(0.95, "Degraded when the F1 of the candidate's detections against the reference's "
                                "(matched by class and IoU ≥ 0.5) is below this.", label="Min detection F1",
                                min=0.0, max=1.0, step=0.01)
    broken_det_f1: float = setting(0.8, "Broken when the F1 of the candidate's detections against the reference's "
                                   "is below this.", label="Broken detection F1", min=0.0, max=1.0, step=0.01)
    max_changed_strings: float = setting(0.02, "Degraded when more than this share of decoded strings (CTC "
                                         "recognizers) differ from the reference's.", label="Max changed strings",
                                         min=0.0, max=1.0, step=0.01)
    broken_changed_strings: float = setting(0.1, "Broken when more than this share of decoded strings differ "
                                            "from the reference's.", label="Broken changed strings", min=0.0,
                                            max=1.0, step=0.01)
    min_nn_agreement: float = setting(0.9, "Degraded when fewer embedding samples than this keep their nearest "
                                      "neighbour.", label="Min NN agreement", min=0.0, max=1.0, step=0.01,
                                      flag="--min-nn-agreement")
    broken_nn_agreement: float = setting(0.7, "Broken when fewer embedding samples than this keep their nearest "
                                         "neighbour.", label="Broken NN agreement", min=0.0, max=1.0, step=0.01,
                                         flag="--broken-nn-agreement")

    def problems(self) -> list[str]:
        """What makes this policy inconsistent (empty when fine)."""
        out = []
        for lo, hi in (("max_confident_flips", "broken_confident_flips"), ("max_crossing", "broken_crossing"),
                       ("max_changed_strings", "broken_changed_strings"), ("broken_det_f1", "min_det_f1"),
                       ("broken_nn_agreement", "min_nn_agreement")):
            if getattr(self, lo) > getattr(self, hi):
                out.append(f"{lo} ({getattr(self, lo)}) must not exceed {hi} ({getattr(self, hi)}).")
        return out

    @staticmethod
    def _upgrade_plain(data: Any) -> Any:
        """A policy stored before detections were matched: its anchor-change thresholds are gone (detectors are
        graded by the F1 of matched detections)."""
        if isinstance(data, dict):
            data = {k: v for k, v in data.items() if k not in ("max_box_changes", "broken_box_changes")}
        return data


DEFAULT_POLICY = VerdictPolicy()


@dataclass
class Verdict:
    """``level`` and the reasons for it, worst first (for ok: what was checked). ``deciding`` names the figure
    that decided the level (e.g. "output0: detections F1 vs reference"), ``deciding_value`` is its number and
    ``deciding_text`` the number as shown ("31.0%", "24.3 dB"); empty when nothing was measured."""

    level: Level
    reasons: list[str] = field(default_factory=list)
    deciding: str = ""
    deciding_value: float | None = None
    deciding_text: str = ""
    uncertainty: Uncertainty | None = None  # the deciding figure's 95% interval (None: no per-sample basis)
    parity: str = ""  # what graph optimization changed beyond tolerance, and the safe level; empty when nothing

    @property
    def edge(self) -> str:
        """"on the edge: …" when the deciding figure's interval straddles a bar of the policy; else empty."""
        return self.uncertainty.edge_text if self.uncertainty is not None else ""

    @property
    def qualifier(self) -> str:
        """What holds the level back from standing alone ("optimization changed outputs", "on the edge"), for the
        line that shows the level; empty when nothing does."""
        parts = (["graph optimization changed outputs"] if self.parity else []) + (["on the edge"] if self.edge else [])
        return ", ".join(parts)

    @property
    def headline(self) -> str:
        """E.g. "BROKEN: logits SQNR -18.0 dB < 10 dB"."""
        level = self.level.value.upper() + (f" ({self.qualifier})" if self.qualifier else "")
        return f"{level}: " + ("; ".join(self.reasons) if self.reasons else "no reasons given")


def not_evaluated(why: str = "not evaluated: no evaluation data was given") -> Verdict:
    """The verdict of a result nobody compared with its source."""
    return Verdict(Level.UNKNOWN, [why])


SPARSE_MAP = 0.001  # a reference map above its threshold on fewer elements than this: SQNR measures a handful


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


NOTHING_QUANTIZED = ("nothing was quantized: the result still computes in float like the source, so it is not an "
                     "int8 model (see the int8 coverage warning for why)")


def judge(report: EvalReport | None, policy: VerdictPolicy = DEFAULT_POLICY, coverage: Any = None) -> Verdict:
    """The verdict on ``report`` under ``policy`` (see the module docstring for the rules). ``coverage``: an int8
    run's ``QuantCoverage``; when it quantized nothing the verdict is at best degraded, that reason first."""
    first = [NOTHING_QUANTIZED] if coverage is not None and not coverage.total else []
    verdict = _judge(report, policy)
    level = Level.DEGRADED if first and verdict.level == Level.OK else verdict.level
    parity = report.parity.text if report is not None and report.parity is not None else ""
    return Verdict(level, first + verdict.reasons, verdict.deciding, verdict.deciding_value, verdict.deciding_text,
                   verdict.uncertainty, parity)


@dataclass
class _Figure:
    """One figure a verdict looked at: its name, number and text, and the reason when it fails."""

    metric: str
    value: float | None
    text: str
    # its interval against the bars given (computed when it decides), the policy's bars for it (degraded, broken)
    uncertain: Callable[[tuple[float, ...]], Uncertainty | None] | None = None
    bars: tuple[float, ...] = ()
    bare: str = ""  # its reason without the bar (see _verdict)


def _db(x: float) -> str:
    return "identical" if x == math.inf else f"{x:.1f} dB"


class _Findings:
    """(reason, figure) pairs at each level; task metrics are looked at before SQNR, so the first at a level
    decides it."""

    def __init__(self) -> None:
        self.broken: list[tuple[str, _Figure]] = []
        self.degraded: list[tuple[str, _Figure]] = []
        self.checked: list[tuple[str, _Figure]] = []

    def grade(self, value: float, degraded_above: float, broken_above: float, text: str, fig: _Figure) -> None:
        fig.bare = text
        if value > broken_above:
            self.broken.append((f"{text} > {_pct(broken_above)}", fig))
        elif value > degraded_above:
            self.degraded.append((f"{text} > {_pct(degraded_above)}", fig))

    def grade_low(self, value: float, degraded_below: float, broken_below: float, text: str, fig: _Figure,
                  fmt=_pct) -> None:
        fig.bare = text
        if value < broken_below:
            self.broken.append((f"{text} < {fmt(broken_below)}", fig))
        elif value < degraded_below:
            self.degraded.append((f"{text} < {fmt(degraded_below)}", fig))


def _share(value: float, trials: float, n: int, unit: str = "share",
           what: str = "samples") -> Callable[[tuple[float, ...]], Uncertainty | None]:
    return lambda bars: wilson_uncertainty(value, trials, n, bars, unit, what)


def _judge_boxes(tm: TaskMetrics, policy: VerdictPolicy, f: _Findings, n: int) -> None:
    """Detections: F1 of the candidate's matched detections against the reference's."""
    for b in tm.boxes:
        f1 = b.f1
        if f1 is None:
            fig = _Figure(f"{b.output}: detections (score > {b.threshold:g})", 0.0, "none in either model")
            f.checked.append((f"{b.output}: no detections above {b.threshold:g} in either model", fig))
            continue
        text = (f"{b.output}: detections F1 {f1:.2f} vs the reference (precision {b.precision or 0:.2f}, recall "
                f"{b.recall or 0:.2f}; {b.matched} of {b.ref_total} reference detections matched by class and "
                f"IoU ≥ {b.match_iou:g}, {b.cand_total} found)")
        trials = (b.ref_total + b.cand_total) / 2  # matched pairs count once
        evidence = (f"{b.ref_total} reference and {b.cand_total} candidate detection"
                    f"{'s' if b.cand_total != 1 else ''} in {n} samples")
        fig = _Figure(f"{b.output}: detections F1 vs reference", f1, f"{f1:.2f}", _share(f1, trials, n, "f1", evidence),
                      (policy.min_det_f1, policy.broken_det_f1))
        f.grade_low(f1, policy.min_det_f1, policy.broken_det_f1, text, fig, fmt=lambda x: f"{x:g}")
        f.checked.append((f"{b.output}: detections F1 {f1:.2f}", fig))  # its groups' SQNR: _judge_tensors


def _judge_sequences(tm: TaskMetrics, policy: VerdictPolicy, f: _Findings, n: int) -> None:
    """Decoded sequences: the share of strings that changed."""
    for q in tm.sequences:
        # the bar grade() appends follows the share it judges (after the CER it read "CER 6.6% > 10.0%")
        text = (f"{q.output}: character error rate {_pct(q.cer)}; {q.changed}/{q.n_samples} decoded strings "
                f"changed ({_pct(q.changed_fraction)})")
        fig = _Figure(f"{q.output}: decoded strings changed", q.changed_fraction, _pct(q.changed_fraction), _share(
            q.changed_fraction, q.n_samples, q.n_samples), (policy.max_changed_strings, policy.broken_changed_strings))
        f.grade(q.changed_fraction, policy.max_changed_strings, policy.broken_changed_strings, text, fig)
        f.checked.append((text, fig))


def _judge_flips(tm: TaskMetrics, policy: VerdictPolicy, f: _Findings, n: int) -> None:
    """Classification: confident top-1 flips (near-tie flips shown, not counted)."""
    c = tm.classification
    if c is None:
        return
    conf, ties = c.confident_flips(policy.margin), c.near_tie_flips(policy.margin)
    rate = conf / max(1, c.n_samples)
    fig = _Figure(f"{c.output}: confident top-1 flips", rate, f"{conf}/{c.n_samples} ({_pct(rate)})", _share(
        rate, c.n_samples, c.n_samples), (policy.max_confident_flips, policy.broken_confident_flips))
    f.grade(rate, policy.max_confident_flips, policy.broken_confident_flips,
            f"{c.output}: {conf}/{c.n_samples} confident top-1 flips ({_pct(rate)})", fig)
    f.checked.append((f"{conf} confident top-1 flips, {ties} near-tie flips (reference softmax margin "
                      f"< {policy.margin:g}) of {c.n_samples}", fig))


def _judge_embeddings(tm: TaskMetrics, policy: VerdictPolicy, f: _Findings, n: int) -> None:
    """Embeddings: nearest-neighbour agreement and the lowest per-sample cosine."""
    for e in tm.embeddings:
        if e.nn_agreement is not None:
            text = f"{e.output}: nearest-neighbour agreement {_pct(e.nn_agreement)}"
            fig = _Figure(f"{e.output}: nearest-neighbour agreement", e.nn_agreement, _pct(e.nn_agreement), _share(
                e.nn_agreement, n, n), (policy.min_nn_agreement, policy.broken_nn_agreement))
            f.grade_low(e.nn_agreement, policy.min_nn_agreement, policy.broken_nn_agreement, text, fig)
            ties = (f" ({e.nn_near_ties} near-tie change{'s' * (e.nn_near_ties > 1)} not counted: within "
                    f"{e.nn_near_tie:g} cosine in the float model)" if e.nn_near_ties else "")
            f.checked.append((text + ties + f", cosine min {e.min_cosine:.3f}", fig))
        fig = _Figure(f"{e.output}: lowest per-sample cosine", e.min_cosine, f"{e.min_cosine:.3f}")
        if e.min_cosine < policy.min_cosine:
            f.degraded.append((f"{e.output}: a sample's cosine is {e.min_cosine:.3f} < {policy.min_cosine:g}", fig))
        elif e.nn_agreement is None:
            f.checked.append((f"{e.output}: cosine min {e.min_cosine:.3f}", fig))


def _crossings(d: DenseMapMetrics) -> Callable[[tuple[float, ...]], Uncertainty | None]:
    return lambda bars: share_uncertainty(d.crossing_fraction, d.sample_crossing, d.sample_elements, bars)


def _judge_crossings(tm: TaskMetrics, policy: VerdictPolicy, f: _Findings, n: int) -> None:
    """Dense maps: the share of elements crossing the decision threshold."""
    for d in tm.dense_maps:
        fig = _Figure(f"{d.output}: elements crossing {d.threshold:g}", d.crossing_fraction,
                      _pct(d.crossing_fraction), _crossings(d), (policy.max_crossing, policy.broken_crossing))
        f.grade(d.crossing_fraction, policy.max_crossing, policy.broken_crossing,
                f"{d.output}: {_pct(d.crossing_fraction)} of elements cross the {d.threshold:g} threshold", fig)
        f.checked.append((f"{d.output}: {_pct(d.crossing_fraction)} threshold crossings", fig))


def _judge_exact(tm: TaskMetrics, policy: VerdictPolicy, f: _Findings, n: int) -> None:
    """Integer outputs: the share of values that differ."""
    for x in tm.exact:
        fig = _Figure(f"{x.output}: values that differ", x.different_fraction, _pct(x.different_fraction))
        f.grade(x.different_fraction, policy.max_confident_flips, policy.broken_confident_flips,
                f"{x.output} ({x.dtype}): {x.n_different:,} of {x.n_elements:,} values differ "
                f"({_pct(x.different_fraction)})", fig)
        f.checked.append((f"{x.output}: {'identical' if not x.n_different else f'{x.n_different:,} values differ'}",
                          fig))


_TASK_JUDGEMENTS = (_judge_boxes, _judge_sequences, _judge_flips, _judge_embeddings, _judge_crossings, _judge_exact)


def _sqnr_figure(o: OutputError, policy: VerdictPolicy) -> _Figure:
    return _Figure(f"{o.name}: SQNR", o.sqnr_db, _db(o.sqnr_db), lambda bars: sqnr_uncertainty(
        o.sqnr_db, o.sample_signal, o.sample_noise, bars), (policy.min_sqnr_db,))


def _groups(tm: TaskMetrics | None) -> list[tuple[str, float]]:
    """("output0 scores", dB) for each channel group of a detector output (its own figure against the SQNR bar)."""
    return [(f"{b.output} {group}", db) for b in (tm.boxes if tm is not None else [])
            for group, db in b.group_sqnr_db.items()]


def _sqnr_bar(f: _Findings, name: str, db: float, fig: _Figure, policy: VerdictPolicy) -> None:
    if math.isnan(db) or db < policy.min_sqnr_db:
        f.broken.append((f"{name}: SQNR {db:.1f} dB < {policy.min_sqnr_db:g} dB", fig))


def _judge_tensors(floats: list[OutputError], empty_maps: dict[str, DenseMapMetrics], policy: VerdictPolicy,
                   f: _Findings, groups: list[tuple[str, float]]) -> None:
    """Float outputs and a detector's channel groups (scores, boxes): NaN/inf values, SQNR and cosine (not on maps
    the reference finds nothing on), each against the same bars, and the worst SQNR as a checked figure."""
    figures: list[tuple[str, float, _Figure, bool]] = []  # (name, dB, figure, identical)
    for o in floats:
        if o.nonfinite:
            f.broken.append((f"{o.name}: {o.nonfinite:,} NaN/inf values where the reference is finite",
                             _Figure(f"{o.name}: NaN/inf values", float(o.nonfinite), f"{o.nonfinite:,}")))
        if o.name in empty_maps:
            continue
        figures.append((o.name, o.sqnr_db, _sqnr_figure(o, policy), o.identical))
        _sqnr_bar(f, *figures[-1][:3], policy)
        if math.isnan(o.cosine) or o.cosine < policy.min_cosine:
            f.broken.append((f"{o.name}: cosine {o.cosine:.3f} < {policy.min_cosine:g}",
                             _Figure(f"{o.name}: cosine", o.cosine, f"{o.cosine:.3f}")))
    for name, db in groups:
        figures.append((name, db, _Figure(f"{name}: SQNR", db, _db(db)), db == math.inf))
        _sqnr_bar(f, *figures[-1][:3], policy)
    if figures:
        name, db, fig, identical = min(figures, key=lambda x: x[1] if not math.isnan(x[1]) else -math.inf)
        f.checked.append(("identical outputs" if identical else f"worst SQNR {db:.1f} dB ({name})", fig))


def _map_remarks(tm: TaskMetrics | None) -> tuple[dict[str, DenseMapMetrics], list[str], list[str]]:
    """The dense maps the reference finds nothing on (by output), the remark on each, and the remark on each map
    it finds almost nothing on (sparse)."""
    maps = tm.dense_maps if tm is not None else []
    empty_maps = {d.output: d for d in maps if d.ref_positive_fraction == 0}
    unjudged = [f"{name}: the reference map finds nothing on this data (no element above the {d.threshold:g} "
                f"threshold in any sample), so its SQNR/cosine measure background noise and cannot judge the "
                f"result; give evaluation data on which the model detects something" for name, d in empty_maps.items()]
    sparse = [f"{d.output}: the reference map is above the {d.threshold:g} threshold on only "
              f"{100 * d.ref_positive_fraction:.2g}% of elements on this data, so its SQNR and cosine are decided by "
              f"those few; judge it on data where the model detects something (for a text detector: images with "
              f"text, such as sample_models/text_photos)"
              for d in maps if 0 < d.ref_positive_fraction < SPARSE_MAP]
    return empty_maps, unjudged, sparse


def _caveats(report: EvalReport) -> list[str]:
    """Why the evaluation is not a verdict on accuracy (random data, calibration samples)."""
    caveats = []
    if report.random_data:
        caveats.append("evaluated on random data: not a verdict on accuracy")
    if report.calibration_overlap:
        caveats.append(f"evaluated on {report.calibration_overlap} of {report.n_samples} samples that were also "
                       "used for calibration: not a verdict on accuracy")
    return caveats


def _one_bar(level: Level, reasons: list[str], fig: _Figure) -> tuple[list[str], Uncertainty | None]:
    """The deciding figure's interval and the bar it reaches across (the one nearest the figure: the last to be
    settled); when that is not the bar the figure's reason names (the broken bar for broken, else the degraded bar),
    the reason loses its bar, so that the verdict names one bar ("F1 0.85 < 0.95" beside "reaches across the 0.8
    bar" read as two rules)."""
    if fig.uncertain is None:
        return reasons, None
    u = fig.uncertain(fig.bars)
    if u is None or u.bar is None or not fig.bars or not fig.bare:
        return reasons, u
    named = fig.bars[-1] if level == Level.BROKEN else fig.bars[0]
    if u.bar != named:
        reasons = [fig.bare if r.startswith(fig.bare) else r for r in reasons]
    return reasons, u


def _verdict(level: Level, reasons: list[str], fig: _Figure | None, available: int = 0) -> Verdict:
    if fig is None:
        return Verdict(level, reasons)
    reasons, u = _one_bar(level, reasons, fig)
    if u is not None:
        u.available = available
    return Verdict(level, reasons, fig.metric, fig.value, fig.text, u)


def _judge(report: EvalReport | None, policy: VerdictPolicy) -> Verdict:
    if report is None:
        return not_evaluated()
    if report.n_samples <= 0:
        return not_evaluated("not evaluated: zero samples were compared")
    f = _Findings()
    tm = report.task
    exact_names = {e.output for e in tm.exact} if tm is not None else set()
    floats = [o for o in report.outputs if o.name not in exact_names]
    empty_maps, unjudged, sparse = _map_remarks(tm)
    if tm is not None:
        for judgement in _TASK_JUDGEMENTS:
            judgement(tm, policy, f, report.n_samples)
    _judge_tensors(floats, empty_maps, policy, f, _groups(tm))
    background = [f"{o.name}: SQNR {o.sqnr_db:.1f} dB on background only" for o in floats if o.name in empty_maps]
    caveats = _caveats(report)
    padding = [o.padding_note for o in floats if o.padding_note]  # per-token outputs judged on real tokens only
    headline = f.checked[0][1] if f.checked else None  # the task's own figure when there is one
    available = report.available_samples
    if f.broken:
        return _verdict(Level.BROKEN, [r for r, _ in f.broken + f.degraded] + caveats + sparse + padding,
                        f.broken[0][1], available)
    if f.degraded or caveats:
        return _verdict(Level.DEGRADED, [r for r, _ in f.degraded] + caveats + unjudged + sparse + padding,
                        f.degraded[0][1] if f.degraded else headline, available)
    if unjudged:
        return Verdict(Level.UNKNOWN, unjudged + ["other checks passed: " + "; ".join(
            [r for r, _ in f.checked] + background)] + padding, "reference map finds nothing", None, "cannot judge")
    task = f"{tm.task.value} " if tm is not None else ""
    return _verdict(Level.OK, [f"{task}checks passed on {report.n_samples} samples: " + "; ".join(
        [r for r, _ in f.checked] + background)] + padding, headline, available)
