"""The app's Run times its result against its source after the verdict (the run service's one path, as optimize)
and says a slower result is slower; Compare's speed card reads the figure the run stored."""

from __future__ import annotations

import pytest

pytest.importorskip("streamlit")

from tests.support.app_session import navigation_mode_like_the_server
from tests.ui.test_app import new_app

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def _server_like_navigation(monkeypatch):
    navigation_mode_like_the_server(monkeypatch)


def test_a_run_slower_than_its_source_is_named_slower_on_the_recipe_page_and_compare(home, monkeypatch):
    monkeypatch.setenv("ORTLAB_SPEED_CHECK_S", "2")
    at = new_app()
    at.switch_page("pages/recipe.py").run()
    assert at.checkbox(key="recipe.time_result").value  # on by default, as in the CLI
    at.radio(key="recipe.precision").set_value(at.radio(key="recipe.precision").options[2]).run()
    mode = at.radio(key="recipe.quant.mode")
    mode.set_value(next(v for v in (mode.value.__class__) if v.value == "dynamic")).run()
    at.multiselect(key="recipe.quant.op_types").set_value(["Conv"]).run()  # ConvInteger: far slower than Conv
    at.button(key="recipe.run").click().run()
    assert not at.exception, [e.value for e in at.exception]
    said = [w.value for w in at.warning if "Speed:" in w.value]
    assert said and said[0].startswith("Speed: slower than the source:") and "rounds at batch 1" in said[0], \
        [w.value for w in at.warning] + [i.value for i in at.info]

    at.switch_page("pages/compare.py").run()
    assert not at.exception, [e.value for e in at.exception]
    cards = {m.label: m.value for m in at.metric}
    assert cards["Speed-up (p50)"].endswith("× (slower)"), cards
    # one speed figure for the pair: the card's, said once beside it (the run's own message is not repeated here)
    said = [m.value for m in (*at.warning, *at.info, *at.caption) if "Speed:" in m.value]
    figure = cards["Speed-up (p50)"].split(" ")[0]
    assert len(said) == 1 and said[0].startswith("Speed: slower than the source") and figure in said[0], said


def test_the_setting_turns_the_timing_off(home, monkeypatch):
    monkeypatch.setenv("ORTLAB_SPEED_CHECK_S", "2")
    at = new_app()
    at.switch_page("pages/recipe.py").run()
    at.checkbox(key="recipe.time_result").uncheck().run()
    at.button(key="recipe.run").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert any("Finished fp32" in s.value for s in at.success)
    assert not [m for m in (*at.info, *at.warning) if "Speed:" in m.value]
