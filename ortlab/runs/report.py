"""One self-contained HTML report of a run: recipe, hashes, sizes, graph diff, accuracy, benchmark.

The page is built here without drawing: its charts come in as ready HTML (``charts_html``; the app draws them
with plotly, :mod:`ortlab.ui.views.report`, embedding plotly.js once). The file fetches nothing: it opens offline and
can be mailed as is.
"""

from __future__ import annotations

import html
from datetime import datetime, UTC
from typing import TYPE_CHECKING, Any
from collections.abc import Iterable, Set as AbstractSet

from ortlab.runs.artifact import Artifact
from ortlab.runs.stored_timing import machine_text, speed_interval_text
from ortlab.runtime.machine import Machine
from ortlab.timing.bench import LatencySummary
from ortlab.timing.compare import compare_benchmarks
from ortlab.timing.stats import of_summaries
from ortlab.settings.config import recipe_cli_line
from ortlab.checks.eval_report import EvalReport
from ortlab.core.text import format_bytes
from ortlab.checks.verdict import Level, Verdict, judge

if TYPE_CHECKING:
    from ortlab.model.diff import GraphDiff

_CSS = """
body { font-family: -apple-system, "Segoe UI", Ubuntu, "DejaVu Sans", sans-serif; margin: 2rem auto;
       max-width: 1100px; color: #1a1a1a; line-height: 1.45; padding: 0 1rem; }
h1 { margin-bottom: .2rem; } h2 { border-bottom: 2px solid #0b5cad; padding-bottom: .2rem; margin-top: 2rem; }
table { border-collapse: collapse; margin: .5rem 0 1rem; font-size: .92rem; }
th, td { border: 1px solid #ccc; padding: .25rem .6rem; text-align: left; vertical-align: top; }
th { background: #eef3f9; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
td.neg { color: #b00020; } td.pos { color: #1b7f2a; }
code, pre { font-family: "DejaVu Sans Mono", Consolas, monospace; font-size: .88rem; }
pre { background: #f5f5f5; padding: .7rem; overflow-x: auto; border: 1px solid #ddd; white-space: pre-wrap; }
td code { word-break: break-all; }
.alert { background: #b00020; color: white; padding: .8rem 1rem; font-weight: bold; font-size: 1.1rem;
         border-radius: 4px; margin: 1rem 0; }
.warn { background: #fff4d6; border-left: 5px solid #f0a000; padding: .4rem .8rem; margin: .3rem 0; }
.muted { color: #666; }
.verdict { padding: .8rem 1rem; border-radius: 4px; margin: 1rem 0; font-size: 1.05rem; }
.verdict ul { margin: .3rem 0 0; }
.verdict-broken { background: #b00020; color: white; } .verdict-degraded { background: #f0a000; color: #1a1a1a; }
.verdict-ok { background: #1b7f2a; color: white; } .verdict-unknown { background: #6b6b6b; color: white; }
"""


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _pre(text: str) -> str:
    return f"<pre>{html.escape(text, quote=False)}</pre>"


def _bytes(n: Any) -> str:
    if not isinstance(n, (int, float)):
        return "–"
    return f"{format_bytes(n)} ({int(n):,} bytes)" if abs(n) >= 1000 else f"{int(n):,} bytes"


def _pct(x: Any) -> str:
    return f"{100 * x:.2f}%" if isinstance(x, (int, float)) else "–"


def _num(x: Any, digits: int = 4) -> str:
    if isinstance(x, bool) or x is None:
        return "–" if x is None else str(x)
    if isinstance(x, int):
        return f"{x:,}"
    if isinstance(x, float):
        if x != x or x in (float("inf"), float("-inf")):
            return str(x)
        return f"{x:.{digits}g}" if abs(x) < 1e-3 and x != 0 else f"{x:.{digits}f}"
    return _e(x)


