"""Recipe: precision, target, graph optimization and quantization knobs, checked before anything runs."""

import streamlit as st

from ortlab.api import Finding, OptLevel, Precision, QuantConfig, QuantMode, Recipe, Target
from ortlab import api
from ortlab.ui.session import actions, state
from ortlab.ui.views.forms import dataclass_form, set_form_values
from ortlab.ui.session.guard import engine_errors
from ortlab.ui.session.inert import md
from ortlab.ui.jobs.progress_view import demo_button, recipe_job_panel, recipe_running, show_flash
from ortlab.ui.session.router import require_model, require_router

require_router()
st.title(":material/science: Recipe")
show_flash()
info = require_model()

demo_button("recipe")
recipe_job_panel("recipe", runs="demo")  # the demo's progress beside its button; a recipe's below "Run recipe"

PRESETS = {
    "int8 static QDQ · cpu (fast CPU path)": actions.DEMO_RECIPE,
    "int8 dynamic · MatMul/Gemm only": api.recipes.advised_recipe(Recipe(precision=Precision.INT8,
                                                                         quant=QuantConfig(mode=QuantMode.DYNAMIC))),
    "fp16 · gpu": Recipe(precision=Precision.FP16, target=Target.GPU),
    "fp32 · graph optimization only": Recipe(opt_level=OptLevel.EXTENDED),
}
c1, c2 = st.columns([3, 1], vertical_alignment="bottom")
preset = c1.selectbox("Start from a preset", list(PRESETS), index=None, key="recipe_preset",
                      placeholder="Keep the settings below")
model_ops = sorted({op for (_, op) in info.op_counts})
form_options = {"quant.op_types": model_ops, "quant.op_types_to_exclude": model_ops}
if c2.button("Load preset", key="recipe_load_preset", disabled=preset is None) and preset is not None:
    state.set_recipe(PRESETS[preset])
    set_form_values(Recipe, PRESETS[preset], "recipe", options=form_options)

with st.container(border=True):
    recipe = dataclass_form(
        Recipe, state.recipe(), "recipe", columns=3, options=form_options,
        extra_when={"quant": {"precision": ["int8"]}}, nested_titles={"quant": "Quantization"},
    )
state.set_recipe(recipe)

with engine_errors("Checking the recipe"):
    findings = api.recipes.findings_here(recipe)  # what a run of it here checks first, this CPU's int8 facts too
ds = state.dataset()
errors: list[Finding | None] = list(api.recipes.errors_of(findings))  # None: the missing calibration data
if api.recipes.lacks_calibration_data(recipe, ds is not None):
    st.error(api.recipes.NO_CALIBRATION_DATA)
    errors.append(None)
cpu_said = any(f.field == "quant.reduce_range" for f in findings)
if recipe.precision == Precision.INT8 and recipe.target == Target.CPU and not cpu_said:  # why reduce-range is as it is
    st.caption("This CPU: " + md(" ".join(api.machine.hardware_advice().notes)))
for f in findings:
    {"error": st.error, "warning": st.warning}.get(f.level, st.info)(f"**{md(f.field)}** — {md(f.message)}")
if ds is not None and ds.is_random:
    st.warning("The selected data set is RANDOM: calibration ranges and accuracy will be meaningless.")
nothing = recipe.is_dynamic and not (
    set(recipe.quant.effective_op_types()) - set(recipe.quant.op_types_to_exclude)) & set(model_ops)
if nothing:
    st.warning(f"Nothing to quantize: int8 dynamic quantizes {', '.join(recipe.quant.effective_op_types())} nodes "
               "and this model has none. Use int8 static (QDQ) for Conv models, or pick op types under "
               "Quantization.")
if not any(f.level in ("error", "warning") for f in findings) and not errors and not nothing:
    st.success("This recipe is valid here.")

data_col, timing_col = st.columns(2)  # one row, so the run's progress below still opens within a laptop's screen
data_col.markdown(f"**Data:** {md(state.dataset_label())}")
check = actions.speed_check()
timed = timing_col.checkbox("Time the result against its source after the verdict", value=check.enabled,
                    key="recipe.time_result",
                    help=f"Both models timed interleaved at batch 1 for {check.seconds:g} s in all, so a result slower "
                         "than its source is named so (ortlab optimize does the same; --no-timing skips it).")
state.set_ui("time_result", timed)
c1, c2 = st.columns([1, 3])
if c1.button("▶ Run recipe", key="recipe.run", type="primary", disabled=bool(errors) or recipe_running(),
             help="Fix the errors above first." if errors else "Runs in the background; you can keep browsing."):
    with engine_errors("Starting the run"):
        actions.start_recipe_job(recipe)
        st.rerun()
# 3/4 of the page; left out while a run goes (an expander keeps its open state across reruns, so it cannot be
# folded), so the run's progress below opens within a laptop's screen
if recipe_running():
    c2.caption("The same run from the command line: here again when this run ends.")
else:
    with c2.expander("The same run from the command line", expanded=True):
        st.code(actions.spec_cli_line(actions.run_spec(recipe), width=64), language="bash", wrap_lines=True)
recipe_job_panel("recipe_run", runs="recipe")  # the progress where the person just clicked

arts = actions.model_artifacts()  # this model's runs only; other models' runs are on History
if arts:
    st.subheader(f"Runs of {md(state.model_label())} in this session")
    rows = [{"run": a.run_id, **actions.run_summary(a), "created": a.created_at.replace("T", " ")[:16]}  # as History
            for a in reversed(arts)]
    if all(r["task metric"] == "–" for r in rows):
        rows = [{k: v for k, v in r.items() if k != "task metric"} for r in rows]
    st.dataframe(rows, hide_index=True, width="stretch")
