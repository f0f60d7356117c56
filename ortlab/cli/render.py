"""How the command line prints results: tables, JSON, an artifact's summary, the verdict line and task metrics."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from collections.abc import Sequence

from ortlab.core.onnx_errors import ONNX_ERRORS
from ortlab.core.text import format_bytes
from ortlab.core.serial import dumps
from ortlab import api
from ortlab.cli.inputs import shapes_text

VERIFY_HINT = (" Give --eval DIR (or --calibration DIR, which verification also uses) to check the result against "
               "the source.")
"""What the CLI adds to the note that verification was skipped: the flag that verifies."""


def verdict_line(verdict) -> str:
    """The first line of a result's text output: ``verdict   BROKEN  reason; reason``."""
    if verdict is None:
        return "verdict    UNKNOWN  not judged"
    qualifier = getattr(verdict, "qualifier", "")
    level = verdict.level.value.upper() + (f" ({qualifier})" if qualifier else "")
    return f"verdict    {level}  " + "; ".join(verdict.reasons)


def deciding_line(verdict) -> str | None:
    """The figure that decided the verdict, the first metric a result's text shows:
    ``  decided by output0: detections F1 vs reference = 0.31``; None when nothing was measured."""
    if verdict is None or not verdict.deciding:
        return None
    return f"  decided by {verdict.deciding} = {verdict.deciding_text}"


def verdict_block(verdict) -> list[str]:
    """The verdict line, the figure that decided it with its 95% interval, "on the edge" when the interval
    straddles a bar, and what graph optimization changed (its own line)."""
    lines = [verdict_line(verdict)]
    decided = deciding_line(verdict)
    if decided:
        lines.append(decided)
    u = getattr(verdict, "uncertainty", None)
    if verdict is not None and verdict.edge:  # says the interval too
        lines.append(f"  edge       {verdict.edge}")
    elif u is not None:
        lines.append(f"  interval   {u.text}")
    if verdict is not None and verdict.parity:
        lines.append(f"  parity     {verdict.parity}")
    return lines


def print_json(obj: Any) -> None:
    """``serial.to_plain`` of ``obj`` as JSON on stdout (non-finite numbers as "inf"/"-inf"/"nan")."""

    print(dumps(obj, indent=2))


def table(rows: list[list[str]], header: list[str], right: Sequence[int] | None = None) -> str:
    """A text table; the columns ``right`` (default: all but the first) are right-aligned, header included."""
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    right_cols = set(range(1, len(header)) if right is None else right)

    def fmt(row: list[str]) -> str:
        return "  ".join(str(c).rjust(w) if i in right_cols else str(c).ljust(w)
                         for i, (c, w) in enumerate(zip(row, widths))).rstrip()

    return "\n".join([fmt(header), fmt(["-" * w for w in widths]), *(fmt(r) for r in rows)])


ENCODER_STATIC_ADVICE = (
    "static int8 often breaks a transformer encoder (the activations after GELU and LayerNorm fit one calibrated "
    "scale badly; no --opt-level changes that): dynamic int8 is the known answer for encoders (--quant-mode dynamic "
    "--op-types MatMul,Gemm), and `ortlab tune` tries it first")
INT8_ADVICE = {
    "static": ("`ortlab analyze SOURCE RESULT --data …` names the nodes that cost accuracy (--exclude-nodes keeps them "
               "in float), and `ortlab tune` searches recipes (dynamic int8, calibration, nodes kept in float) with "
               "the same verdict"),
    "dynamic": "`ortlab tune` searches recipes (op types, static int8, nodes kept in float) with the same verdict",
}


def next_step(artifact) -> str:
    """For a broken or degraded int8 result, what to try that can work (only flags those commands take): for a
    transformer encoder's static int8, dynamic int8 (its known answer: 23 dB where static gave 2.5-6 dB on a
    MiniLM) or tune; else analyze and tune. Empty otherwise."""
    verdict, recipe = artifact.verdict, artifact.recipe
    if verdict is None or verdict.level.value not in ("broken", "degraded"):
        return ""
    if recipe.is_static:
        try:
            encoder = api.models.is_encoder_file(artifact.source_path)
        except ONNX_ERRORS + (OSError,):  # an unreadable source only loses the advice
            encoder = False
        if encoder:
            return ENCODER_STATIC_ADVICE
    return INT8_ADVICE.get(recipe.kind.value, "")  # none for fp32 and fp16


