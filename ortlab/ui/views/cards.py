"""Big metric cards and small tables that summarise a model, an artifact or an evaluation."""

from __future__ import annotations

from typing import TYPE_CHECKING

import streamlit as st

from ortlab import api
from ortlab.api import EvalReport, OutputErrorMetrics as OutputError
from ortlab.core.text import format_bytes
from ortlab.api import Level, Verdict
from ortlab.ui.session.inert import html_text, md

if TYPE_CHECKING:
    from streamlit.elements.metric import DeltaColor

# background, text colour of the verdict banner: red broken, amber degraded, green ok, grey unknown
VERDICT_COLORS = {Level.BROKEN: ("#b00020", "white"), Level.DEGRADED: ("#f0a000", "#1a1a1a"),
                  Level.OK: ("#1b7f2a", "white"), Level.UNKNOWN: ("#6b6b6b", "white")}
VERDICT_ICONS = {Level.BROKEN: "✖", Level.DEGRADED: "⚠", Level.OK: "✔", Level.UNKNOWN: "?"}


def verdict_text(v: Verdict | None) -> str:
    """A verdict in a table cell: "✖ broken" (— when there is none)."""
    return "–" if v is None else f"{VERDICT_ICONS[v.level]} {v.level.value}"


def verdict_banner(v: Verdict, what: str = "Verdict") -> None:
    """A coloured banner with the level (qualified when on the edge or when optimization changed outputs), the
    reasons, the deciding figure's interval, "on the edge", and what graph optimization changed in its own block."""
    bg, fg = VERDICT_COLORS[v.level]
    reasons = "".join(f"<li>{html_text(r)}</li>" for r in v.reasons)
    level = v.level.value.upper() + (f" ({v.qualifier})" if v.qualifier else "")
    extra = ""
    if v.uncertainty is not None and not v.edge:  # the edge sentence says the interval too
        extra += (f'<div class="ortlab-verdict-interval">{html_text(v.deciding)}: {html_text(v.deciding_text)}, '
                  f"{html_text(v.uncertainty.text)}</div>")
    if v.edge:
        extra += f'<div class="ortlab-verdict-edge"><b>⚠ {html_text(v.edge)}</b></div>'
    if v.parity:
        extra += (f'<div class="ortlab-verdict-parity" style="border-top:1px solid {fg};margin-top:.4rem;'
                  f'padding-top:.3rem"><b>Optimization parity:</b> {html_text(v.parity)}</div>')
    st.markdown(f'<div class="ortlab-verdict ortlab-verdict-{v.level.value}" style="background:{bg};color:{fg};'
                f'padding:.7rem 1rem;border-radius:6px;margin-bottom:.6rem">'
                f"<b>{VERDICT_ICONS[v.level]} {html_text(what)}: {html_text(level)}</b>"
                f'<ul style="margin:.3rem 0 0 0">{reasons}</ul>{extra}</div>', unsafe_allow_html=True)


def human_count(n: int | None) -> str:
    """1234567 → '1.23M' (powers of 1000)."""
    if n is None:
        return "–"
    for div, unit in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if n >= div:
            return f"{n / div:.2f}{unit}"
    return str(n)


def pct(x: float | None, digits: int = 1) -> str:
    """0.123 → '12.3%'; None → '–'."""
    return "–" if x is None else f"{100 * x:.{digits}f}%"


def shape_text(shape) -> str:
    """A tensor shape as '[1, 3, ?, ?]' (? = unknown dim)."""
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


def sqnr_text(o: OutputError) -> str:
    """SQNR of one output ("identical" when the outputs are equal)."""
    return "identical" if o.identical else f"{o.sqnr_db:.1f} dB"


LONG_VALUE = 10

# plain glosses of the jargon the pages show, for help tooltips
GLOSS = {
    "SQNR": "SQNR (signal-to-quantization-noise ratio, in dB): how close the candidate's output is to the "
            "reference's; higher is closer, above 30 dB is usually fine.",
    "p50": "p50 is the median latency (half the runs were faster); p90 and p99: 90% and 99% of the runs were at "
           "least this fast.",
    "near-tie flip": "A flip is a sample whose top class changed. A near-tie flip happened where the reference's "
                     "two best classes were almost tied (softmax margin below the bar), so it says little; a "
                     "confident flip (margin at or above it) is a real error.",
    "QDQ": "QDQ: the int8 model holds QuantizeLinear/DequantizeLinear pairs around each quantized op; ONNX Runtime "
           "fuses them into int8 kernels when it loads the model.",
}


CARDS_PER_ROW = 4


def metric_row(items: list[tuple]) -> None:
    """One row of bordered metric cards: (label, value, delta, help[, delta_color]); delta_color "inverse"
    makes a decrease green (sizes, latency), "off" makes it grey. A delta of no change (written "±…", see
    :func:`signed_delta`) is grey and has no arrow."""
    cols = st.columns(len(items))
    for col, item in zip(cols, items):
        label, value, delta, help_ = item[:4]
        color: DeltaColor = item[4] if len(item) > 4 else "normal"
        unchanged = delta is not None and str(delta).startswith("±")
        if len(str(value)) > LONG_VALUE:  # wraps on a narrow card; the hover says it in one piece
            help_ = f"{md(value)}" + (f" — {help_}" if help_ else "")
        col.metric(label, value, delta=delta, help=help_, border=True, delta_color="off" if unchanged else color,
                   delta_arrow="off" if unchanged else "auto")


