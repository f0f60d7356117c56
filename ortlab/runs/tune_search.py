"""A tune search's strategy: which recipe to try next, given the trials so far. It proposes recipes and receives
their trials; it never runs or times anything (the tuner does, :class:`ortlab.runs.tune.Tuner`).

:meth:`SearchStrategy.steps` is a generator of :data:`Step` s: a :class:`Proposal` is answered by sending the
finished :class:`Trial` back; :class:`Ahead` names the recipes likely to run next (a cluster starts them early);
:class:`Say` is a note for the search's summary; :class:`Finished` is a trial to show, with the strategy's word on it.

The order: the start of the search space (static vs dynamic, QDQ vs QOperator, … ordered by what this CPU favours),
up to the first static recipe without bias correction (a detector's full-range twin too); then the default with its
decision head in float (a detector's class-score branch, a classifier's logits head); then the accuracy-controlled
stage (:mod:`ortlab.runs.tune_accuracy`) and the greedy keep-in-float set of the best dynamic int8 trial; then
16-bit weights on the analysis's worst weighted nodes; then what is left of the search space.
When the first static int8 trial is broken, the dynamic int8 recipes move ahead.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator, Mapping, Sequence
from pathlib import Path
from typing import Any

from ortlab.core.layout import QDQ_FILE
from ortlab.checks.task_kind import Detections, TopOneFlips
from ortlab.model.decision_head import LOGITS_HEAD, SCORE_BRANCH, DecisionHead
from ortlab.runs.tune_accuracy import AccuracySearch, StageContext
from ortlab.runs.tune_evidence import SampleEvidence
from ortlab.runs.tune_pick import step_gain
from ortlab.runs.tune_policy import CHAIN_MAX, INT16_STEP, LEVEL_RANK, MIN_GAIN_DB, Stage, Trial, TrialStatus, rank_key
from ortlab.runs.tune_settings import TuneSettings
from ortlab.runs.tune_steps import Finished, Proposal, Say, Step, Steps, ask
from ortlab.settings.config import Recipe, replace
from ortlab.transforms.float_revert import producer_chain


# the task measure by which a decision head in float can be shown more accurate: a class-score branch by decoded
# detections, a logits head by top-1 flips (an image embedding's projection is no logits head, whatever its shape)
# (the measure, what it counts)
HEAD_MEASURES = {SCORE_BRANCH: (Detections.F1, "decoded detections"), LOGITS_HEAD: (TopOneFlips.NO_FLIP, "top-1 flips")}
SEEDED_NOTE = ("Every static int8 trial is broken; the keep-in-float search starts from the least broken by the "
               "task's measure.")


class SearchStrategy:
    """One search's order over ``queue`` (the search space, deduplicated and valid). ``stop`` says when no
    further trial may start; ``evidence`` maps a trial's index to its per-sample record; ``ranked_nodes`` gives a
    static trial's node names, worst local error first (the per-node analysis); ``stage_context`` what the
    accuracy-controlled stage needs."""

    def __init__(self, settings: TuneSettings, *, stop: Callable[[], bool],
                 evidence: Mapping[int, SampleEvidence | None], ranked_nodes: Callable[[Trial], list[str]],
                 stage_context: Callable[[], StageContext], detector: bool = False,
                 head: DecisionHead | None = None) -> None:
        self.settings = settings
        self.head = head
        self.stop = stop
        self.evidence = evidence
        self._ranked_nodes = ranked_nodes
        self._stage_context = stage_context
        self.detector = detector
        self.done: list[Trial] = []  # every trial sent back, in order
        self._analysis_cache: dict[int, list[str]] = {}
        self._said: set[str] = set()

    def steps(self, queue: list[Recipe]) -> Steps:
        """The whole search over ``queue``."""
        s = self.settings
        split = keep_in_float_after(queue) if s.exclusion_steps else len(queue)
        if self.detector and len(queue) > 1 and not queue[1].quant.reduce_range and queue[0].quant.reduce_range:
            split = max(split, 2)  # its full-range twin too: the keep-in-float search starts from the better
        # 1: the start of the search space; 2: keep-in-float; 3: what is left of the search space
        queue = yield from self._search(queue, split if s.exclusion_steps else None)
        if s.exclusion_steps and not self.stop():
            yield from self.decision_head_trial()
        if s.exclusion_steps and not self.stop():
            yield from self.accuracy_stage()
            if not self.stop():
                yield from self.exclusions()
        if s.int16_steps and not self.stop():
            yield from self.int16_weights()
        yield from self._search(queue, None)

    def _search(self, queue: list[Recipe], until: int | None) -> Generator[Step, Trial, list[Recipe]]:
        """Trials of ``queue`` in order until ``until`` trials are done (None: the whole queue); what is left.
        On a cluster, free nodes start the recipes after the split too: when the keep-in-float stage runs, its
        float sets take their place (they are cancelled), else they are the next trials."""
        queue = list(queue)
        while queue and not self.stop() and (until is None or len(self.done) < until):
            ahead = list(queue)
            t = yield from self._ask(queue.pop(0), Stage.SEARCH, ahead=ahead)
            queue = yield from self._reorder(t, queue)
            yield Finished(t)
        return queue

    def _ask(self, recipe: Recipe, stage: Stage, note: str = "", ahead: Sequence[Recipe] | None = None
             ) -> Generator[Step, Trial, Trial]:
        t = yield from ask(recipe, stage, note, ahead)
        self.done.append(t)
        return t

    def _reorder(self, trial: Trial, queue: list[Recipe]) -> Generator[Step, Trial, list[Recipe]]:
        """The trials still to run, by what is likely to pass: when ``trial`` is the model's first finished static
        int8 trial and the verdict calls it broken, the dynamic int8 recipes move ahead of the remaining static ones
        (as for a recognised encoder), and a note says so."""
        static = [t for t in self.done if t.status == TrialStatus.DONE and t.recipe.is_static]
        if not (trial.broken and static == [trial]):
            return queue
        dynamic = [r for r in queue if r.is_dynamic]
        if not dynamic or queue[:len(dynamic)] == dynamic:
            return queue
        yield Say(f"The first static int8 trial ({trial.label}) is broken: the {len(dynamic)} dynamic int8 "
                  "trial(s) run before the remaining static ones.")
        return dynamic + [r for r in queue if not any(r is d for d in dynamic)]

    # -- the seeds of the keep-in-float stages
    def static_trials(self) -> list[Trial]:
        return [t for t in self.done if t.status == TrialStatus.DONE and t.recipe.is_static
                and t.model_path and (Path(t.model_path).parent / QDQ_FILE).is_file()]  # a QDQ file: static QDQ

    def exclusion_base(self, dynamic: bool = False) -> tuple[Trial | None, list[Say]]:
        """The seed of a keep-in-float search: the best trial by the task (:func:`rank_key`: verdict level, task
        measure, task SQNR — never the whole-output SQNR alone), among the faster-than-fp32 ones when any. A broken
        trial seeds a search only when every candidate is broken (the search may then mend it: e.g. a detector whose
        score channels one node crushes); then a note says so, once. ``dynamic``: the best dynamic int8 trial
        instead."""
        if dynamic:
            pool = [t for t in self.done if t.status == TrialStatus.DONE and t.recipe.is_dynamic
                    and not t.broken]
        else:
            pool = self.static_trials()
        if not pool:
            return None, []
        fine = [t for t in pool if not t.broken]
        said = []
        if not fine and not dynamic and SEEDED_NOTE not in self._said:  # asked again for each later search stage
            self._said.add(SEEDED_NOTE)
            said.append(Say(SEEDED_NOTE))
        pool = fine or pool
        faster = [t for t in pool if t.relative_latency is not None and t.relative_latency < 1.0] or pool
        return max(faster, key=lambda t: (rank_key(t), -(t.cost or 0))), said

    def ranked(self, trial: Trial) -> list[str]:
        """Node names of ``trial``'s QDQ model, worst local error first (cached per trial)."""
        if trial.index not in self._analysis_cache:
            self._analysis_cache[trial.index] = self._ranked_nodes(trial)
        return self._analysis_cache[trial.index]

    # -- the stages
    def accuracy_stage(self) -> Steps:
        base, said = self.exclusion_base()
        yield from said
        if base is None or base.accepted:
            return
        stage = AccuracySearch(self._stage_context(), base, self.static_trials(), self.ranked)
        steps = stage.steps()
        try:
            step = next(steps, None)
            while step is not None:
                if isinstance(step, Proposal):
                    trial = yield step
                    self.done.append(trial)
                    step = _send(steps, trial)
                else:
                    yield step
                    step = next(steps, None)
        finally:
            steps.close()

    def decision_head_trial(self) -> Steps:
        """The model's decision head (:mod:`ortlab.model.decision_head`: a detector's class-score branch, a
        classifier's logits head) kept in float on top of the first static trial (the default), whether or not the
        default passes: it costs speed, and only the recommender's paired comparison with the default decides
        whether its accuracy is worth it. A class-score branch over several scales is first tried at the scale with
        the most anchors alone (on a YOLOv8n at 320×320, the 40×40 scale: most of the whole branch's gain at about
        half its cost), then whole. Only when the default was judged by the head's own task measure
        (:data:`HEAD_MEASURES`)."""
        base = next((t for t in self.static_trials() if not t.broken), None)
        if base is None or self.head is None:
            return
        measure, counts = HEAD_MEASURES[self.head.what]
        if base.task_measure != measure:
            got = f"by {base.task_measure}" if base.task_measure else "by SQNR alone"
            yield Say(f"The {self.head.what} is not tried in float: this model's outputs are judged {got}, and only "
                      f"{counts} ({measure}) could show it more accurate in float.")
            return
        excluded = base.recipe.quant.nodes_to_exclude
        stem = base.label.split(' + float')[0]
        part = self.head.largest_scale()
        tries = [(self.head.nodes, f"{stem} + float {self.head.what}", self.head.why())]
        if part is not None:
            tries.insert(0, (part.nodes, f"{stem} + float {self.head.what} {part.grid[0]}×{part.grid[1]}",
                             self.head.why_scale(part)))
        for head_nodes, name, why in tries:
            nodes = tuple(sorted(set(excluded) | set(head_nodes)))
            if len(nodes) == len(excluded) or self.stop():
                continue
            q = replace(base.recipe.quant, nodes_to_exclude=nodes)
            t = yield from self._ask(replace(base.recipe, quant=q, name=name), Stage.ACCURACY, why)
            yield Finished(t)

    def exclusions(self) -> Steps:
        """Grow a keep-in-float set of the best dynamic int8 trial greedily, over the MatMul/Gemm nodes the per-node
        analysis of the best static QDQ trial ranks worst (a transformer's second FFN MatMul, fed by GELU, is the
        usual one): each step keeps one more node (and, when that alone does not help, the node with its producer
        chain) in float; a step is kept only when the task ranks it better (:func:`keep_if_gains`). A dynamic graph
        has no Q/DQ pairs to screen in memory: each step is a trial."""
        current, said = self.exclusion_base(dynamic=True)
        yield from said
        if current is None or current.accepted:
            return
        ranker, said = self.exclusion_base()
        yield from said
        if ranker is None:
            return
        tried: set[tuple[str, ...]] = set()
        steps = 0
        ops = node_ops(ranker)
        while steps < self.settings.exclusion_steps and not self.stop():
            nodes = [n for n in self.ranked(ranker) if ops.get(n) in ("MatMul", "Gemm")]
            excluded = set(current.recipe.quant.nodes_to_exclude)
            pick = next((n for n in nodes if (n,) not in tried and n not in excluded), None)
            if pick is None:
                return
            for group in (_chain_step(ranker, pick, excluded, tried, single=True),
                          _chain_step(ranker, pick, excluded, tried, single=False)):
                if group is None or steps >= self.settings.exclusion_steps or self.stop():
                    continue
                tried.add(group)
                steps += 1
                q = replace(current.recipe.quant, nodes_to_exclude=tuple(sorted(excluded | set(group))))
                name = f"{current.label.split(' + float')[0]} + float {len(q.nodes_to_exclude)}"
                what = f"keep {pick} in float" if len(group) == 1 else \
                    f"keep {pick} with its producers {', '.join(n for n in group if n != pick)} in float"
                t = yield from self._ask(replace(current.recipe, quant=q, name=name), Stage.EXCLUDE, what)
                before = current
                current, t = keep_if_gains(t, current, self.evidence)
                yield Finished(t)
                if current.accepted or current is not before:
                    break
            if current.accepted:
                return

    def int16_weights(self) -> Steps:
        """Grow the set of nodes with 16-bit weights along the per-node analysis ranking of the best static QDQ
        trial, :data:`INT16_STEP` weighted nodes a step; a step is kept only when it adds SQNR. On
        EfficientNet-Lite0 int8 weights alone cap the logits at about 18.5 dB (activations at 16 bits), so no
        activation or calibration setting reaches 20 dB; 16-bit weights do, but ORT runs those nodes in float."""
        current, said = self.exclusion_base()
        yield from said
        if current is None or current.accepted:
            return
        ranked = self.ranked(current)
        weighted = weighted_nodes(current)
        queue = [n for n in ranked if n in weighted and n not in current.recipe.quant.nodes_to_exclude]
        steps = 0
        while queue and steps < self.settings.int16_steps and not self.stop():
            chunk, queue = queue[:INT16_STEP], queue[INT16_STEP:]
            steps += 1
            nodes = tuple(dict.fromkeys([*current.recipe.quant.int16_weight_nodes, *chunk]))
            q = replace(current.recipe.quant, int16_weight_nodes=nodes)
            name = f"{current.label.split(' + int16')[0]} + int16 weights {len(nodes)}"
            t = yield from self._ask(replace(current.recipe, quant=q, name=name), Stage.INT16,
                                     f"16-bit weights in {', '.join(chunk)}")
            current, t = keep_if_gains(t, current, self.evidence)
            yield Finished(t)
            if current.accepted:
                return


