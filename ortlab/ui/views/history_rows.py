"""History's table rows: one row per thing the person did, a tune search's trials folded into one row."""

from __future__ import annotations

from dataclasses import dataclass

from ortlab.api import RECOMMENDED_NOTE, Artifact

TUNE_ORIGIN = "tune"  # the origin a tune search's trials are recorded with


@dataclass
class TuneSearch:
    """The trials of one tune search (newest first), recorded one after another on one model."""

    trials: list[Artifact]

    @property
    def recommended(self) -> Artifact | None:
        """The trial its search recommended (None: it recommended none, or ended before saying)."""
        return next((t for t in self.trials if RECOMMENDED_NOTE in t.notes), None)

    @property
    def started_at(self) -> str:
        return self.trials[-1].created_at


def fold_tune_searches(runs: list[Artifact]) -> list[Artifact | TuneSearch]:
    """``runs`` (newest first, one model) with each unbroken stretch of tune trials folded into a
    :class:`TuneSearch`; a run started by hand between trials ends a stretch."""
    out: list[Artifact | TuneSearch] = []
    for r in runs:
        if r.origin != TUNE_ORIGIN:
            out.append(r)
        elif out and isinstance(out[-1], TuneSearch):
            out[-1].trials.append(r)
        else:
            out.append(TuneSearch([r]))
    return out


def search_recipe_text(search: TuneSearch, label: str | None) -> str:
    """The recipe cell of a search's row: "tune search · 6 trials · recommended #12: int8 static …" (``label``
    the recommended trial's recipe)."""
    n = len(search.trials)
    head = f"tune search · {n} trial{'s' if n != 1 else ''}"
    rec = search.recommended
    if rec is None:
        return f"{head} · none recommended"
    return f"{head} · recommended #{rec.run_id}: {label}"
