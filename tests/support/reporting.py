"""A progress reporter that keeps every event, for tests that check what the engine reported."""

from __future__ import annotations

from ortlab.core.progress import ProgressEvent


class CollectingReporter:
    """Keeps every event in a list."""

    def __init__(self) -> None:
        self.events: list[ProgressEvent] = []

    def __call__(self, event: ProgressEvent) -> None:
        self.events.append(event)

    def stages(self) -> list[str]:
        seen: list[str] = []
        for e in self.events:
            if e.stage not in seen:
                seen.append(e.stage)
        return seen