def _send(steps: Steps, trial: Trial) -> Step | None:
    try:
        return steps.send(trial)
    except StopIteration:
        return None


def keep_in_float_after(queue: Sequence[Recipe]) -> int:
    """How many search trials run before the keep-in-float stages: up to the first static recipe without bias
    correction, so the stages start from the better of bias correction on and off (the two interact with what is
    kept in float: on a YOLOv8n the best float scope gave F1 0.85 with it, 0.94 without); a space without one: 60%."""
    for i, r in enumerate(queue):
        if r.is_static and not r.quant.bias_correction:
            return i + 1
    return max(1, int(len(queue) * 0.6))


def keep_if_gains(trial: Trial, current: Trial, evidence: Mapping[int, SampleEvidence | None] | None = None
                  ) -> tuple[Trial, Trial]:
    """The greedy step's choice, task first: with per-sample records of both (``evidence``), ``trial`` only when
    it is clearly more accurate on the same samples (:func:`ortlab.runs.tune_pick.step_gain`); else ``trial`` when
    it finished and the verdict level improves; or the level is the same and the task's measure improves; or both
    are the same and the task's SQNR (a detector's score channels, else the worst output) gains at least
    ``MIN_GAIN_DB``. Else ``current``. Returns the choice and ``trial`` with a note that says which."""
    kept, why = _gains(trial, current, evidence)
    noted = replace(trial, note=trial.note + f": {why}")
    return (noted if kept else current), noted


