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
  ``min_det_f1`` (0.95) → degraded, below ``broken_det_f1`` (0.8) → broken. The detections above a score of 0.5
  are compared too (when ``threshold`` is lower): their F1 below ``broken_det_f1`` → broken, with at least 30
  reference detections there (a model whose scores are capped keeps its detections at 0.3 and loses them above
  0.5); otherwise it is shown. The score channels' and the box
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
* an output whose shape differs between the models on some samples (a variable-size output: the boxes a
  detector's NMS keeps, another number of them): those samples' values are left out of every other figure, and
  the agreement their counts allow (2·Σmin / Σ(reference + candidate) values, an upper bound of detection F1) is
  held to the detection bars: below ``min_det_f1`` → degraded, below ``broken_det_f1`` → broken;
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

import functools
import math
from dataclasses import dataclass, field
from typing import Any
from enum import StrEnum


from ortlab.checks.eval_report import DenseMapMetrics, EvalReport, OutputError
from ortlab.checks.task_kind import DENSE_MAPS, DETECTIONS, EXACT_OUTPUTS, kinds_of
from ortlab.checks.uncertainty import Uncertainty, share_uncertainty, sqnr_uncertainty
from ortlab.checks.verdict_findings import Figure, Findings, db_text
from ortlab.checks.verdict_policy import VerdictPolicy

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


NOTHING_QUANTIZED = ("nothing was quantized: the result still computes in float like the source, so it is not an "
                     "int8 model (see the int8 coverage warning for why)")


def judge(report: EvalReport | None, policy: VerdictPolicy = DEFAULT_POLICY, coverage: Any = None) -> Verdict:
    """The verdict on ``report`` under ``policy`` (see the module docstring for the rules). ``coverage``: an int8
    run's ``QuantCoverage``; when it quantized nothing the verdict is at best degraded, that reason first."""
    first = [NOTHING_QUANTIZED] if coverage is not None and not coverage.total else []
    verdict = _judge(report, policy)
    level = Level.DEGRADED if first and not worse_or_equal(verdict.level, Level.DEGRADED) else verdict.level
    parity = report.parity.text_for(level.value) if report is not None and report.parity is not None else ""
    return Verdict(level, first + verdict.reasons, verdict.deciding, verdict.deciding_value, verdict.deciding_text,
                   verdict.uncertainty, parity)


def _sqnr_figure(o: OutputError, policy: VerdictPolicy) -> Figure:
    return Figure(f"{o.name}: SQNR", o.sqnr_db, db_text(o.sqnr_db), lambda bars: sqnr_uncertainty(
        o.sqnr_db, o.sample_signal, o.sample_noise, bars), (policy.min_sqnr_db,))


def _sqnr_bar(f: Findings, name: str, db: float, fig: Figure, policy: VerdictPolicy) -> None:
    if math.isnan(db) or db < policy.min_sqnr_db:
        f.broken.append((f"{name}: SQNR {db:.1f} dB < {policy.min_sqnr_db:g} dB", fig))


def _judge_tensors(floats: list[OutputError], empty_maps: dict[str, DenseMapMetrics], policy: VerdictPolicy,
                   f: Findings, groups: list[tuple[str, float]]) -> None:
    """Float outputs and a detector's channel groups (scores, boxes): NaN/inf values, SQNR and cosine (not on maps
    the reference finds nothing on), each against the same bars, and the worst SQNR as a checked figure."""
    figures: list[tuple[str, float, Figure, bool]] = []  # (name, dB, figure, identical)
    for o in floats:
        if o.nonfinite:
            f.broken.append((f"{o.name}: {o.nonfinite:,} NaN/inf values where the reference is finite",
                             Figure(f"{o.name}: NaN/inf values", float(o.nonfinite), f"{o.nonfinite:,}")))
        if o.name in empty_maps:
            continue
        figures.append((o.name, o.sqnr_db, _sqnr_figure(o, policy), o.identical))
        _sqnr_bar(f, *figures[-1][:3], policy)
        if math.isnan(o.cosine) or o.cosine < policy.min_cosine:
            f.broken.append((f"{o.name}: cosine {o.cosine:.3f} < {policy.min_cosine:g}",
                             Figure(f"{o.name}: cosine", o.cosine, f"{o.cosine:.3f}")))
    for name, db in groups:
        figures.append((name, db, Figure(f"{name}: SQNR", db, db_text(db)), db == math.inf))
        _sqnr_bar(f, *figures[-1][:3], policy)
    if figures:
        name, db, fig, identical = min(figures, key=lambda x: x[1] if not math.isnan(x[1]) else -math.inf)
        f.checked.append(("identical outputs" if identical else f"worst SQNR {db:.1f} dB ({name})", fig))


def _judge_sizes(outputs: list[OutputError], policy: VerdictPolicy, f: Findings) -> None:
    """Outputs whose size differs on some samples (a detector's NMS kept another number of boxes): the agreement
    their counts allow (:attr:`OutputError.size_agreement`, an upper bound of detection F1), held to the detection
    F1 bars with its interval bootstrapped over samples; the values of those samples are in no other figure."""
    for o in outputs:
        if not o.size_changed or not o.sample_sizes:
            continue
        value = o.size_agreement
        parts = [2.0 * min(r, c) for r, c in o.sample_sizes]
        wholes = [float(r + c) for r, c in o.sample_sizes]
        moved = sum(abs(r - c) for r, c in o.sample_sizes)
        text = (f"{o.name}: size changed on {o.size_changed}/{len(o.sample_sizes)} samples ({moved:,} values added or "
                f"dropped): agreement at most {value:.2f}")
        fig = Figure(f"{o.name}: size agreement (F1 bound)", value, f"{value:.2f}",
                     functools.partial(share_uncertainty, value, parts, wholes), (policy.min_det_f1, policy.broken_det_f1))
        f.grade_low(value, policy.min_det_f1, policy.broken_det_f1, text, fig, fmt=lambda x: f"{x:g}")
        f.checked.append((text, fig))


def _caveats(report: EvalReport) -> list[str]:
    """Why the evaluation is not a verdict on accuracy (random data, calibration samples)."""
    caveats = []
    if report.random_data:
        caveats.append("evaluated on random data: not a verdict on accuracy")
    if report.calibration_overlap:
        caveats.append(f"evaluated on {report.calibration_overlap} of {report.n_samples} samples that were also "
                       "used for calibration: not a verdict on accuracy")
    return caveats


def _one_bar(level: Level, reasons: list[str], fig: Figure) -> tuple[list[str], Uncertainty | None]:
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


def _verdict(level: Level, reasons: list[str], fig: Figure | None, available: int = 0) -> Verdict:
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
    f = Findings()
    tm = report.task
    exact_names = EXACT_OUTPUTS.outputs(tm)
    floats = [o for o in report.outputs if o.name not in exact_names]
    empty_maps, unjudged, sparse = DENSE_MAPS.remarks(tm)
    unjudged += DETECTIONS.unjudged(tm, report.n_samples)
    nothing = {o.name for o in floats if o.values and o.source_nonfinite == o.values}  # NaN/inf throughout
    unjudged += [f"{o.name}: the source's own output is NaN/inf at every one of its {o.values:,} values on these "
                 "inputs, so there is nothing to compare; give inputs on which the source computes numbers"
                 for o in floats if o.name in nothing]
    floats = [o for o in floats if o.name not in nothing]
    if tm is not None:
        for kind in kinds_of(tm):
            kind.judge(tm, policy, f, report.n_samples)
    _judge_sizes(report.outputs, policy, f)
    _judge_tensors(floats, empty_maps, policy, f, DETECTIONS.group_sqnrs(tm))
    background = [f"{o.name}: SQNR {o.sqnr_db:.1f} dB on background only" for o in floats if o.name in empty_maps]
    caveats = _caveats(report)
    # per-token outputs judged on real tokens only; the source's own NaN/inf values left out
    notes = [o.padding_note for o in floats if o.padding_note]
    notes += [o.source_nonfinite_note for o in floats if o.source_nonfinite_note]
    headline = f.checked[0][1] if f.checked else None  # the task's own figure when there is one
    available = report.available_samples
    if f.broken:
        return _verdict(Level.BROKEN, [r for r, _ in f.broken + f.degraded] + caveats + sparse + notes,
                        f.broken[0][1], available)
    if f.degraded or caveats:
        return _verdict(Level.DEGRADED, [r for r, _ in f.degraded] + caveats + unjudged + sparse + notes,
                        f.degraded[0][1] if f.degraded else headline, available)
    if unjudged:
        passed = [r for r, _ in f.checked] + background
        return Verdict(Level.UNKNOWN, unjudged + (["other checks passed: " + "; ".join(passed)] if passed else [])
                       + notes, "reference finds nothing", None, "cannot judge")
    task = f"{tm.task.value} " if tm is not None else ""
    return _verdict(Level.OK, [f"{task}checks passed on {report.n_samples} samples: " + "; ".join(
        [r for r, _ in f.checked] + background)] + notes, headline, available)