def _table(headers: Iterable[str], rows: Iterable[Iterable[Any]], numeric: AbstractSet[int] = frozenset()) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = []
    for row in rows:
        cells = []
        for i, v in enumerate(row):
            cls = ' class="num"' if i in numeric else ""
            cells.append(f"<td{cls}>{v}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def html_report(artifact: Artifact, ref_info: dict, cand_info: dict, diff: GraphDiff, evaluation: EvalReport | None,
                bench: list[LatencySummary] | None, *, title: str | None = None,
                speed: tuple[LatencySummary | None, LatencySummary | None] | None = None,
                charts_html: str = "", machine: Machine | None = None) -> str:
    """A self-contained HTML report (no external links) of one run.

    ``ref_info``/``cand_info`` are ``ModelInfo.to_dict()``; ``bench`` the summaries of a benchmark that timed it;
    ``speed`` the (reference, candidate) summaries at batch 1 of that benchmark; ``machine`` where it was timed; ``charts_html`` the charts,
    drawn by the caller, under their own heading (none when empty). Warnings are the run's and the
    source model's, never the inspection of ortlab's own output (which uses contrib ops by design).
    """
    recipe = artifact.recipe
    random_data = artifact.random_data or (evaluation is not None and evaluation.random_data)
    title = title or f"ortlab report — {recipe.label()}"
    parts: list[str] = [f"<h1>{_e(title)}</h1>"]
    when = artifact.created_at or datetime.now(UTC).isoformat(timespec="seconds")
    run = f"run #{_e(artifact.run_id)} · " if artifact.run_id is not None else ""
    parts.append(f'<p class="muted">{run}{_e(when)}</p>')
    verdict = artifact.verdict if artifact.verdict is not None else judge(evaluation, coverage=artifact.coverage)
    parts.append(_verdict(verdict))
    parts.append(_speed(speed, machine))
    if random_data:
        parts.append('<div class="alert">⚠ RANDOM DATA: calibration and/or evaluation used random inputs. '
                     "Accuracy and agreement numbers are meaningless; quantization ranges may be poor.</div>")

    # -- models
    parts.append("<h2>Models</h2>")
    ref_sha = ref_info.get("sha256") or artifact.source_sha256
    cand_sha = cand_info.get("sha256") or artifact.sha256
    src = ref_info.get("total_bytes") or artifact.source_size_bytes
    dst = cand_info.get("total_bytes") or artifact.size_bytes
    rows: list[tuple[str, ...]] = [
        ("Path", _e(ref_info.get("path") or artifact.source_path), _e(cand_info.get("path") or artifact.model_path)),
        ("sha256", f"<code>{_e(ref_sha)}</code>", f"<code>{_e(cand_sha)}</code>"),
        ("Size (incl. external data)", _bytes(src), _bytes(dst)),
        ("Nodes", _num(ref_info.get("node_count")), _num(cand_info.get("node_count"))),
        ("Parameters", _num(ref_info.get("param_count")), _num(cand_info.get("param_count"))),
        ("Opsets", _e(_opsets(ref_info)), _e(_opsets(cand_info))),
    ]
    parts.append(_table(["", "Reference", "Candidate"], rows))
    if src:
        parts.append(f"<p>Size ratio: <b>{dst / src:.3f}×</b>; change: {_bytes(dst - src)}</p>")

    # -- recipe
    parts.append("<h2>Recipe</h2>")
    line = artifact.spec.cli_line() if artifact.spec is not None else recipe_cli_line(recipe)
    parts.append("<p>Reproduce with the CLI:</p>" + _pre(line))
    parts.append(_pre(recipe.to_json()))
    timings = artifact.timings
    if timings:
        parts.append(_table(["Stage", "Seconds"], [(_e(k), _num(float(v), 3)) for k, v in timings.items()], {1}))

    # -- providers
    parts.append("<h2>Execution providers that ran</h2>")
    prov_rows = [("Build / optimize", _e(", ".join(artifact.providers) or "–"))]
    if evaluation is not None:
        prov_rows += [("Evaluation — reference", _e(", ".join(evaluation.providers_ref) or "–")),
                      ("Evaluation — candidate", _e(", ".join(evaluation.providers_cand) or "–"))]
    for b in bench or []:
        prov_rows.append((f"Benchmark — {_e(b.variant)} (bs {_e(b.batch_size)})", _e(", ".join(b.providers) or "–")))
    parts.append(_table(["Where", "Providers"], prov_rows))

    # -- warnings
    warnings = list(dict.fromkeys(list(artifact.warnings) + list(ref_info.get("warnings") or [])))
    parts.append("<h2>Warnings (the run and the source model)</h2>")
    parts.append("".join(f'<div class="warn">{_e(w)}</div>' for w in warnings) or "<p>None.</p>")

    # -- graph diff
    parts.append("<h2>Graph changes</h2>")
    fusions = diff.fusions
    parts.append("<h3>Fusions</h3>" + ("<ul>" + "".join(f"<li>{_e(f)}</li>" for f in fusions) + "</ul>"
                                       if fusions else "<p>No fusions detected.</p>"))
    parts.append(f"<p>{len(diff.removed)} nodes removed, {len(diff.added)} added, "
                 f"{len(diff.changed)} changed, {_num(diff.unchanged_count)} unchanged.</p>")
    deltas = diff.op_deltas
    if deltas:
        rows = []
        for d in sorted(deltas, key=lambda d: (d.get("delta", 0) == 0, d.get("key", ""))):
            delta = d.get("delta", 0)
            cls = "neg" if delta < 0 else "pos" if delta > 0 else ""
            rows.append((f"<code>{_e(d.get('key'))}</code>", _e(d.get("domain") or "ai.onnx"), _num(d.get("before")),
                         _num(d.get("after")), f'<span class="{cls}">{delta:+d}</span>'))
        parts.append("<h3>Op counts</h3>" + _table(["Op", "Domain", "Before", "After", "Δ"], rows, {2, 3, 4}))
    ib, ia = diff.initializer_bytes_before, diff.initializer_bytes_after
    if ib or ia:
        rows = [(_e(k), _bytes(ib.get(k, 0)), _bytes(ia.get(k, 0))) for k in sorted(set(ib) | set(ia))]
        parts.append("<h3>Weights by type</h3>" + _table(["dtype", "Before", "After"], rows, {1, 2}))

    # -- accuracy
    parts.append("<h2>Accuracy and output error</h2>")
    if evaluation is not None:
        parts.append(_accuracy(evaluation, verdict))
    else:
        parts.append("<p>Not evaluated.</p>")

    # -- benchmark
    if bench:
        parts.append("<h2>Benchmark (ms)</h2>")
        parts.append(f'<p class="muted">{_e(machine_text(machine))}</p>')
        comparison = compare_benchmarks(bench)

        def span(low: float | None, high: float | None) -> str:
            return "–" if low is None or high is None else f"{low:.3f}–{high:.3f}"

        rows = [(_e(r.summary.variant), _num(r.summary.batch_size), _num(r.summary.n), _num(r.summary.p50, 3),
                 _e(span(r.summary.p50_low, r.summary.p50_high)), _e(span(r.summary.p25, r.summary.p75)),
                 _num(r.summary.p90, 3), _num(r.summary.p99, 3), _num(r.summary.throughput_per_s, 1),
                 _e(r.speedup_text(is_baseline=r.summary.variant == comparison.baseline)),
                 _num(r.summary.peak_rss_mb, 1)) for r in comparison.rows]
        parts.append(_table(["Variant", "Batch", "Runs", "p50", "p50 95% interval", "IQR (p25–p75)", "p90", "p99",
                             "Throughput /s (batch ÷ p50)", f"Speed-up vs {comparison.baseline}",
                             "Peak RSS MB"], rows, {1, 2, 3, 6, 7, 8, 10}))
        parts.append("<p>Speed-up: the first variant's p50 ÷ this p50, the median over rounds in which the variants "
                     "ran in turn, with its 95% interval; an interval that holds 1 is no clear difference.</p>")
        parts.append("".join(f'<div class="warn">{_e(w)}</div>' for w in comparison.warnings))
    if charts_html:
        parts.append("<h2>Charts</h2>" + charts_html)

    body = "\n".join(parts)
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>\n{body}\n"
            f'<p class="muted">Generated by ortlab. This file is self-contained.</p></body></html>\n')