def _gains(trial: Trial, current: Trial, evidence: Mapping[int, SampleEvidence | None] | None) -> tuple[bool, str]:
    """Whether ``trial`` is kept over ``current``, and why (:func:`keep_if_gains`)."""
    if trial.status != TrialStatus.DONE:
        return False, "dropped (failed)"
    paired = step_gain(evidence.get(trial.index), evidence.get(current.index)) if evidence else None
    if paired is not None:
        return paired
    lt, lc = LEVEL_RANK.get(trial.level, 1), LEVEL_RANK.get(current.level, 1)
    if lt != lc:
        better = lt < lc
        return better, f"{'kept' if better else 'dropped'} (verdict {current.level} → {trial.level})"
    qt, qc = trial.quality(), current.quality()
    if qt.value is not None and qc.value is not None and abs(qt.value - qc.value) > 1e-9:
        better = qt.value > qc.value
        return better, f"{'kept' if better else 'dropped'} ({qt.measure} {qc.value:.1%} → {qt.value:.1%})"
    gain = (qt.sqnr_db if qt.sqnr_db is not None else -math.inf) - (qc.sqnr_db if qc.sqnr_db is not None else -math.inf)
    what = qt.sqnr_what if qt.sqnr_what != "worst output SQNR" else "SQNR"
    if gain >= MIN_GAIN_DB:
        return True, f"kept (+{gain:.1f} dB {what})"
    return False, f"dropped ({gain:+.1f} dB {what})"


