"""The task kinds (ortlab.checks.task_kind): one type per kind owns its measure, its bars and its wording, and no
other module branches on the kind of task.

What counts as branching on the kind (outside ``checks/task_kind.py`` and the modules that make the per-kind
metrics: ``checks/task_metrics.py``, ``checks/eval_report.py``, ``checks/evaluate.py``):

* a comparison (``==``, ``!=``, ``in``, ``not in``, ``is``) with a kind's name: a ``Task.<kind>`` member, or a
  string literal that is a ``Task`` value or a kind's measure ("detection F1", "strings kept", …);
* a dict literal keyed by a ``Task.<kind>`` member or a measure (a ``Task`` value as a key is a plain word there:
  "sequence" names an input axis);
* a decision (``if``/``elif``, ``while``, a conditional expression, a comprehension's ``if``, ``assert``) whose
  condition reads one of TaskMetrics' per-kind fields (``.boxes``, ``.classification``, ``.sequences``,
  ``.embeddings``, ``.dense_maps``, ``.exact``), directly or through a name the same function assigned such a field
  to (``c = tm.classification``, ``boxes = tm.boxes if tm else []``).

Iterating a per-kind list to list every metric (a details table) decides nothing and is not counted.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from ortlab.checks.eval_report import (
    BoxesMetrics, ClassificationMetrics, DenseMapMetrics, EmbeddingMetrics, EvalReport, ExactMetrics, OutputError,
    SequenceMetrics, Task, TaskMetrics,
)
from ortlab.checks.task_kind import KINDS, claim_bar, kinds_of, main_kind
from ortlab.checks.verdict import VerdictPolicy, judge
from ortlab.runs.tune_evidence import evidence_of
from ortlab.runs.tune_policy import task_quality

ROOT = Path(__file__).resolve().parents[2]
OWNERS = {"ortlab/checks/task_kind.py", "ortlab/checks/task_metrics.py", "ortlab/checks/eval_report.py",
          "ortlab/checks/evaluate.py"}
KIND_FIELDS = {"boxes", "classification", "sequences", "embeddings", "dense_maps", "exact"}
MEASURES = {"detection F1", "detections kept", "no confident flip", "NN agreement", "strings kept",
            "map elements kept"}
KIND_NAMES = {t.value for t in Task if t != Task.AUTO} | MEASURES


def _is_kind_name(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value in KIND_NAMES
    return (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "Task"
            and node.attr != "AUTO")


def _is_kind_field(node: ast.AST) -> bool:
    """Whether ``node``'s value is a per-kind field (``tm.boxes``, ``tm.boxes[:1]``, ``tm.boxes if tm else []``)."""
    if isinstance(node, ast.Attribute):
        return node.attr in KIND_FIELDS
    if isinstance(node, ast.Subscript):
        return _is_kind_field(node.value)
    if isinstance(node, ast.IfExp):
        return _is_kind_field(node.body) or _is_kind_field(node.orelse)
    if isinstance(node, ast.BoolOp):
        return any(_is_kind_field(v) for v in node.values)
    return False


def _is_word(node: ast.AST) -> bool:
    """A ``Task`` value as a dict key is a plain word ("sequence": an input axis), not a kind."""
    return isinstance(node, ast.Constant) and node.value not in MEASURES


def _reads_kind_field(node: ast.AST, tainted: set[str]) -> bool:
    return any((isinstance(n, ast.Attribute) and n.attr in KIND_FIELDS)
               or (isinstance(n, ast.Name) and n.id in tainted) for n in ast.walk(node))


def _conditions(node: ast.AST):
    if isinstance(node, (ast.If, ast.While, ast.IfExp, ast.Assert)):
        yield node.test
    elif isinstance(node, ast.comprehension):
        yield from node.ifs


def _scopes(tree: ast.Module):
    yield tree
    yield from (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))


def kind_branches(source: str) -> list[str]:
    """Where ``source`` branches on the kind of task (see the module docstring), as "line: what"."""
    tree = ast.parse(source)
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and any(_is_kind_name(x) for x in [node.left, *node.comparators]):
            found.add(f"{node.lineno}: compares with a task kind's name")
        if isinstance(node, ast.Dict) and any(k is not None and _is_kind_name(k) and not _is_word(k)
                                              for k in node.keys):
            found.add(f"{node.lineno}: a dict keyed by task kinds")
    for scope in _scopes(tree):
        tainted = {t.id for n in ast.walk(scope) if isinstance(n, ast.Assign)
                   and _is_kind_field(n.value) for t in n.targets if isinstance(t, ast.Name)}
        for node in ast.walk(scope):
            for test in _conditions(node):
                if _reads_kind_field(test, tainted):
                    found.add(f"{test.lineno}: decides on a per-kind field of the task metrics")
    return sorted(found)


