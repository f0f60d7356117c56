"""The Tune page's drawing: a search started through :func:`ortlab.api.tuning.start_tune` (on a thread; synchronously
under tests), its Pareto chart filled as trials finish, and the recommendation.

The job (:class:`ortlab.api.TuneJob`) is this session's job ``"tune"``; the page drains its finished ``Trial``s
into ``items`` (their Pareto flags are updated in place by the tuner); its result is the ``TuneResult``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import plotly.graph_objects as go

from ortlab import api
from ortlab.api import Target, TuneJob, TuneSettings, UsageError
from ortlab.ui.session import actions, state
from ortlab.ui.views import charts
from ortlab.ui.jobs.status import sync_jobs
from ortlab.core.errors import DataError
from ortlab.core.errors import OrtlabError

OBJECTIVES = ("latency", "size")
POLICIES = ("verdict", "min SQNR")


@dataclass(frozen=True)
class TuneChoice:
    """What the person picked on the page."""

    target: str = "cpu"
    objective: str = "latency"
    budget_cpu_s: float = api.tuning.DEFAULT_CPU_BUDGET_S  # CPU seconds, as ``ortlab tune``; wall seconds on a cluster
    policy: str = "verdict"  # "verdict": the session's verdict policy (Compare); "min SQNR": only the SQNR bar
    min_sqnr_db: float = 0.0  # 0: the task's own measure decides (plain tensors: 20 dB), as the CLI's default
    max_trials: int = 0  # 0: no limit
    bench_s: float = 1.0
    exclusion_steps: int = 6
    on_cluster: bool = False  # trials on the Ray cluster the server's operator configured; False: this machine
    timing_resource: str = ""  # the custom resource of the cluster's node(s) that time the trials


FORM_KEYS = {"target": "tune.target", "objective": "tune.objective", "budget_cpu_s": "tune.budget",
             "policy": "tune.policy",
             "min_sqnr_db": "tune.min_sqnr", "max_trials": "tune.max_trials", "bench_s": "tune.bench_s",
             "exclusion_steps": "tune.steps", "on_cluster": "tune.on_cluster", "timing_resource": "tune.timing_resource"}


def form_values(choice: TuneChoice) -> dict[str, object]:
    """The Tune form's widget values (by key) that show ``choice``: the running search's settings while it runs,
    the last search's afterwards."""
    out: dict[str, object] = {}
    for name, key in FORM_KEYS.items():
        value = getattr(choice, name)
        out[key] = int(value) if name in ("budget_cpu_s", "max_trials", "exclusion_steps") else value
    out["tune.min_sqnr"] = float(choice.min_sqnr_db)
    out["tune.bench_s"] = float(choice.bench_s)
    return out


def start_tune(choice: TuneChoice) -> TuneJob:
    """Start the search on the current model with the session's calibration/evaluation data."""

    if state.model_path() is None:
        raise DataError("Choose a model on the Model page first.")
    spec = actions.run_spec(actions.DEMO_RECIPE)  # how the session's data is referenced for a child process
    if spec.evaluation is None:
        raise DataError("Tuning needs evaluation data to judge each recipe: choose data on the Data page.")
    cluster, timing_resource = actions.server_cluster(choice.on_cluster), choice.timing_resource.strip() or None
    if timing_resource and not cluster:
        raise UsageError("The timing resource names a node of a Ray cluster: turn on the server's cluster too.")
    vp = actions.verdict_policy()  # the same verdict as Compare; the SQNR bar is this search's extra objective
    bar = float(choice.min_sqnr_db) or None
    policy = (api.tuning.verdict_policy(vp, bar) if choice.policy == "verdict"
              else api.tuning.sqnr_policy(bar or api.tuning.DEFAULT_MIN_SQNR_DB))
    budget_s, budget_cpu_s = api.tuning.budget_limits(float(choice.budget_cpu_s), ray=bool(cluster))
    settings = TuneSettings(budget_s=budget_s, budget_cpu_s=budget_cpu_s, objective=choice.objective,
                            target=Target(choice.target),
                            bench_s=float(choice.bench_s), exclusion_steps=int(choice.exclusion_steps),
                            verify_samples=spec.verify_samples, max_trials=int(choice.max_trials) or None,
                            ray=cluster, timing_resource=timing_resource)
    job = api.tuning.start_tune(spec.model, spec.calibration, spec.evaluation, settings, policy, preprocess=spec.preprocess,
                                sample=spec.sample, workspace=actions.workspace(), background=not sync_jobs(),
                                meta={"choice": choice, "model": state.model_label()})
    if sync_jobs():
        for _ in job.follow():
            pass
    job.drain()
    state.set_job("tune", job)
    return job


