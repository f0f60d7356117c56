"""The engine's front door: what the app (``pages/``, ``ortlab/ui``) and the command line call and the types they
read.

Everything a person can do with ortlab is one of these calls; the modules below it (see ``docs/ENGINE_API.md``
for the map of the layers) are free to change shape as long as these stay. The typed results (dataclasses and
enums such as :class:`~ortlab.runs.artifact.Artifact`, :class:`~ortlab.checks.eval_report.EvalReport`,
:class:`~ortlab.checks.verdict.Verdict`) and the settings (:mod:`ortlab.settings`) are re-exported here too:
``ortlab/ui``, ``ortlab/cli``, ``pages/`` and ``app.py`` import the engine only from this module and from
``ortlab.core``'s foundation helpers (``tests/integration/test_engine_layering.py`` checks it).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

# -- models: inspect, import, compare graphs ------------------------------------------------------------------
from ortlab.model.diff_view import carry_values, map_node_names
from ortlab.model.inspect import external_data_files, inspect_model, op_key, sha256_file_cached
from ortlab.model.isolated import graph_description, graph_diff, import_model, import_upload, model_info
from ortlab.model.node_names import check_node_names
from ortlab.model.patterns import is_encoder_file

# -- data: load, preprocess, feed ---------------------------------------------------------------------------
from ortlab.data.dataset import pick_subset, random_dataset, split_dataset, stratified_sample
from ortlab.data.feeds import batch_inputs, check_fits, check_tensor_inputs, control_values
from ortlab.data.inputs import axis_label, infer_specs, parse_shape, resolve_feed, suggested_sizes
from ortlab.data.loaders import load_image_files, load_image_zip, load_path, load_tensor_file, load_text_file
from ortlab.data.preprocess import PRESETS as PREPROCESS_PRESETS
from ortlab.data.preprocess import ResolvedPreprocess, detect_preprocess, explain_preprocess, resolve_preprocess, tensor_preview
from ortlab.data.preprocess import suggest_preset as suggest_preprocess_preset
from ortlab.data.samples import (
    SampleModel, default_sample, find_by_path, find_by_sha256, find_for_model, get_sample, list_samples, samples_root,
)
from ortlab.data.store import dataset_digest, read_about, write_about, write_dataset

# -- what runs here -----------------------------------------------------------------------------------------
from ortlab.runtime.hardware import advise as hardware_advice, advised_recipe, detect as detect_hardware
from ortlab.runtime.openvino import INSTALL_HINT as OPENVINO_INSTALL_HINT, available as openvino_available
from ortlab.runtime.providers import (
    claimed_providers, custom_op_libraries, set_custom_op_libraries, working_providers,
)

# -- checks: evaluate, judge, analyze -----------------------------------------------------------------------
from ortlab.checks.analyze import analyze
from ortlab.checks.evaluate import evaluate
from ortlab.checks.verdict import judge, not_evaluated, worse_or_equal

# -- timing ---------------------------------------------------------------------------------------------------
from ortlab.timing.bench import config_problems as bench_config_problems
from ortlab.timing.compare import compare_benchmarks, noise_warnings, running_stats, series_id, split_series_id
from ortlab.timing.compare import MAX_SPREAD as BENCH_MAX_SPREAD, MIN_RUNS as BENCH_MIN_RUNS

# -- runs: recipes, benchmarks, tuning, history ------------------------------------------------------------
from ortlab.runs.history import take_notices
from ortlab.runs.bench_service import PAIR_TIMING, bench_busy, start_pair_timing, timed_variants
from ortlab.timing.settle import settled
from ortlab.runs.runtime_judge import RuntimeJudgement, judge_runtime_rows
from ortlab.runs import bench_service, cluster_bench
from ortlab.runs.service import dismiss_interrupted, interrupted_runs, start_recipe, startup
from ortlab.runs.tune_policy import DEFAULT_MIN_SQNR_DB, sqnr_policy, verdict_policy
from ortlab.runs.pipeline import stage_labels
from ortlab.runs.prepare import prepare_run
from ortlab.runs.stored import delete_dataset, delete_model, stored_items
from ortlab.runs.workspace import bench_text, cache_dirs, default_root, import_roots, importable_path
from ortlab.runs.stored_timing import (latest_pair, machine_text, record_pair_timing, report_timing, run_latency,
                                       speed_interval_text)
from ortlab.timing.stats import of_summaries
from ortlab.runs.report import html_report
from ortlab.checks.node_findings import (
    ACCUMULATED, ADDED, MODES as NODE_ERROR_MODES, culprit, culprit_sentence, db_text, excluded_recipe,
    exclusion_sentence, overlay_values, ranked_nodes, sqnr_bars, worst_output_sqnr,
)

# -- typed results, settings and their constants (what the calls above take and return) ---------------------
from ortlab.settings.config import (
    DEFAULT_BENCH_DURATION_S, BenchConfig, Finding, OptLevel, Precision, PreprocessConfig, QuantConfig, QuantFormat,
    QuantMode, Recipe, Target, errors_of, preprocess_cli_args, recipe_cli_line, validate_recipe,
)
from ortlab.settings.flags import UsageError, add_config_arguments, config_from_args, given_values
from ortlab.runtime.providers import CPU, CUDA, CUSTOM_OPS_ENV, TRT
from ortlab.model.inspect import ModelInfo
from ortlab.model.diff import GraphDiff
from ortlab.data.loaders import TEXT_EXTENSIONS, TOKENIZER_FILE
from ortlab.checks.eval_report import EvalReport, OutputError as OutputErrorMetrics
from ortlab.checks.verdict import Level, Verdict, VerdictPolicy
from ortlab.checks.node_findings import SqnrBars
from ortlab.timing.bench import THROUGHPUT_METHOD, LatencySummary
from ortlab.timing.compare import BenchComparison, LatencyStats
from ortlab.timing.stats import SpeedUp
from ortlab.timing.settle import CAP_S as SETTLE_CAP_S, TARGET as SETTLE_TARGET, SettledSpeed
from ortlab.runs.artifact import Artifact, artifact_sample
from ortlab.runs.result_speed import ResultSpeed, SpeedCheck, default_check as default_speed_check, times
from ortlab.runs.bench_service import BenchHandle
from ortlab.runs.cluster_bench import ClusterBenchHandle, ClusterBenchmark, ClusterRow, machine_stamp
from ortlab.runs.history import BenchmarkRecord, BenchVariant, History, HistoryRecovered
from ortlab.runs.pipeline import NO_CALIBRATION_DATA, VERIFICATION_SKIPPED
from ortlab.runs.runspec import DEFAULT_VERIFY_SAMPLES, DataRef, RunSpec
from ortlab.runs.service import CANCELLED, DONE, FAILED, QUEUED, RUNNING, Handle, RecipeHandle
from ortlab.runs.stored import MODEL as STORED_MODEL
from ortlab.runs.stored_timing import PairSpeed, ReportTiming, TimedModel
from ortlab.runtime.machine import Machine, this_machine
from ortlab.runs.tune import RECOMMENDED_NOTE, Tuner, TuneSettings
from ortlab.runs.trial_measure import TrialMeasure, stored_trial_measure
from ortlab.runs.tune_budget import DEFAULT_CPU_BUDGET_S as DEFAULT_TUNE_CPU_BUDGET_S
from ortlab.runs.tune_budget import DEFAULT_WALL_CAP_S as DEFAULT_TUNE_WALL_CAP_S
from ortlab.runs.tune_budget import budget_limits as tune_budget_limits
from ortlab.runs.tune_budget import default_budget as default_tune_budget
from ortlab.runs.tune_job import TuneJob
from ortlab.runs.workspace import Workspace
from ortlab.runtime.cluster_setting import configured_cluster
from ortlab.runtime.ray_node import DEFAULT_PORT as DEFAULT_CLUSTER_PORT
from ortlab.runtime.ray_node import NodePlan, NodeSettingError, plan_node, start_node, stop_node
from ortlab.runtime.ray_node import ensure_token as ensure_cluster_token


def open_workspace(root=None) -> Workspace:
    """The workspace at ``root`` (default: ``$ORTLAB_HOME``, else ``~/.ortlab``); its folders are made if missing."""
    return Workspace(root)


def open_history(workspace: Workspace) -> History:
    """The run and benchmark History of ``workspace``."""
    return History(workspace.db_path)


def start_benchmark(variants: Sequence[BenchVariant], config: BenchConfig, *, cluster: str | None = None,
                    nodes: Sequence[str] = (), measure_memory: bool = False, workspace: Workspace | None = None,
                    origin: str = "app", shapes: dict[str, list[int]] | None = None,
                    values: dict[str, float] | None = None, **local: Any) -> BenchHandle | ClusterBenchHandle:
    """A benchmark (the app's and the command line's one way to start one): on this machine
    (:func:`ortlab.runs.bench_service.start_benchmark`, which takes ``local``'s arguments), or with ``cluster``
    (a Ray address, "auto" or host:port) on every kind of node of that cluster, or on the ``nodes`` resources
    named (:func:`ortlab.runs.cluster_bench.start`: its ``result`` is a :class:`ClusterBenchmark`)."""
    if cluster and cluster.strip():
        return cluster_bench.start(variants, config, cluster, nodes=nodes, measure_memory=measure_memory,
                                   workspace=workspace, origin=origin, shapes=shapes, values=values)
    return bench_service.start_benchmark(variants, config, measure_memory=measure_memory, workspace=workspace,
                                         origin=origin, shapes=shapes, values=values, **local)


def remove_stale_trial_folders() -> list:
    """Removes the folders that stopped cluster trials left in this machine's temp folder; what was removed."""
    import tempfile

    from ortlab.runs.trial_folders import remove_stale_trial_folders as remove

    return remove(Path(tempfile.gettempdir()))


def start_tune(model, calibration: DataRef | None, evaluation: DataRef, settings: TuneSettings, policy, *,
               preprocess=None, sample: str | None = None, workspace: Workspace | None = None, out_dir=None,
               background: bool = True, meta: dict | None = None) -> TuneJob:
    """A tune search of ``model`` on the calibration and evaluation data (the app's and the command line's one
    way to start one). ``background``: it runs on a thread now (the caller drains its trials); else the caller
    runs it with :meth:`TuneJob.follow`."""
    tuner = Tuner(model, calibration, evaluation, settings=settings, policy=policy, preprocess=preprocess,
                  sample=sample, workspace=workspace, out_dir=out_dir)
    job = TuneJob(tuner, meta)
    return job.start() if background else job


__all__ = [
    "ACCUMULATED",
    "ADDED",
    "BENCH_MAX_SPREAD",
    "BENCH_MIN_RUNS",
    "CANCELLED",
    "CPU",
    "CUDA",
    "CUSTOM_OPS_ENV",
    "DEFAULT_BENCH_DURATION_S",
    "DEFAULT_CLUSTER_PORT",
    "DEFAULT_MIN_SQNR_DB",
    "DEFAULT_TUNE_CPU_BUDGET_S",
    "DEFAULT_TUNE_WALL_CAP_S",
    "DEFAULT_VERIFY_SAMPLES",
    "DONE",
    "FAILED",
    "NODE_ERROR_MODES",
    "NO_CALIBRATION_DATA",
    "OPENVINO_INSTALL_HINT",
    "PAIR_TIMING",
    "PREPROCESS_PRESETS",
    "QUEUED",
    "RECOMMENDED_NOTE",
    "RUNNING",
    "SETTLE_CAP_S",
    "SETTLE_TARGET",
    "STORED_MODEL",
    "TEXT_EXTENSIONS",
    "THROUGHPUT_METHOD",
    "TOKENIZER_FILE",
    "TRT",
    "VERIFICATION_SKIPPED",
    "Artifact",
    "BenchComparison",
    "BenchConfig",
    "BenchHandle",
    "BenchVariant",
    "BenchmarkRecord",
    "ClusterBenchHandle",
    "ClusterBenchmark",
    "ClusterRow",
    "DataRef",
    "EvalReport",
    "Finding",
    "GraphDiff",
    "Handle",
    "History",
    "HistoryRecovered",
    "LatencyStats",
    "LatencySummary",
    "Level",
    "Machine",
    "ModelInfo",
    "NodePlan",
    "NodeSettingError",
    "OptLevel",
    "OutputErrorMetrics",
    "PairSpeed",
    "Precision",
    "PreprocessConfig",
    "QuantConfig",
    "QuantFormat",
    "QuantMode",
    "Recipe",
    "RecipeHandle",
    "ReportTiming",
    "ResolvedPreprocess",
    "ResultSpeed",
    "RunSpec",
    "RuntimeJudgement",
    "SampleModel",
    "SettledSpeed",
    "SpeedCheck",
    "SpeedUp",
    "SqnrBars",
    "Target",
    "TimedModel",
    "TrialMeasure",
    "TuneJob",
    "TuneSettings",
    "UsageError",
    "Verdict",
    "VerdictPolicy",
    "Workspace",
    "add_config_arguments",
    "advised_recipe",
    "analyze",
    "artifact_sample",
    "axis_label",
    "batch_inputs",
    "bench_busy",
    "bench_config_problems",
    "bench_text",
    "cache_dirs",
    "carry_values",
    "check_fits",
    "check_node_names",
    "check_tensor_inputs",
    "claimed_providers",
    "compare_benchmarks",
    "config_from_args",
    "configured_cluster",
    "control_values",
    "culprit",
    "culprit_sentence",
    "custom_op_libraries",
    "dataset_digest",
    "db_text",
    "default_root",
    "default_sample",
    "default_speed_check",
    "default_tune_budget",
    "delete_dataset",
    "delete_model",
    "detect_hardware",
    "detect_preprocess",
    "dismiss_interrupted",
    "ensure_cluster_token",
    "errors_of",
    "evaluate",
    "excluded_recipe",
    "exclusion_sentence",
    "explain_preprocess",
    "external_data_files",
    "find_by_path",
    "find_by_sha256",
    "find_for_model",
    "get_sample",
    "given_values",
    "graph_description",
    "graph_diff",
    "hardware_advice",
    "html_report",
    "import_model",
    "import_roots",
    "import_upload",
    "importable_path",
    "infer_specs",
    "inspect_model",
    "interrupted_runs",
    "is_encoder_file",
    "judge",
    "judge_runtime_rows",
    "latest_pair",
    "list_samples",
    "load_image_files",
    "load_image_zip",
    "load_path",
    "load_tensor_file",
    "load_text_file",
    "machine_stamp",
    "machine_text",
    "map_node_names",
    "model_info",
    "noise_warnings",
    "not_evaluated",
    "of_summaries",
    "op_key",
    "open_history",
    "open_workspace",
    "openvino_available",
    "overlay_values",
    "parse_shape",
    "pick_subset",
    "plan_node",
    "prepare_run",
    "preprocess_cli_args",
    "random_dataset",
    "ranked_nodes",
    "read_about",
    "recipe_cli_line",
    "record_pair_timing",
    "remove_stale_trial_folders",
    "report_timing",
    "resolve_feed",
    "resolve_preprocess",
    "run_latency",
    "running_stats",
    "samples_root",
    "series_id",
    "set_custom_op_libraries",
    "settled",
    "sha256_file_cached",
    "speed_interval_text",
    "split_dataset",
    "split_series_id",
    "sqnr_bars",
    "sqnr_policy",
    "stage_labels",
    "start_benchmark",
    "start_node",
    "start_pair_timing",
    "start_recipe",
    "start_tune",
    "startup",
    "stop_node",
    "stored_items",
    "stored_trial_measure",
    "stratified_sample",
    "suggest_preprocess_preset",
    "suggested_sizes",
    "take_notices",
    "tensor_preview",
    "this_machine",
    "timed_variants",
    "times",
    "tune_budget_limits",
    "validate_recipe",
    "verdict_policy",
    "working_providers",
    "worse_or_equal",
    "worst_output_sqnr",
    "write_about",
    "write_dataset",
]