def _speed(speed: tuple[LatencySummary | None, LatencySummary | None] | None, machine: Machine | None = None) -> str:
    ref, cand = speed or (None, None)
    if cand is None:
        return ('<p class="speed"><b>Speed:</b> not timed yet (time it on the Compare or Benchmark page, or '
                "<code>ortlab bench</code>).</p>")
    p50 = (f"{cand.p50:.2f} ms p50 (95% interval {cand.p50_low:.2f}–{cand.p50_high:.2f}"
           if cand.p50_low is not None and cand.p50_high is not None else f"{cand.p50:.2f} ms p50 (")
    text = f"<b>Speed at batch 1:</b> {p50}, p90 {cand.p90:.2f}, {cand.n} runs)"
    sp = of_summaries(ref, cand) if ref is not None else None
    if ref is not None and sp is not None:
        s = sp.speedup
        how = f"{s:.2f}× faster" if s >= 1 else f"{1 / s:.2f}× slower"
        text += (f" against {ref.p50:.2f} ms (p90 {ref.p90:.2f}) for the source: <b>{how}</b> "
                 f"{_e(speed_interval_text(sp))}")
    return f'<p class="speed">{text}. <span class="muted" id="machine">{_e(machine_text(machine))}</span></p>'


def _verdict(v: Verdict) -> str:
    reasons = "".join(f"<li>{_e(r)}</li>" for r in v.reasons)
    word = {Level.BROKEN: "BROKEN — do not ship", Level.DEGRADED: "DEGRADED", Level.OK: "OK",
            Level.UNKNOWN: "UNKNOWN"}[v.level]
    if v.qualifier:
        word += f" ({v.qualifier})"
    interval = f", {_e(v.uncertainty.text)}" if v.uncertainty is not None and not v.edge else ""
    decided = (f'<div id="deciding">Decided by <b>{_e(v.deciding)}</b> = {_e(v.deciding_text)}{interval}</div>'
               if v.deciding else "")
    edge = f'<div id="edge"><b>{_e(v.edge)}</b></div>' if v.edge else ""
    parity = f'<div id="parity"><b>Optimization parity:</b> {_e(v.parity)}</div>' if v.parity else ""
    return (f'<div class="verdict verdict-{v.level.value}" id="verdict"><b>Verdict: {word}</b>{decided}'
            f"<ul>{reasons}</ul>{edge}{parity}</div>")