def plural(n: int, word: str) -> str:
    """``"1 trial"``, ``"3 trials"``."""
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def headline(result, items: Sequence = ()) -> tuple[str, str]:
    """(level, text) of a finished, cancelled or empty search, as the engine words it (``tuning.headline``)."""
    h = api.tuning.headline(result, len(items))
    return h.level, h.text


def _x(t, objective: str) -> float | None:
    if objective == "size":
        return (t.size_bytes or 0) / 1e6 if t.size_bytes else None
    return t.speedup


def speed_bar(t) -> tuple[float, float]:
    """How far the speed-up's 95% interval reaches below and above the trial's speed-up on the chart (0, 0 when it
    has no single interval: not timed, timed apart, or a mean over several batch sizes)."""
    if len(t.speed) != 1 or not t.speed[0].paired or not t.speedup:
        return 0.0, 0.0
    lo, hi = t.speed[0].speedup_range
    return max(0.0, t.speedup - lo), max(0.0, hi - t.speedup)


def speed_hover(t) -> str:
    """The trial's speed in the chart's hover: its speed-up with interval and rounds, re-timed or not."""
    if not t.speed:
        return "speed not timed"
    return f"speed {t.speed_text()}" + (" · re-timed at the end" if t.retimed else "")


def deciding_measure(trials: Sequence) -> str:
    """The measure the search decides by: the task's own (detection F1, no confident flip, strings kept, NN
    agreement…) when a finished trial has one, else "" (plain tensors: the worst output's SQNR)."""
    return next((t.task_measure for t in trials if t.status == "done" and t.task_value is not None
                 and t.task_measure), "")


def has_points(trials: Sequence, objective: str = "latency") -> bool:
    """Whether the chart has a trial to draw (before the first trial and after a cancel with none, no chart: an
    empty one has meaningless axes)."""
    return any(t.status == "done" and _x(t, objective) is not None for t in trials)


def progress(spent: float, budget_s: float, finished: int, cpu: bool = False) -> tuple[float, str]:
    """The progress bar's share and text (``spent`` of ``budget_s``: CPU seconds with ``cpu``, else wall seconds);
    past the budget (the last trial and the finalists' re-timing finish) the text says so rather than "164 s of
    150 s"."""
    trials = plural(finished, "trial") + " finished"
    unit = "CPU s" if cpu else "s"
    if spent <= budget_s:
        return min(1.0, spent / max(1.0, budget_s)), f"{spent:.0f} {unit} of {budget_s:.0f} {unit} · {trials}"
    return 1.0, (f"budget of {budget_s:.0f} {unit} spent: finishing the running trial and re-timing the finalists "
                 f"({spent - budget_s:.0f} {unit} over) · {trials}")


def search_progress(task: TuneJob) -> tuple[float, str]:
    """:func:`progress` of a running search in the measure its budget counts: CPU seconds on this machine, wall
    seconds on a cluster."""
    choice = task.meta["choice"]
    cpu = not choice.on_cluster
    return progress(task.cpu_used if cpu else task.elapsed, choice.budget_cpu_s, len(task.items), cpu=cpu)


