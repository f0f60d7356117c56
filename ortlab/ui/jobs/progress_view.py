"""Draw a background job's progress by stage, poll it from a fragment, and hand its result to the page."""

from __future__ import annotations

import re

import streamlit as st

from ortlab.api import Level
from ortlab import api
from ortlab.ui.session import actions, state
from ortlab.ui.session.guard import engine_errors, error_message, show_message
from ortlab.ui.session.inert import md
from ortlab.ui.jobs.status import CANCELLED, DONE, FAILED, Handle

# a recipe's stages are labelled by the engine (ortlab.runs.pipeline); a benchmark job's here
STAGE_TITLES = {"queued": "Waiting for the benchmark slot", **api.recipes.stage_labels(), "bench": "Benchmark",
                "memory": "Peak memory", "speed": "Speed against the source"}


def _stems(text: str) -> set[str]:
    return {w[:4] for w in re.findall(r"[a-z]+", text.lower()) if len(w) > 3}


def stage_text(title: str, count: str, message: str | None) -> str:
    """A stage bar's text: its title, its n/N and the event's message, unless the message only says the title
    again ("Bias correction 10/10 — bias correction 10/10", "Check recipe — Checking the recipe…")."""
    text = f"{title}{count}"
    if not message or _stems(message) <= _stems(title):
        return text
    return f"{text} — {message}"


def draw_stages(job: Handle) -> None:
    """One progress bar per stage, all of a recipe's stages from the start (n/N where the stage counts units)."""
    for stage in job.stages:
        ev = job.progress.get(stage)
        if stage == "queued" and job.state != "queued":  # it left the queue: the "queued behind" text is stale
            if ev is not None:
                st.progress(1.0, text=":material/check_circle: Waited for the benchmark slot")
            continue
        if ev is None:
            st.progress(0.0, text=f":material/radio_button_unchecked: {STAGE_TITLES.get(stage, stage)}")
            continue
        frac = ev.fraction or 0.0
        count = f" {ev.done}/{ev.total}" if ev.total and ev.total > 1 else ""
        mark = ":material/check_circle:" if frac >= 1.0 else ":material/hourglass_top:"
        st.progress(frac, text=f"{mark} {stage_text(STAGE_TITLES.get(stage, stage), count, ev.message)}")


def recipe_running() -> bool:
    """Whether this session's recipe run is still going."""
    job = state.job("recipe")
    return job is not None and not job.done


DEMO_ONLY_SAMPLES = "The demo runs on the bundled samples, with their own images."
PROGRESS_PANEL_KEY = "run_progress_"  # + the page: a running recipe's panel (sidebar.py's CSS names the prefix)
DEMO_HELP = ("Quantize the sample to int8 (static, QDQ, calibrated on the sample's images), apply graph optimization, "
             "verify it against the original and open Compare.")
NEXT_STEPS = {"data": "choose its data on the Data page", "recipe": "run a recipe on the Recipe page"}


def demo_note(here: str | None) -> str:
    """What the demo is and, for a model that is not a bundled sample, the next steps, without sending the user
    to the page ``here`` ("model", "recipe", "compare") they are on."""
    steps = [text if page != here else "run a recipe here" for page, text in NEXT_STEPS.items()]
    return f"{DEMO_ONLY_SAMPLES} For this model, {' and '.join(steps)}."


def demo_button(here: str | None = None) -> None:
    """The one primary button that runs the demo recipe on the current bundled sample (with the sample's own
    data) and lands on Compare; for other models no button (a grey one would offer nothing), a note with the
    next steps instead. ``here``: the page it is drawn on."""
    with engine_errors("Looking up the bundled sample"):
        sample = actions.demo_sample()
    if sample is None:
        if state.model_info() is not None:
            st.caption(demo_note(here))
        return
    running = recipe_running()
    # started in the click's callback, so the rerun it makes draws the button disabled and without its tooltip:
    # the pointer stays on the button, and the tooltip the click left open sat over the intro for the whole run
    st.button(actions.DEMO_LABEL, key="demo_run", type="primary", disabled=running,
              help=None if running else DEMO_HELP, on_click=_start_demo)


def _start_demo() -> None:
    with engine_errors("Starting the demo"):
        actions.start_demo_job()


def recipe_job_panel(where: str, runs: str = "all") -> None:
    """Progress of this session's recipe run (polled every 0.5 s), then its outcome; after a demo run it
    lands on Compare. ``where`` keeps widget keys unique per page; ``runs`` ("all", "demo" or "recipe") draws
    only the demo's or only the other runs (so a page can show each beside the button that started it)."""
    # Always one container, so the elements below keep their place in the page and an embedded viewer
    # (Netron's iframe) is not reloaded when a run starts or ends.
    with st.container():
        job = state.job("recipe")
        demo = job is not None and bool(job.meta.get("land_on_compare"))
        if runs == "all" or (runs == "demo") == demo:
            _recipe_job(where)


