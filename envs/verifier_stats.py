"""Throughput counters shared by the Math and Code verifiers (``verifier.stats``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class BatchStats:
    """Counters since a verifier started."""

    checks: int = 0
    timeouts: int = 0
    errors: int = 0
    last_batch: int = 0
    last_batch_seconds: float = 0.0

    @property
    def last_checks_per_s(self) -> float:
        """Throughput of the last `verify_many` call (responses per second)."""
        return self.last_batch / self.last_batch_seconds if self.last_batch_seconds > 0 else 0.0