def _modules():
    for path in sorted([*(ROOT / "ortlab").rglob("*.py"), *(ROOT / "pages").glob("*.py"), ROOT / "app.py"]):
        rel = path.relative_to(ROOT).as_posix()
        if rel not in OWNERS:
            yield rel, path


def test_no_module_outside_the_task_kinds_branches_on_the_kind_of_task():
    offenders = {rel: where for rel, path in _modules() if (where := kind_branches(path.read_text()))}
    assert not offenders, offenders


def test_the_measures_the_check_looks_for_are_the_task_kinds_own():
    source = (ROOT / "ortlab/checks/task_kind.py").read_text()
    assert all(f'"{m}"' in source for m in MEASURES - {"detection F1"}) and 'F1 = "detection F1"' in source


@pytest.mark.parametrize("source", [
    "if tm.boxes:\n    pass\n",
    "def f(tm):\n    c = tm.classification\n    if c is not None:\n        return 1\n",
    "x = [q for q in rows if q.measure == 'strings kept']\n",
    "ok = report.task.task == Task.CLASSIFICATION\n",
    "bars = {Task.BOXES: 0.95}\n",
    "v = 1 if tm.sequences else 0\n",
    "def f(ev):\n    boxes = ev.task.boxes if ev.task is not None else []\n    return [o for o in ev.outputs if o in boxes]\n",
])
def test_the_check_sees_each_kind_of_branch(source):
    assert kind_branches(source)


@pytest.mark.parametrize("source", [
    "rows = [b.output for b in tm.boxes]\nif rows:\n    pass\n",  # listing every metric decides nothing
    "for kind in kinds_of(tm):\n    kind.judge(tm, policy, f, n)\n",
    "if mode == 'boxes_and_scores':\n    pass\n",
])
def test_the_check_lets_plain_listing_and_other_words_through(source):
    assert not kind_branches(source)


def _report(**metrics) -> EvalReport:
    tm = TaskMetrics(Task.GENERIC, True, "test", **metrics)
    return EvalReport(20, [OutputError("out", 0.1, 0.01, 0.99, 30.0)], task=tm)


def _strings(changed: int) -> SequenceMetrics:
    return SequenceMetrics("text", 20, changed, changed, 100, changed_samples=list(range(changed)))


def _flips(n_flips: int) -> ClassificationMetrics:
    return ClassificationMetrics("logits", 10, 20, 1 - n_flips / 20, [0.5] * n_flips, 0.1, None, [0.5] * 20,
                                 list(range(n_flips)))


def test_the_kinds_come_in_one_order_and_the_first_with_a_measure_is_the_tasks():
    names = [k.name for k in KINDS]
    assert names == ["detections", "decoded strings", "top-1 flips", "embeddings", "dense maps", "exact outputs"]
    report = _report(classification=_flips(2), sequences=[_strings(3)], exact=[ExactMetrics("ids", "int64", 20, 0)])
    assert [k.name for k in kinds_of(report.task)] == ["decoded strings", "top-1 flips", "exact outputs"]
    assert main_kind(report.task).name == "decoded strings"
    # the tune measure, its per-sample evidence and the verdict's headline figure are the same kind's
    assert task_quality(report).measure == evidence_of(report).measure == "strings kept"
    assert judge(report).deciding == "text: decoded strings changed"
    assert main_kind(_report(exact=[ExactMetrics("ids", "int64", 20, 0)]).task) is None
    assert main_kind(None) is None and kinds_of(None) == []


def test_an_embedding_without_neighbours_has_no_measure_and_the_next_kind_decides():
    e = EmbeddingMetrics("vec", 0.99, 0.995, None)
    d = DenseMapMetrics("map", 0.3, "probability", 0.02, 0.2)
    report = _report(embeddings=[e], dense_maps=[d])
    assert main_kind(report.task).name == "dense maps"
    assert task_quality(report).measure == "map elements kept" and task_quality(report).value == pytest.approx(0.98)


def test_each_kind_owns_its_bar_and_how_its_change_reads():
    policy = VerdictPolicy(min_det_f1=0.9)
    assert claim_bar("detection F1", policy) == 0.9
    assert claim_bar("strings kept", policy) is None and claim_bar("", policy) is None
    boxes = BoxesMetrics("output0", 0.3, "probability", 0.0, 2.0, 1.9, matched=36, ref_total=40, cand_total=38)
    report = _report(boxes=[boxes], classification=_flips(1))
    kind = main_kind(report.task)
    assert kind.name == "detections"  # a detector's flips never lead
    assert report.task is not None
    assert kind.change_shown(report.task, "detection F1", 0.9231) == ("detection F1", "0.92", False)
    flips = _report(classification=_flips(3))
    assert flips.task is not None
    assert main_kind(flips.task).change_shown(flips.task, "no confident flip", 0.85) == ("confident flips", "3", True)