def _chain_step(ranker: Trial, pick: str, excluded: set[str], tried: set[tuple[str, ...]],
                single: bool) -> tuple[str, ...] | None:
    if single:
        return (pick,)
    chain = tuple(n for n in _chain(ranker, pick) if n not in excluded)
    return chain if len(chain) > 1 and chain not in tried else None


def _qdq_graph(trial: Trial) -> Any:  # an onnx GraphProto; None without a QDQ file
    import onnx

    path = Path(trial.model_path or "").parent / QDQ_FILE
    if not path.is_file():
        return None
    return onnx.load(str(path), load_external_data=False).graph


def _chain(trial: Trial, name: str) -> list[str]:
    """``name`` and the producers that feed only it in ``trial``'s QDQ model
    (:func:`ortlab.transforms.float_revert.producer_chain`, up to :data:`CHAIN_MAX` nodes)."""
    graph = _qdq_graph(trial)
    return [name] if graph is None else producer_chain(graph, name, CHAIN_MAX)


def node_ops(trial: Trial) -> dict[str, str]:
    graph = _qdq_graph(trial)
    return {} if graph is None else {n.name: n.op_type for n in graph.node}


def weighted_nodes(trial: Trial) -> set[str]:
    """Names of the Conv/Gemm/MatMul nodes of ``trial``'s QDQ model whose weight is a quantized constant."""
    import onnx

    graph = onnx.load(str(Path(trial.model_path or "").parent / QDQ_FILE), load_external_data=False).graph
    dq_outputs = {n.output[0] for n in graph.node if n.op_type == "DequantizeLinear"
                  and n.input[0] in {t.name for t in graph.initializer}}
    return {n.name for n in graph.node if n.op_type in ("Conv", "Gemm", "MatMul") and len(n.input) > 1
            and n.input[1] in dq_outputs}