def signed_delta(value: float, unit: str, digits: int = 1) -> str:
    """``+1.2 pts`` / ``-0.4 pts``, or ``±0.0 pts`` when it rounds to zero (a card draws that grey, no arrow)."""
    text = f"{abs(value):.{digits}f}"
    if float(text) == 0.0:
        return f"±{text} {unit}"
    return f"{value:+.{digits}f} {unit}"


def model_cards(info) -> None:
    """Size, parameters, opset, node count and I/O count of a ``ModelInfo``."""
    opset = info.opsets.get("", info.opsets.get("ai.onnx"))
    extra = ", ".join(f"{d} {v}" for d, v in info.opsets.items() if d not in ("", "ai.onnx"))
    metric_row([
        ("Size", format_bytes(info.total_bytes), None,
         "File size including external data." + (" Has external data." if info.has_external_data else "")),
        ("Parameters", human_count(info.param_count), None, f"{info.param_count:,} weights in initializers."),
        ("Opset", str(opset), None, f"ai.onnx opset; other domains: {extra or 'none'}; IR version {info.ir_version}."),
        ("Nodes", f"{info.node_count:,}", None, f"{len(info.op_counts)} distinct (domain, op type) pairs."),
        ("Inputs / outputs", f"{len(info.inputs)} / {len(info.outputs)}", None, None),
    ])


def io_rows(info) -> list[dict]:
    """Rows for a table of the model's inputs and outputs."""
    rows = []
    for kind, items in (("input", info.inputs), ("output", info.outputs)):
        for t in items:
            rows.append({"": kind, "name": t.name, "dtype": t.dtype, "shape": shape_text(t.shape)})
    return rows


def weight_rows(info) -> list[dict]:
    """Rows of the model's weights by dtype and where they are stored: initializers, and (PP-OCR style exports)
    the float tensors held in Constant nodes."""
    rows = [{"dtype": k, "stored in": "initializers", "bytes": format_bytes(v)}
            for k, v in info.initializer_bytes.items()]
    if info.constant_bytes:
        rows.append({"dtype": "float", "stored in": "Constant nodes", "bytes": format_bytes(info.constant_bytes)})
    return rows


def text_width(rows: list[dict], column: str, minimum: int = 120) -> int:
    """Pixels a table column needs to show its longest value uncut (about 8 px a character, plus padding)."""
    longest = max((len(str(r.get(column, ""))) for r in rows), default=0)
    return max(minimum, 8 * max(longest, len(column)) + 24)


def io_columns(rows: list[dict] | None = None) -> dict:
    """Column configs of :func:`io_rows`: the shape column is as wide as its longest shape (symbolic dims such
    as "p2o.DynamicDimension.1" are long), so it is never cut; the table scrolls sideways instead."""
    return {"": st.column_config.TextColumn("", width="small"),
            "name": st.column_config.TextColumn("name", width="medium"),
            "dtype": st.column_config.TextColumn("dtype", width="small"),
            "shape": st.column_config.TextColumn("shape", width=text_width(rows or [], "shape", 300),
                                                 help="? = a dimension the model leaves open.")}


def spec_columns(rows: list[dict]) -> dict:
    """Column configs of the input-shapes table: the shapes and their sources are never cut."""
    return {c: st.column_config.TextColumn(c, width=text_width(rows, c))
            for c in ("model shape", "shape used", "from") if any(c in r for r in rows)}


