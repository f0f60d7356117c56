"""Bias correction's whole step judged on the task's metric (ortlab.runs.bias_task_judge): on a hand-built
two-class classifier, a correction that raises held-back SQNR but flips confident answers is dropped with a note
naming the flips, and one that removes confident flips is kept; the pipeline passes the judge."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

from ortlab.checks.eval_report import Task
from ortlab.checks.verdict import VerdictPolicy
from ortlab.runs.bias_task_judge import held_back_task_judge
from ortlab.transforms.bias_correction import correct_model, held_back_indices

BIAS_SCALE = 1 / 1024
CLASSIFIER = VerdictPolicy(task=Task.CLASSIFICATION)


def _classifier_pair() -> tuple[onnx.ModelProto, onnx.ModelProto]:
    """(float, QDQ) models of x [N, 3] → Gemm → "scores" [N, 2]: class 0's logit is x[:, 0], class 1's is 0. The QDQ
    twin's weight is DequantizeLinear(int8, 1/127) and also takes -x[:, 1] into class 0 (an error of -x[:, 1]); its
    bias is DequantizeLinear(int32 0, 1/1024)."""
    h = onnx.helper
    w = np.zeros((3, 2), np.float32)
    w[0, 0] = 1.0
    wq = np.zeros((3, 2), np.int8)
    wq[0, 0], wq[1, 0] = 127, -127

    def build(quantized: bool) -> onnx.ModelProto:
        if quantized:
            inits = [numpy_helper.from_array(wq, "wq"), numpy_helper.from_array(np.array(1 / 127, np.float32), "ws"),
                     numpy_helper.from_array(np.zeros(2, np.int32), "bq"),
                     numpy_helper.from_array(np.array(BIAS_SCALE, np.float32), "bs")]
            nodes = [h.make_node("DequantizeLinear", ["wq", "ws"], ["w"]),
                     h.make_node("DequantizeLinear", ["bq", "bs"], ["b"])]
        else:
            inits, nodes = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.zeros(2, np.float32), "b")], []
        nodes.append(h.make_node("Gemm", ["x", "w", "b"], ["scores"], name="fc"))
        g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["N", 3])],
                         [h.make_tensor_value_info("scores", onnx.TensorProto.FLOAT, ["N", 2])], inits)
        return h.make_model(g, opset_imports=[h.make_opsetid("", 13)], ir_version=8)

    return build(False), build(True)


def _feeds(rows: np.ndarray) -> list[dict[str, np.ndarray]]:
    return [{"x": r.reshape(1, 3).astype(np.float32)} for r in rows]


def _class0_bias(model: onnx.ModelProto) -> int:
    return int(next(numpy_helper.to_array(t) for t in model.graph.initializer if t.name == "bq")[0])


def test_a_correction_that_raises_sqnr_but_flips_confident_answers_is_dropped():
    # Most samples: x1 = 1 (class 0's logit off by -1) and x0 in [-3, -2] (class 1 either way). Four samples (two
    # held back): x1 = 0 (exact) and x0 = -0.5, class 1 with a softmax margin of 0.24 (confident). The mean-shift
    # correction (+0.93) makes the many nearly exact, and pushes the few to class 0.
    rng = np.random.default_rng(0)
    n = 40
    rows = np.stack([rng.uniform(-3, -2, n), np.ones(n), np.zeros(n)], axis=1)
    fit, held = held_back_indices(n)
    rows[fit[:2] + held[:2], :2] = [-0.5, 0.0]
    fp32, qdq = _classifier_pair()
    # judged on SQNR alone (as before), the correction is kept: the outputs come nearer the float model's
    model, plain = correct_model(fp32, qdq, _feeds(rows))
    assert plain.corrected == ["fc"] and not plain.dropped and _class0_bias(model) > 900
    (before, after), = plain.step_sqnr_db.values()
    assert after > before + 3
    # judged on the task's metric, the two confident flips on the held-back samples drop it
    model, judged = correct_model(fp32, qdq, _feeds(rows), task_judge=held_back_task_judge(CLASSIFIER))
    assert judged.dropped and judged.applied == [] and _class0_bias(model) == 0
    assert judged.step_task is not None and judged.step_task.change < 0
    assert ("The step was dropped and the biases are as quantized: it raised confident flips on the held-back "
            "samples from 0 to 2") in judged.notes[0]


def test_a_correction_that_removes_confident_flips_is_kept_with_a_note():
    # x1 = 1 everywhere: class 0's logit is off by -1, so fp32's class 0 answers with x0 in [0.3, 1) (margin ≥ 0.15)
    # flip; the correction (+1) removes the error and the flips
    rng = np.random.default_rng(1)
    n = 40
    x0 = rng.uniform(0.3, 3, n) * rng.choice([-1, 1], n)
    held = held_back_indices(n)[1]
    x0[held[:2]] = [0.5, 0.8]  # flipped as quantized
    rows = np.stack([x0, np.ones(n), np.zeros(n)], axis=1)
    fp32, qdq = _classifier_pair()
    model, result = correct_model(fp32, qdq, _feeds(rows), task_judge=held_back_task_judge(CLASSIFIER))
    assert result.corrected == ["fc"] and not result.dropped and abs(_class0_bias(model) - 1024) <= 4
    assert result.step_task is not None and result.step_task.change > 0
    flipped = sum(1 for i in held if 0 < x0[i] < 1)
    assert flipped >= 2
    assert f"It lowered confident flips on the held-back samples from {flipped} to 0." in result.notes[0]


def test_a_tie_on_the_task_leaves_the_sqnr_check_to_decide():
    # no answer is near a flip (x0 in [-3, -2], class 1 either way): the task metric ties at 0 and SQNR keeps it
    rng = np.random.default_rng(2)
    rows = np.stack([rng.uniform(-3, -2, 40), np.ones(40), np.zeros(40)], axis=1)
    fp32, qdq = _classifier_pair()
    model, result = correct_model(fp32, qdq, _feeds(rows), task_judge=held_back_task_judge(CLASSIFIER))
    assert result.corrected == ["fc"] and not result.dropped and abs(_class0_bias(model) - 1024) <= 4
    assert result.step_task is not None and result.step_task.change == 0
    assert "It left confident flips on the held-back samples at 0." in result.notes[0]
