"""The engine's front door: what the app (``pages/``, ``ortlab/ui``) and the command line call.

Everything a person can do with ortlab is one of these calls; the modules below it (see ``docs/ENGINE_API.md``
for the map of the layers) are free to change shape as long as these stay. Typed results (dataclasses and
enums such as :class:`~ortlab.runs.artifact.Artifact`, :class:`~ortlab.checks.eval_report.EvalReport`,
:class:`~ortlab.checks.verdict.Verdict`) and the settings (:mod:`ortlab.settings`) are imported from their own
modules; no other engine function is called around this module (``tests/test_engine_layering.py`` checks it).
"""

from __future__ import annotations

# -- models: inspect, import, compare graphs ------------------------------------------------------------------
from ortlab.model.diff_view import carry_values, map_node_names
from ortlab.model.inspect import external_data_files, inspect_model, op_key, sha256_file_cached
from ortlab.model.isolated import graph_description, graph_diff, import_model, import_upload, model_info

# -- data: load, preprocess, feed ---------------------------------------------------------------------------
from ortlab.data.dataset import pick_subset, random_dataset, split_dataset, stratified_sample
from ortlab.data.feeds import batch_inputs, check_fits, check_tensor_inputs, control_values
from ortlab.data.inputs import axis_label, infer_specs, parse_shape, resolve_feed, suggested_sizes
from ortlab.data.loaders import load_image_files, load_image_zip, load_path, load_tensor_file, load_text_file
from ortlab.data.preprocess import PRESETS as PREPROCESS_PRESETS
from ortlab.data.preprocess import ResolvedPreprocess, detect_preprocess, explain_preprocess, resolve_preprocess, tensor_preview
from ortlab.data.samples import (
    default_sample, find_by_path, find_by_sha256, find_for_model, get_sample, list_samples, samples_root,
)
from ortlab.data.store import dataset_digest, write_dataset

# -- what runs here -----------------------------------------------------------------------------------------
from ortlab.runtime.hardware import advise as hardware_advice, detect as detect_hardware
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

# -- runs: recipes, benchmarks, tuning, history ------------------------------------------------------------
from ortlab.runs.history import take_notices
from ortlab.runs.bench_service import bench_busy, start_benchmark
from ortlab.runs.service import dismiss_interrupted, interrupted_runs, start_recipe, startup
from ortlab.runs.tune_policy import sqnr_policy, verdict_policy
from ortlab.runs.pipeline import stage_labels
from ortlab.runs.prepare import prepare_run
from ortlab.runs.stored import delete_dataset, delete_model, stored_items
from ortlab.runs.workspace import cache_dirs, default_root, import_roots, importable_path

__all__ = [
    "OPENVINO_INSTALL_HINT",
    "PREPROCESS_PRESETS",
    "ResolvedPreprocess",
    "analyze",
    "axis_label",
    "batch_inputs",
    "bench_busy",
    "bench_config_problems",
    "cache_dirs",
    "carry_values",
    "check_fits",
    "check_tensor_inputs",
    "claimed_providers",
    "compare_benchmarks",
    "control_values",
    "custom_op_libraries",
    "dataset_digest",
    "default_root",
    "default_sample",
    "delete_dataset",
    "delete_model",
    "detect_hardware",
    "detect_preprocess",
    "dismiss_interrupted",
    "evaluate",
    "explain_preprocess",
    "external_data_files",
    "find_by_path",
    "find_by_sha256",
    "find_for_model",
    "get_sample",
    "graph_description",
    "graph_diff",
    "hardware_advice",
    "import_model",
    "import_roots",
    "import_upload",
    "importable_path",
    "infer_specs",
    "inspect_model",
    "interrupted_runs",
    "judge",
    "list_samples",
    "load_image_files",
    "load_image_zip",
    "load_path",
    "load_tensor_file",
    "load_text_file",
    "map_node_names",
    "model_info",
    "noise_warnings",
    "not_evaluated",
    "op_key",
    "openvino_available",
    "parse_shape",
    "pick_subset",
    "prepare_run",
    "random_dataset",
    "resolve_feed",
    "resolve_preprocess",
    "running_stats",
    "samples_root",
    "series_id",
    "set_custom_op_libraries",
    "sha256_file_cached",
    "split_dataset",
    "split_series_id",
    "sqnr_policy",
    "stage_labels",
    "start_benchmark",
    "start_recipe",
    "startup",
    "stored_items",
    "stratified_sample",
    "suggested_sizes",
    "take_notices",
    "tensor_preview",
    "verdict_policy",
    "working_providers",
    "worse_or_equal",
    "write_dataset",
]
