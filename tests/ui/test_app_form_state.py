"""Issue 38 (10): a preset written into a form's widgets (set_form_values) draws them without a default beside the
value Session State holds: the server log had "The widget with key "pre.size" was created with a default value but
also had its value set via the Session State API"."""

from __future__ import annotations

import pytest

pytest.importorskip("streamlit")

from tests.support.app_session import started_app
from tests.ui.test_app import TIMEOUT


def test_presets_written_into_forms_log_no_session_state_warning(home, monkeypatch):
    from streamlit.elements.lib import policies

    logged: list[str] = []
    monkeypatch.setattr(policies._LOGGER, "warning", lambda msg, *args, **kw: logged.append(msg % args))

    def run(at):
        monkeypatch.setattr(policies, "_shown_default_value_warning", False)  # Streamlit says it once per process
        return at.run()

    at = started_app(monkeypatch, TIMEOUT)
    at.switch_page("pages/data.py")
    run(at)
    at.selectbox(key="data.preset").set_value("imagenet")
    run(at)
    assert at.text_input(key="pre.size").value == "32, 32" and at.number_input(key="pre.channels").value == 1
    run(at)
    at.switch_page("pages/recipe.py")
    run(at)
    at.selectbox(key="recipe_preset").set_value(at.selectbox(key="recipe_preset").options[1])
    run(at)
    at.button(key="recipe_load_preset").click()
    run(at)
    assert at.radio(key="recipe.precision").value.value == "int8"
    run(at)
    assert not at.exception, [e.value for e in at.exception]
    assert not [m for m in logged if "Session State API" in m], logged
