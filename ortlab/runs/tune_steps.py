"""The steps between a tune search's strategy and the tuner that runs its trials (:mod:`ortlab.runs.tune_search`):
a :class:`Proposal` is answered with the finished trial; the others are said or shown."""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass

from ortlab.runs.tune_policy import Stage, Trial
from ortlab.settings.config import Recipe


@dataclass(frozen=True)
class Proposal:
    """Run ``recipe`` as a trial of ``stage`` (``note``: why); send the trial back. ``ahead``: the recipes likely
    to run from here, this one first (None: as before)."""

    recipe: Recipe
    stage: Stage
    note: str = ""
    ahead: tuple[Recipe, ...] | None = None


@dataclass(frozen=True)
class Ahead:
    """The recipes likely to run next, in order (none: nothing starts ahead any more)."""

    recipes: tuple[Recipe, ...] = ()


@dataclass(frozen=True)
class Say:
    """A note for the search's summary."""

    text: str


@dataclass(frozen=True)
class Finished:
    """A trial the strategy has taken in: show it."""

    trial: Trial


Step = Proposal | Ahead | Say | Finished
Steps = Generator[Step, Trial, None]


def ask(recipe: Recipe, stage: Stage, note: str = "", ahead: Sequence[Recipe] | None = None
        ) -> Generator[Step, Trial, Trial]:
    """Propose ``recipe``; the trial sent back."""
    return (yield Proposal(recipe, stage, note, tuple(ahead) if ahead is not None else None))