def eval_cards(ev: EvalReport, ref_name: str, cand_name: str, verdict: Verdict | None = None,
               min_sqnr_db: float = 10.0) -> None:
    """Accuracy cards, the figure that decided ``verdict`` first (detections F1, changed strings, confident flips,
    nearest-neighbour agreement, threshold crossings, or SQNR) with its 95% interval; then top-1 of both and
    agreement; SQNR (for detectors the score and box channels apart, since box pixels dominate the whole output's
    SQNR), each flagged when below the policy's ``min_sqnr_db`` bar."""
    items: list[tuple] = []
    deciding = verdict.deciding if verdict is not None else ""
    if verdict is not None and deciding:
        u = verdict.uncertainty
        interval = f"{u.fmt(u.low)}–{u.fmt(u.high)} (95%)" if u is not None else None
        value = verdict.deciding_value
        flag = sqnr_flag(value, min_sqnr_db) if deciding.endswith(": SQNR") and value is not None else None
        items.append((deciding, verdict.deciding_text, flag or interval,
                      f"The figure that decided the verdict ({verdict.level.value})"
                      + (f"; {u.text}" if u is not None else "") + (f". {verdict.edge}" if verdict.edge else "."),
                      "normal" if flag else "off"))
    if ev.top1_accuracy_ref is not None:
        a, b = ev.top1_accuracy_ref, ev.top1_accuracy_cand
        items.append((f"Top-1 {ref_name}", pct(a), None, "Accuracy against the labels."))
        items.append((f"Top-1 {cand_name}", pct(b), None if b is None else signed_delta(100 * (b - a), "pts"),
                      "Accuracy against the labels; delta vs the reference."))
    if ev.top1_agreement is not None:
        items.append(("Top-1 agreement", pct(ev.top1_agreement), None,
                      "How often the candidate's top class equals the reference's."))
    tm = ev.task
    boxes = [b for kind in api.checks.task_kinds(tm) for b in kind.grouped_outputs(tm)] if tm is not None else []
    for bx in boxes[:1]:  # a group that decided the verdict has its card first already
        if deciding != f"{bx.output} scores: SQNR":
            items.append((f"Score SQNR ({bx.output})", sqnr_db_text(bx.score_sqnr_db),
                          sqnr_flag(bx.score_sqnr_db, min_sqnr_db),
                          "SQNR of the class-score channels alone, held to the same bar as whole outputs. "
                          + GLOSS["SQNR"]))
        if deciding != f"{bx.output} boxes: SQNR":
            items.append((f"Box SQNR ({bx.output})", sqnr_db_text(bx.box_sqnr_db), sqnr_flag(bx.box_sqnr_db, min_sqnr_db),
                          "SQNR of the 4 box channels (input pixels) alone, held to the same bar as whole outputs. "
                          + GLOSS["SQNR"]))
    floats = [o for o in ev.outputs if o.name not in {bx.output for bx in boxes}]
    if floats and not deciding.endswith(": SQNR"):
        worst = min(floats, key=lambda o: o.sqnr_db if o.sqnr_db == o.sqnr_db else float("-inf"))  # NaN first
        items.append(("SQNR (worst output)", sqnr_text(worst), sqnr_flag(worst.sqnr_db, min_sqnr_db),
                      GLOSS["SQNR"]))
    items.append(("Samples", str(ev.n_samples), None, None))
    for i in range(0, min(len(items), 8), CARDS_PER_ROW):  # at most 4 a row: labels stay on one or two lines at 1280 px
        metric_row(items[i:i + CARDS_PER_ROW])


def sqnr_flag(x: float, bar: float) -> str | None:
    """The flag of an SQNR card below the broken bar ("-0.6 dB below the 10 dB bar": red), else None."""
    if x != x or x < bar:  # NaN counts as below
        return f"{x - bar:+.1f} dB below the {bar:g} dB bar" if x == x else f"- NaN, below the {bar:g} dB bar"
    return None


def sqnr_db_text(x: float) -> str:
    """An SQNR in dB ("identical" for +inf)."""
    return "identical" if x == float("inf") else f"{x:.1f} dB"


def random_data_warning(where: str = "These results") -> None:
    """The visible warning every result made with random inputs carries."""
    st.warning(f"{where} used RANDOM input data: accuracy and ranges say nothing about real inputs.",
               icon=":material/warning:")


def op_delta_table(op_deltas: list[dict], ref_name: str, cand_name: str, show_all: bool = False) -> None:
    """Op counts before → after as a narrow HTML table (op, before, after, Δ) that fits half a 1280 px page:
    long op names break after their domain, and the reference and candidate names are said once above it (and
    on hover). Model text is escaped (:func:`html_text`)."""
    rows = [d for d in op_deltas if show_all or d["delta"]]
    if not rows:
        st.caption("No op counts changed.")
        return
    ref, cand = html_text(ref_name), html_text(cand_name)
    head = (f'<tr><th>op</th><th class="n" title="{ref}">before</th><th class="n" title="{cand}">after</th>'
            '<th class="n">Δ</th></tr>')
    body = "".join(
        f'<tr><td title="{html_text(d["key"])}">'
        + "::<wbr>".join(html_text(part) for part in str(d["key"]).split("::", 1))
        + f'</td><td class="n">{int(d["before"])}</td><td class="n">{int(d["after"])}</td>'
        f'<td class="n">{int(d["delta"]):+d}</td></tr>' for d in rows)
    st.markdown(
        "<style>.ortlab-op-deltas{max-height:26rem;overflow-y:auto}"
        ".ortlab-op-deltas table{width:100%;border-collapse:collapse;font-size:.85rem}"
        ".ortlab-op-deltas th,.ortlab-op-deltas td{padding:.2rem .45rem;border-bottom:1px solid #e6e6e6;"
        "overflow-wrap:anywhere;text-align:left;vertical-align:top}"
        ".ortlab-op-deltas th{position:sticky;top:0;background:#fafafa}"
        ".ortlab-op-deltas .n{text-align:right;white-space:nowrap;width:3.6rem}</style>"
        f'<div class="ortlab-op-deltas"><table><thead>{head}</thead><tbody>{body}</tbody></table></div>',
        unsafe_allow_html=True)
    st.caption(f"before: {md(ref_name)} · after: {md(cand_name)}")