def artifact_text(artifact, out_path: Path) -> str:
    decided = deciding_line(artifact.verdict)
    speed = getattr(artifact, "speed", None)
    lines = [verdict_line(artifact.verdict), *([decided] if decided else []),
             *([f"  {speed.sentence()}"] if speed is not None else []),
             f"wrote {out_path}  ({format_bytes(artifact.size_bytes)}, source {format_bytes(artifact.source_size_bytes)}, "
             f"{artifact.size_bytes / max(1, artifact.source_size_bytes):.0%})",
             f"  recipe     {artifact.recipe.label()}",
             f"  sha256     {artifact.sha256}",
             f"  providers  {', '.join(artifact.providers)}",
             "  timings    " + ", ".join(f"{k} {v:.2f}s" for k, v in artifact.timings.items())]
    lines[1:1 + bool(decided)] = verdict_block(artifact.verdict)[1:]  # decided by, its interval or edge, parity
    advice = next_step(artifact)
    if advice:
        lines.insert(len(verdict_block(artifact.verdict)), f"  try        {advice}")
    if artifact.input_shapes:
        lines.append(f"  inputs     {shapes_text(artifact.input_shapes)}")
    spec = getattr(artifact, "spec", None)
    if spec is not None and spec.preprocess is not None:  # the images' preprocessing, as the flags that repeat it
        lines.append("  preprocess " + " ".join(api.recipes.preprocess_cli_args(spec.preprocess)))
    text_ref = next((r for r in ((spec.calibration, spec.evaluation) if spec is not None else ())
                     if r is not None and r.tokenizer), None)
    if text_ref is not None:  # text data: the tokenizer and length used (the length is in the inputs line too)
        lines.append(f"  text       --tokenizer {text_ref.tokenizer}"
                     + (f" --seq-len {text_ref.seq_len}" if text_ref.seq_len else ""))
    ev = artifact.evaluation
    if ev is not None:
        task = task_lines(ev, artifact.verdict)
        parts = task[:1] + [f"n={ev.n_samples}"]  # the deciding task metric first
        if ev.task is not None:
            parts.append(f"task {ev.task.task.value}")
        for value, label in ((ev.top1_accuracy_ref, "top-1 source"), (ev.top1_accuracy_cand, "top-1 result"),
                             (ev.top1_agreement, "top-1 agreement")):
            if value is not None:
                parts.append(f"{label} {value:.2%}")
        parts += task[1:]
        for o in ev.outputs:
            sqnr_text = "identical" if o.identical else f"SQNR {o.sqnr_db:.1f} dB"
            parts.append(f"{o.name}: max|Δ| {o.max_abs:.3g}, {sqnr_text}")
        lines.append("  verify     " + "; ".join(parts))
    coverage = getattr(artifact, "coverage", None)
    if coverage is not None:
        lines.append(f"  quantized  {coverage.summary()}")
    if artifact.random_data:
        lines.append("  RANDOM DATA was used: accuracy figures are meaningless.")
    lines += [f"  warning    {w}" for w in artifact.warnings]
    lines += [f"  note       {n}" + (VERIFY_HINT if n == api.recipes.VERIFICATION_SKIPPED else "") for n in artifact.notes]
    return "\n".join(lines)


def task_lines(ev, verdict=None) -> list[str]:
    """Short texts of the task metrics of an evaluation (detections, decoded strings, flips, neighbours, threshold
    crossings, exact); the one ``verdict`` was decided by first."""
    tm = ev.task
    out = [line for kind in api.checks.task_kinds(tm) for line in kind.lines(tm)]  # (the verdict's name of the figure, text)
    deciding = getattr(verdict, "deciding", "")
    out.sort(key=lambda item: item[0] != deciding)
    return [text for _, text in out]
