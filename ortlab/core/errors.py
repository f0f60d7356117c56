"""Typed errors the engine raises. Every message says what went wrong and what to do next."""

from __future__ import annotations


class OrtlabError(Exception):
    """Base of every error the engine raises on purpose.

    ``str(err)`` is one line a person can act on; ``step`` names the pipeline step that failed.
    """

    def __init__(self, message: str, *, step: str | None = None):
        super().__init__(message)
        self.message = message
        self.step = step

    def __str__(self) -> str:
        return f"{self.step}: {self.message}" if self.step else self.message


class ModelLoadError(OrtlabError):
    """The file is not a loadable, valid ONNX model."""


class ExternalDataError(ModelLoadError):
    """External-data files are missing or point outside the model's folder."""


class RecipeError(OrtlabError):
    """The recipe is invalid or the combination of settings is not supported."""


class DataError(OrtlabError):
    """Images or tensors cannot be read or do not fit the model."""


class ShapeError(DataError):
    """A ``--shape`` that is malformed, that the model cannot take (unknown input, wrong rank, a fixed dim set
    otherwise) or that is missing (open dims nothing else sets): a usage error, exit code 2 in the CLI."""


class OptimizationError(OrtlabError):
    """ONNX Runtime could not optimize the model."""


class QuantizationError(OrtlabError):
    """ONNX Runtime could not quantize or convert the model."""


class BenchmarkError(OrtlabError):
    """A benchmark could not run."""


class OutputError(OrtlabError):
    """OUT would overwrite the source model or a file the source needs."""


class PlainDataError(OrtlabError):
    """Plain data (JSON) that does not fit the typed result it should become."""


class HistoryError(OrtlabError):
    """The history database cannot be read or has no such entry."""


class Cancelled(BaseException):
    """The work was stopped (Cancel, a time limit, SIGTERM). Like ``KeyboardInterrupt`` it is not an
    ``Exception``, so that no ``except Exception`` on the way can swallow it; it carries the same ``message`` and
    ``step`` as an :class:`OrtlabError`."""

    def __init__(self, message: str = "Cancelled by the user.", *, step: str | None = None):
        super().__init__(message)
        self.message = message
        self.step = step

    def __str__(self) -> str:
        return f"{self.step}: {self.message}" if self.step else self.message
