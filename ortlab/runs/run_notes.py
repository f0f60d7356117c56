"""The warnings and notes a recipe run collects as its stages go (:mod:`ortlab.runs.pipeline`)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class RunNotes:
    """The warnings and notes a run collects, in order, each once (every stage may add to them)."""

    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def warn(self, items: Iterable[Any] | None) -> None:
        for w in items or ():
            if w and str(w) not in self.warnings:
                self.warnings.append(str(w))

    def note(self, items: Iterable[Any] | None) -> None:
        for n in items or ():
            if n and str(n) not in self.notes:
                self.notes.append(str(n))

    def restate(self, said: str, fact: str) -> None:
        """The note ``fact`` in place of ``said`` (what the recipe's check said might happen, now that it did)."""
        self.notes[:] = [n for n in self.notes if n != said]
        self.note([fact])
