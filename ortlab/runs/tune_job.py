"""A tune search as a job: ``ortlab.api.tuning.start_tune`` builds the :class:`~ortlab.runs.tune.Tuner` (the app and the
command line the same way) and wraps it in a :class:`TuneJob`, run on a thread (:meth:`TuneJob.start`) or in the
foreground by the caller.

Each finished trial is an event pushed to the job's queue; a front end takes them with :meth:`TuneJob.drain`
(the app's page polls it) or follows them with :meth:`TuneJob.follow` (the command line prints them).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Generator
from typing import Any

from ortlab.core.errors import Cancelled, OrtlabError
from ortlab.core.progress import Completion
from ortlab.runs.service import CANCELLED, DONE, FAILED, RUNNING


class TuneJob(Completion):
    """One search by ``tuner`` (a :class:`~ortlab.runs.tune.Tuner`): ``state`` (running/done/failed/cancelled),
    ``result`` (the ``TuneResult``), ``error`` (an ``OrtlabError``), ``items`` (the finished trials drained so far),
    ``meta`` (the caller's notes). ``latest`` gives the trials drained as they are now (a later trial moves an
    earlier one off the Pareto front); None: as they were drained."""

    def __init__(self, tuner: Any, meta: dict[str, Any] | None = None,
                 latest: Callable[[list[Any]], list[Any]] | None = None) -> None:
        super().__init__()
        self.tuner = tuner
        self._latest = latest
        self.meta: dict[str, Any] = dict(meta or {})
        self.state = RUNNING
        self.result: Any = None
        self.error: OrtlabError | Cancelled | None = None
        self.items: list[Any] = []
        self.cancelled = False
        self.handled = False
        self._events: queue.Queue[Any] = queue.Queue()

    @property
    def cpu_used(self) -> float:
        """CPU seconds the search has used so far (this process and the processes it started)."""
        return self.tuner.cpu_used

    def follow(self) -> Generator[Any, None, None]:
        """Run the search here, yielding each trial as it finishes (also queued for :meth:`drain`); the job ends
        with the generator, also when the caller stops early."""
        trials = self.tuner.trials()
        try:
            for trial in trials:
                self._events.put(trial)
                yield trial
            self._end(CANCELLED if self.cancelled else DONE)
        except Cancelled as exc:
            self._end(CANCELLED, exc)
        except OrtlabError as exc:
            self._end(FAILED, exc)
        except Exception as exc:  # an engine bug: a failure with its words, never lost in a thread
            self._end(FAILED, OrtlabError(f"{type(exc).__name__}: {exc}"))
        finally:
            trials.close()  # the tuner sets its result as its generator ends
            if not self.done:  # the caller stopped iterating (an interrupt): what finished is the result
                self._end(CANCELLED if self.cancelled else DONE)

    def _end(self, state: str, error: OrtlabError | Cancelled | None = None) -> None:
        self.state, self.error = state, error
        self.result = self.tuner.result
        self._ended()

    def drain(self) -> list[Any]:
        """The trials finished since the last call (added to ``items``)."""
        new: list[Any] = []
        while True:
            try:
                new.append(self._events.get_nowait())
            except queue.Empty:
                break
        self.items.extend(new)
        if self._latest is not None:
            self.items = self._latest(self.items)
        return new

    def start(self) -> TuneJob:
        """Run the search on a daemon thread; returns the job."""
        threading.Thread(target=lambda: [None for _ in self.follow()], name="ortlab-tune", daemon=True).start()
        return self

    def cancel(self) -> None:
        """Stop: the running trial is cancelled and no further one starts; the result covers the finished ones."""
        self.cancelled = True
        self.tuner.cancel()