def pareto_figure(trials: Sequence, objective: str = "latency", recommended=None) -> go.Figure:
    """Speed-up (or size in MB; the speed-up each trial's latest timing gave, re-timed finalists' at the end, with
    its 95% interval as a bar) against the measure that decides (:func:`deciding_measure`, with its 95% interval as
    a bar; the worst output's SQNR for plain tensors); marker size grows with the file size, Pareto-optimal trials
    drawn as outlined stars under the other trials' circles (a star never hides a circle); ``recommended`` (a trial
    the search recommends; None when it recommends none) is ringed and named in the legend; hover: the trial, its
    recipe and its numbers. A trial whose model is an earlier one's (``same_as``) is that trial's point."""
    done = [t for t in trials if t.status == "done" and t.same_as is None and _x(t, objective) is not None]
    sizes = [t.size_bytes or 0 for t in done]
    big = max(sizes) if sizes else 1
    measure = deciding_measure(done)

    def y(t) -> float | None:
        if measure:
            return t.task_value
        if t.sqnr_db is None:
            return 0.0
        return 99.0 if math.isinf(t.sqnr_db) else float(t.sqnr_db)

    def y_text(t) -> str:
        return charts.plain(t.task_text() or f"{measure} not measured") if measure else \
            ("SQNR identical" if t.sqnr_db is not None and math.isinf(t.sqnr_db) else
             f"SQNR {t.sqnr_db:.1f} dB" if t.sqnr_db is not None else "SQNR not measured")

    def hover(pts) -> dict:
        out: dict[str, object] = {"customdata": [[charts.plain(t.label), t.index, (t.size_bytes or 0) / 1e6, t.p50_ms or 0.0,
                               "accepted" if t.accepted else "rejected", charts.plain(speed_hover(t)), y_text(t)]
                                                 for t in pts],
               "hovertemplate": "trial %{customdata[1]}: %{customdata[0]}<br>%{customdata[6]} · %{customdata[2]:.2f} "
                                "MB · p50 %{customdata[3]:.2f} ms · %{customdata[4]}<br>%{customdata[5]}<extra></extra>"}
        if objective == "latency":  # the speed-up's 95% interval as a bar (one batch size; none for a mean of several)
            bars = [speed_bar(t) for t in pts]
            out["error_x"] = {"type": "data", "symmetric": False, "array": [b[1] for b in bars],
                              "arrayminus": [b[0] for b in bars], "thickness": 1.5, "width": 4}
        if measure:  # the deciding measure's 95% interval on the samples the search chooses on
            out["error_y"] = {"type": "data", "symmetric": False, "thickness": 1.5, "width": 4,
                              "array": [max(0.0, (t.task_high or t.task_value or 0) - (t.task_value or 0)) for t in pts],
                              "arrayminus": [max(0.0, (t.task_value or 0) - (t.task_low if t.task_low is not None
                                                                              else t.task_value or 0)) for t in pts]}
        return out

    fig = go.Figure()
    for pareto in (True, False):  # stars first: the circles drawn after them stay in sight
        pts = [t for t in done if bool(t.pareto) == pareto]
        fig.add_trace(go.Scatter(
            x=[_x(t, objective) for t in pts], y=[y(t) for t in pts], mode="markers",
            name="Pareto front" if pareto else "other trials",
            marker={"size": [10 + 18 * (t.size_bytes or 0) / max(1, big) for t in pts],
                    "color": [charts.PALETTE[2] if t.accepted else charts.PALETTE[3] for t in pts],
                    "symbol": "star" if pareto else "circle", "line": {"width": 2 if pareto else 1, "color": "#000"},
                    "opacity": 0.55 if pareto else 0.9},
            **hover(pts)))
    best = next((t for t in done if recommended is not None and t.index == recommended.index), None)
    if best is not None:
        fig.add_trace(go.Scatter(
            x=[_x(best, objective)], y=[y(best)], mode="markers", name=f"recommended: trial {best.index}",
            marker={"size": 40, "symbol": "circle-open", "color": "#000", "line": {"width": 3}}, **hover([best])))
    fig.update_layout(xaxis_title="speed-up vs fp32 (×)" if objective == "latency" else "file size (MB)",
                      yaxis_title=f"{measure} (95% interval)" if measure else "SQNR of the worst output (dB)",
                      legend={"orientation": "h"})
    return charts.style(fig, "Trials: accuracy against " + ("speed" if objective == "latency" else "size"))


