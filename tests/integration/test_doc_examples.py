"""The README and docs/ show what the CLI really prints: every shell block runs (or is marked as an illustration,
with its reason), and each shown output line is printed (tests/support/doc_examples.py has the rules and the
``--update`` command that refreshes the pages after a deliberate wording change)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.doc_examples import (
    ROOT, line_matches, missing_lines, parse, run_document, update_document, Outcome, Example)

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def test_the_readme_starts_with_exactly_the_two_commands():
    examples = parse(ROOT / "README.md")
    assert [e.command for e in examples[:2]] == ["pip install -r requirements.txt && streamlit run app.py",
                                                 "bash scripts/test.sh"]
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert examples[0].line < 14, "the first command is on the first screen"
    assert examples[0].not_run and examples[1].not_run
    assert not any(ln.startswith("## ") for ln in lines[:examples[1].line]), "no section before the two commands"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_shell_block_runs_or_says_why_not(doc):
    examples = parse(doc)
    illustrations = [e for e in examples if e.not_run is not None]
    print(f"{doc.name}: {len(examples) - len(illustrations)} blocks run, {len(illustrations)} illustrations:")
    for e in illustrations:
        print(f"  {e.where}: {e.not_run}")
        assert len(e.not_run or "") > 10, f"{e.where}: an illustration says why it is not run"
    assert not examples or len(illustrations) < len(examples), f"{doc.name}: its blocks are run"


def test_the_own_model_guide_runs_every_block():
    examples = parse(ROOT / "docs" / "OWN_MODEL.md")
    # illustrations: the line that sets $R, the encoder's tune and the compare of its pick (whether this small
    # encoder's int8 beats fp32, and so whether tune writes a model, depends on the CPU), and the download (the
    # stand-in after it runs)
    assert [e.not_run.split(";")[0] for e in examples if e.not_run is not None] == [
        "sets R to your clone", "whether this small encoder's int8 is faster than its fp32 source depends on the CPU "
        "(0.88–0.91× on an Intel Xeon with AMX, 1.1× on an AMD Zen 4), and with it whether a model is recommended",
        "it checks the model the tune above recommends, which that CPU-dependent example may not write",
        "downloads a wheel (the test has no network)"]
    shown = [e for e in examples if e.output is not None]
    for command in ("inspect", "optimize", "analyze", "--exclude-nodes", "tune", "compare"):
        assert any(command in e.command for e in shown), f"the guide shows the output of {command}"


@pytest.mark.slow
@pytest.mark.parametrize("doc", [d for d in DOCS if any(e.not_run is None for e in parse(d))], ids=lambda p: p.name)
def test_the_shown_output_is_what_the_cli_prints(doc, tmp_path):
    outcomes = run_document(doc, tmp_path)
    assert outcomes
    bad = [o.report() for o in outcomes if not o.ok]
    assert not bad, ("\n\n".join(bad) + "\n\nAfter a deliberate change of the CLI's output: "
                     "python -m tests.support.doc_examples --update " + str(doc.relative_to(ROOT)))


# The matching rules themselves.

@pytest.mark.parametrize("shown, printed, ok", [
    ("verdict    OK  … on 64 samples: …", "verdict OK  classification checks passed on 64 samples: 0 flips", True),
    ("verdict    OK  … on 64 samples: …", "verdict DEGRADED  classification checks passed on 64 samples: x", False),
    ("worst SQNR 33.7 dB", "worst SQNR 33.9 dB", True),           # within 2%
    ("worst SQNR 33.7 dB", "worst SQNR 35.7 dB", False),
    ("checks passed on 32 samples", "checks passed on 64 samples", False),
    ("Concat_5 kept", "Concat_6 kept", False),                     # small integers are exact
    ("F1 0.93 vs", "F1 0.92 vs", True),                            # half a unit of the last digit … or 2%
    ("F1 0.93 vs", "F1 0.90 vs", False),
    ("#  node  op", "#      node        op", True),                # spaces re-align
    ("params    78,330   nodes: 31", "params 78,331 nodes: 31", True),  # one number with its thousands
    ("params    78,330   nodes: 31", "params 79,330 nodes: 31", True),
    ("params    78,330   nodes: 31", "params 98,330 nodes: 31", False),
    ("--shape images=1,3,640,640", "--shape images=1,3,640,641", False),
    ("digits_cnn 1.09× …", "digits_cnn 1.31× (1.2–1.4)", False),   # a speed-up is cut with … where it varies
    ("digits_cnn …× (…)", "digits_cnn 1.31× (1.2–1.4)", True),
])
def test_a_shown_line_matches_only_what_it_shows(shown, printed, ok):
    assert line_matches(shown, printed) is ok


def test_shown_lines_come_in_order_from_stdout_or_stderr():
    out, err = "a 1\nb 2\nc 3\n", "note x\n"
    assert missing_lines("a 1\n…\nc 3\nnote x", out, err) == []
    assert missing_lines("c 3\na 1", out, err) == ["a 1"]
    assert missing_lines("b 2\nd 4", out, err) == ["d 4"]


def test_update_rewrites_only_the_drifted_lines_and_keeps_the_cuts(tmp_path):
    doc = tmp_path / "DOC.md"
    doc.write_text("```bash\nortlab x\n```\n```text\nverdict    OK  old reason on 32 samples …\nsame line\n```\n")
    ex = parse(doc)[0]
    assert ex.output is not None
    printed = "verdict    OK  new reason on 64 samples: 0 flips, worst 30 dB\nsame line\n"
    o = Outcome(ex, 0, printed, "", missing_lines(ex.output, printed, ""))
    assert o.missing == ["verdict    OK  old reason on 32 samples …"]
    changes = update_document(doc, [o])
    assert len(changes) == 1
    text = doc.read_text()
    assert "verdict    OK  new reason on 64 samples: …\nsame line\n" in text
    assert missing_lines(parse(doc)[0].output or "", printed, "") == []


def test_markers_are_read_from_the_line_before_the_block(tmp_path):
    doc = tmp_path / "DOC.md"
    doc.write_text("<!-- not run: installs packages -->\n```bash\npip install x\n```\n\n"
                   "<!-- exit: 4 -->\n```bash\nortlab tune m\n```\n```text\nout\n```\n")
    a, b = parse(doc)
    assert (a.not_run, b.not_run, b.exit_code, b.output) == ("installs packages", None, 4, "out")
    assert isinstance(a, Example) and Path(a.doc) == doc


def test_the_docs_run_as_on_the_cpu_their_output_was_recorded_for(tmp_path, monkeypatch):
    """The shown SQNRs, verdicts and tune lines depend on reduce-range, which ortlab picks from the CPU: the docs run
    with $ORTLAB_CPU pinned to the kind they were recorded on, whatever this machine or the caller's environment is."""
    from tests.support.doc_examples import DOC_CPU

    monkeypatch.setenv("ORTLAB_CPU", "amx")
    doc = tmp_path / "DOC.md"
    doc.write_text('```bash\nortlab inspect digits_cnn | grep -i "as set by"\n```\n'
                   "```text\n… (as set by $ORTLAB_CPU=avx2)\n```\n")
    (o,) = run_document(doc, tmp_path / "run")
    assert DOC_CPU == "avx2" and o.ok, o.report() + o.stdout + o.stderr