def _recipe_job(where: str) -> None:
    job = state.job("recipe")
    if job is None:
        return
    if not job.done:
        @st.fragment(run_every=0.5)
        def poll() -> None:
            job.drain()
            rerun_when_done(job.done)
            st.caption(f"Running for {job.elapsed:.0f} s")
            draw_stages(job)
            if job.cancel_requested:
                st.caption("Cancelling: the run's process is being stopped and its folder removed…")

        # keyed: the CSS keeps this panel at full opacity while its fragment reruns (no grey "stale" fade)
        with st.container(border=True, key=f"{PROGRESS_PANEL_KEY}{where}"):
            # the title and Cancel are drawn once, above the part that redraws every 0.5 s: the button stays the
            # same element in the same place, so a click lands on it however busy the server is (below a panel that
            # grows or shrinks, it moved under the pointer); its callback cancels before anything else of the rerun
            st.markdown(f"**Running {md(job.meta['recipe'].label())} on {md(job.meta.get('model', ''))}**")
            st.button(":material/cancel: Cancel", key=f"{where}.cancel_recipe", disabled=job.cancel_requested,
                      on_click=_cancel, args=(job,))
            poll()
        return
    job.drain()
    mine = job.meta.get("model_sha", state.model_key()) == state.model_key()
    if job.state == DONE:
        first_time = not job.handled
        a = actions.finish_recipe_job(job)
        level, text = finish_message(job.result, job.meta['recipe'].label(), job.elapsed)
        if job.cancel_requested:  # the run was complete before its stop reached it: kept, and no page switch
            st.info("Cancel came after the run had finished its result; the result is kept.")
        elif first_time and job.meta.get("land_on_compare") and mine:
            # Compare draws the verdict itself (its banner, first): the landing note says only what ran, once
            state.flash(f"Ran {job.meta['recipe'].label()} in {job.elapsed:.1f} s; its verdict is above.", "caption")
            st.switch_page("pages/compare.py")
        if a is not None:
            where = "see Compare and History" if mine else f"select {job.meta.get('model', 'its model')} to compare it"
            show_message(level, f"{text} — {where}.")
        speed = getattr(job.result, "speed", None)
        # after the verdict: a result slower than its source is said as a warning; not on Compare, whose speed card
        # shows the pair's one figure (this timing, or a newer benchmark of the pair: never both at once)
        if speed is not None and where != "compare":
            show_message("warning" if speed.slower else "info", speed.sentence())
    elif not mine:  # a failed or cancelled run of another model: its message stays with that model
        state.set_job("recipe", None)
    elif job.state in (FAILED, CANCELLED):
        level, text = error_message("Running the recipe", job.error)
        show_message(level, text)
        if st.button("Dismiss", key=f"{where}.dismiss_recipe"):
            state.set_job("recipe", None)
            st.rerun()


def _cancel(job: Handle) -> None:
    job.cancel()
    st.toast("Cancelling: the run's process is stopped and its folder removed…")


def finish_message(artifact, label: str, seconds: float) -> tuple[str, str]:
    """(level, text) of a finished run by its verdict: only an ok result gets a green "Finished"; broken is red,
    degraded amber, unknown (not evaluated) blue."""
    v = actions.run_verdict(artifact) if artifact is not None else None
    if v is None:
        return "info", f"Run of {label} ended after {seconds:.1f} s."
    reasons = "; ".join(v.reasons)
    if v.level == Level.OK:
        return "success", f"Finished {label} in {seconds:.1f} s: verdict OK ({reasons})"
    if v.level == Level.BROKEN:
        return "error", f"{label} ran in {seconds:.1f} s but the result is BROKEN — do not ship it: {reasons}"
    if v.level == Level.DEGRADED:
        return "warning", f"{label} ran in {seconds:.1f} s; the result is DEGRADED: {reasons}"
    return "info", f"{label} ran in {seconds:.1f} s; verdict UNKNOWN: {reasons}"


def rerun_when_done(done: bool) -> None:
    """In a polling fragment, first thing: once its job is done, rerun the whole page and draw nothing here. A
    fragment run the browser asked for just before the page changed (the demo lands on Compare) is still served;
    had it drawn, its elements would be placed by the old page's layout into the new one, and the browser stops
    with "Bad delta path index" and a blank page."""
    if done:
        st.rerun()


def show_flash() -> None:
    """Show (once) a message stored by a previous page."""
    msg = state.flash()
    with st.container():  # always one block, so what follows keeps its place (Netron is not reloaded)
        if msg:
            show_message(*msg)
