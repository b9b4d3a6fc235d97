"""``--explorer none``: plain groups, n rollouts per prompt and the estimator's credit unchanged (the `Explorer`
contract's defaults)."""

from __future__ import annotations

from typing import ClassVar

from envkit.trainers.openrlhf.explorers.base import Explorer

__all__ = ["PlainExplorer"]


class PlainExplorer(Explorer):
    """Plain groups (every hook is `Explorer`'s default)."""

    name: ClassVar[str] = "none"
