"""The engine's front door: what the app (``pages/``, ``ortlab/ui``) and the command line call and the types they
read.

Everything a person can do with ortlab is a call on one of the use-case services (:mod:`ortlab.services`): models,
data, recipes, checks, benchmarks, tuning, the workspace, and this machine with its cluster. The typed results
they return and the settings they take are exported here too. ``ortlab/ui``, ``ortlab/cli``, ``pages/`` and
``app.py`` import the engine only from this module and from ``ortlab.core``'s foundation helpers
(``tests/integration/test_engine_layering.py`` checks it, and that this module exports nothing else).
"""

# -- the use cases ----------------------------------------------------------------------------------------------
from ortlab.services.benchmarks import benchmarks
from ortlab.services.checks import checks
from ortlab.services.data import data
from ortlab.services.machine import machine
from ortlab.services.models import models
from ortlab.services.recipes import recipes
from ortlab.services.tuning import tuning
from ortlab.services.workspace import workspaces

# -- settings: what a person chooses ------------------------------------------------------------------------------
from ortlab.settings.config import (
    BenchConfig, Finding, OptLevel, Precision, PreprocessConfig, QuantConfig, QuantFormat, QuantMode, Recipe, Target,
)
from ortlab.settings.flags import UsageError
from ortlab.checks.verdict import VerdictPolicy
from ortlab.runs.tune import TuneSettings
from ortlab.runs.result_speed import SpeedCheck

# -- typed results --------------------------------------------------------------------------------------------
from ortlab.model.inspect import ModelInfo
from ortlab.model.diff import GraphDiff
from ortlab.data.samples import SampleModel
from ortlab.data.preprocess import ResolvedPreprocess
from ortlab.checks.eval_report import EvalReport, OutputError as OutputErrorMetrics
from ortlab.checks.verdict import Level, Verdict
from ortlab.timing.bench import LatencySummary
from ortlab.timing.compare import BenchComparison, LatencyStats
from ortlab.timing.stats import SpeedUp
from ortlab.timing.settle import SettledSpeed
from ortlab.runs.artifact import Artifact
from ortlab.timing.stats import ResultSpeed
from ortlab.runs.runspec import DataRef, RunSpec
from ortlab.runs.service import Handle, RecipeHandle
from ortlab.runs.bench_service import BenchHandle
from ortlab.runs.cluster_bench import ClusterBenchmark
from ortlab.runs.history import BenchmarkRecord, BenchVariant, History, HistoryRecovered
from ortlab.runs.stored_timing import PairSpeed, TimedModel
from ortlab.runs.tune_job import TuneJob
from ortlab.runs.trial_measure import TrialMeasure
from ortlab.runs.workspace import Workspace
from ortlab.runtime.machine import Machine
from ortlab.runtime.ray_node import NodeSettingError

__all__ = [
    "Artifact",
    "BenchComparison",
    "BenchConfig",
    "BenchHandle",
    "BenchVariant",
    "BenchmarkRecord",
    "ClusterBenchmark",
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
    "ResolvedPreprocess",
    "ResultSpeed",
    "RunSpec",
    "SampleModel",
    "SettledSpeed",
    "SpeedCheck",
    "SpeedUp",
    "Target",
    "TimedModel",
    "TrialMeasure",
    "TuneJob",
    "TuneSettings",
    "UsageError",
    "Verdict",
    "VerdictPolicy",
    "Workspace",
    "benchmarks",
    "checks",
    "data",
    "machine",
    "models",
    "recipes",
    "tuning",
    "workspaces",
]