def trial_columns() -> dict:
    """``st.dataframe`` column configs of :func:`trial_rows`: the shown columns fit the main column at 1280 px
    (about 820 px); the stage, task measure, bare speed-up, p50 and Pareto flag (the chart's stars) start hidden:
    the table's column menu shows them."""
    import streamlit as st

    num, text = st.column_config.NumberColumn, st.column_config.TextColumn

    def hidden(config: Mapping[str, object]) -> dict[str, object]:
        return {**config, "hidden": True}

    return {
        "trial": num("trial", width=45, pinned=True), "History run": text("run", width=50),
        "recipe": text("recipe", width=130, help="Full recipe on hover."), "stage": hidden(text("stage")),
        "verdict": text("verdict", width=75), "meets bar": text("bar", width=45, help="Meets this search's bar."),
        "task": text("task (95%)", width=150, help="The task's measure (the chart's y-axis) on the samples the search "
                                                   "chooses on, with its 95% interval; what it rests on: the evidence "
                                                   "column (column menu)."),
        "evidence": hidden(text("evidence")),
        "SQNR dB": hidden(num("SQNR dB", format="%.1f")),
        "speed-up": hidden(num("speed-up")),
        "speed (interleaved p50)": text("speed vs fp32", width=200, help="Interleaved p50 ratio against the fp32 "
                                                                          "source with its 95 % interval."),
        "p50 ms": hidden(num("p50 ms")), "MB": num("MB", width=55, format="%.2f"),
        "Pareto": hidden(text("Pareto")), "note": text("note", width=70, help="Why a trial failed or was skipped."),
        "vs default": hidden(text("vs default", help="The paired comparison with the default (trial 1) on the same "
                                                     "samples.")),
    }


def trial_rows(trials: Sequence) -> list[dict]:
    """One row per trial for the table under the chart."""
    return [{"trial": t.index, "History run": f"#{t.run_id}" if t.run_id is not None else "",
             "recipe": t.label, "stage": t.stage, "verdict": t.level or t.status,
             "meets bar": "yes" if t.accepted else "no",
             "task": _task_cell(t), "evidence": f"{t.task_measure}: {t.evidence}" if t.evidence else "",
             "SQNR dB": None if t.sqnr_db is None else (999.0 if math.isinf(t.sqnr_db) else round(t.sqnr_db, 1)),
             "speed-up": round(t.speedup, 2) if t.speedup else None, "speed (interleaved p50)": t.speed_text(),
             "p50 ms": t.p50_ms,
             "MB": round((t.size_bytes or 0) / 1e6, 3), "Pareto": "★" if t.pareto else "",
             "note": t.note or ("" if t.status == "done" else t.verdict), "vs default": t.vs_default} for t in trials]


def _task_cell(t) -> str:
    """``0.946 (0.921–0.965)``: the measure the chart draws, with its interval; the measure's name heads the chart's
    axis (all trials share it)."""
    if t.task_value is None:
        return ""
    if t.task_low is None or t.task_high is None:
        return f"{t.task_value:.3f}"
    return f"{t.task_value:.3f} ({t.task_low:.3f}–{t.task_high:.3f})"


def pick_cli_line(trial) -> str:
    """The ``ortlab optimize`` line of a trial as a page shows it (:func:`actions.cli_line` of the History run it
    recorded: workspace paths from ``"$ORTLAB_HOME"``, a bundled sample by name, continued with `` \\``); the
    engine's full-path line when its run is no longer in History."""
    if trial.run_id is not None:
        try:
            return actions.cli_line(actions.history().get(trial.run_id), "OUT.onnx")
        except OrtlabError:  # deleted from History since
            pass
    return trial.cli_line


def open_on_compare(trial) -> None:
    """Add the trial's run (from History) to the session's artifacts and make it Compare's candidate."""

    if trial.run_id is None:
        raise OrtlabError("This trial has no recorded run to open.")
    actions.load_run(actions.history().get(trial.run_id))