def _db(x: float) -> str:
    return "identical" if x == float("inf") else f"{x:.1f} dB"


def _opsets(info: dict) -> str:
    """The opsets of the domains the graph's nodes use ("ai.onnx 17, com.microsoft 1"). Domains an exporter
    imports but no node uses (ai.onnx.training, org.pytorch.aten) are only counted: listed, they alarm a reader."""
    opsets = info.get("opsets") or {}
    counts = info.get("op_counts")
    if counts is not None:
        used = {k.split("::", 1)[0] if "::" in k else "" for k in counts} | {""}
        unused = len([d for d in opsets if d not in used])
        opsets = {d: v for d, v in opsets.items() if d in used}
    else:
        unused = 0
    text = ", ".join(f"{d or 'ai.onnx'} {v}" for d, v in sorted(opsets.items())) or "–"
    return text + (f" (+{unused} more imported, used by no node)" if unused else "")


def _accuracy(ev: EvalReport, verdict: Verdict | None = None) -> str:
    """The accuracy table: the figure that decided ``verdict`` in its first row."""
    parts = []
    if ev.random_data:
        parts.append('<div class="alert">Evaluated on RANDOM inputs: these numbers say nothing about real '
                     "accuracy.</div>")
    rows: list[tuple[str, ...]] = []
    if verdict is not None and verdict.deciding:
        rows.append((f"<b>{_e(verdict.deciding)}</b> (decided the verdict)", "", f"<b>{_e(verdict.deciding_text)}</b>"))
    rows.append(("Samples", _num(ev.n_samples), ""))
    for label, ref, cand in (("Top-1 accuracy", ev.top1_accuracy_ref, ev.top1_accuracy_cand),
                             ("Top-5 accuracy", ev.top5_accuracy_ref, ev.top5_accuracy_cand)):
        if ref is not None or cand is not None:
            rows.append((label, _pct(ref), _pct(cand)))
    if ev.top1_agreement is not None:
        rows.append(("Top-1 agreement with reference", "", _pct(ev.top1_agreement)))
    if ev.top5_containment is not None:
        rows.append(("Top-5 containment", "", _pct(ev.top5_containment)))
    tm = ev.task
    if tm is not None:
        rows += [(f"Top-1 flips: confident / near-tie (margin {c.margin:g})", "",
                  f"{c.confident_flips()} / {c.near_tie_flips()}") for c in tm.classifications]
        rows += [(f"{_e(d.output)}: elements crossing {d.threshold:g}", "", _pct(d.crossing_fraction))
                 for d in tm.dense_maps]
        rows += [(f"{_e(b.output)}: detections F1 vs reference (precision / recall)", "",
                  "–" if b.f1 is None else f"{b.f1:.3f} ({_pct(b.precision)} / {_pct(b.recall)})") for b in tm.boxes]
        rows += [(f"{_e(b.output)}: score SQNR / box SQNR", "",
                  f"{_e(_db(b.score_sqnr_db))} / {_e(_db(b.box_sqnr_db))}") for b in tm.boxes]
        rows += [(f"{_e(q.output)}: decoded strings changed / CER", "",
                  f"{q.changed}/{q.n_samples} ({_pct(q.changed_fraction)}) / {_pct(q.cer)}") for q in tm.sequences]
        rows += [(f"{_e(e.output)}: cosine min / NN agreement", "",
                  f"{_num(e.min_cosine)} / {_pct(e.nn_agreement)}") for e in tm.embeddings]
        rows += [(f"{_e(x.output)} ({_e(x.dtype)}): values that differ", "", f"{x.n_different:,} of {x.n_elements:,}")
                 for x in tm.exact]
        parts.append(f"<p>Task: <b>{_e(tm.task.value)}</b> "
                     f"({_e('inferred: ' + tm.why if tm.inferred else 'given')})</p>")
    parts.append(_table(["", "Reference", "Candidate"], rows, {1, 2}))
    if ev.outputs:
        rows = [(_e(o.name), _num(o.max_abs), _num(o.mean_abs), _num(o.cosine, 6),
                 "identical" if o.identical else _num(o.sqnr_db, 2)) for o in ev.outputs]
        parts.append("<h3>Output error (candidate vs reference)</h3>" +
                     _table(["Output", "Max |Δ|", "Mean |Δ|", "Cosine", "SQNR dB"], rows, {1, 2, 3, 4}))
    if ev.per_class:
        rows = [(_e(c.get("class")), _num(c.get("n")), _pct(c.get("ref_acc")), _pct(c.get("cand_acc")))
                for c in ev.per_class]
        parts.append("<h3>Per class</h3>" + _table(["Class", "n", "Reference", "Candidate"], rows, {1, 2, 3}))
    return "".join(parts)
