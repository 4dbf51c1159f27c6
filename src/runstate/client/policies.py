"""Checkpoint policies: when a ``TaskRunner`` writes its step changes to the server.

Whatever the policy, a failure is written at once, and a step that is not
idempotent is written as RUNNING before it runs (so a crash in the middle of it
asks for a decision instead of silently repeating it). Buffered changes go in
one ``checkpointTask`` each time, so a checkpoint is one transaction and one
event. What is not yet written when a process dies runs again on resume: pick a
policy by how costly re-running idempotent steps is.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CheckpointPolicy:
    """The base of the four policies; use one of them."""

    every_step: bool = False
    """Write every step change as it happens (startStep, completeStep)."""
    every_n: int | None = None
    """Checkpoint after this many completed steps."""
    key_points: bool = False
    """Also checkpoint when a tool hits its limit (retries used up, rate-limited)."""

    def due(self, completed_since_flush: int) -> bool:
        """Whether buffered changes should be written now."""
        return self.every_n is not None and completed_since_flush >= self.every_n


class EveryStep(CheckpointPolicy):
    """Each step change is written as it happens: the most visible, the most writes."""

    def __init__(self) -> None:
        super().__init__(every_step=True)


class EveryNSteps(CheckpointPolicy):
    """A checkpoint after every ``n`` completed steps, and one for the rest at the end."""

    def __init__(self, n: int) -> None:
        if n < 1:
            raise ValueError("n must be at least 1")
        super().__init__(every_n=n)


class KeyPoints(CheckpointPolicy):
    """Checkpoints only at key points: a failure, a tool limit hit, and the end."""

    def __init__(self) -> None:
        super().__init__(key_points=True)


class AtEnd(CheckpointPolicy):
    """One checkpoint when the work ends (a failure is still written at once)."""

    def __init__(self) -> None:
        super().__init__()
