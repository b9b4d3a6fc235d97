"""The OpenRLHF explorer registry: the `Explorer` a run's ``--explorer`` names, built once per process.

``none`` is plain groups (`envkit.trainers.openrlhf.explorers.plain`); ``eden``, ``xrpo`` and ``branch`` one
module each. The contract and its hooks: `envkit.trainers.openrlhf.explorers.base`. The local trainer's
counterpart is `envkit.trainers.local.explorers.registry`.
"""

from __future__ import annotations

from envkit.errors import closest
from envkit.trainers.openrlhf.config import BackendConfig
from envkit.trainers.openrlhf.explorers.base import Explorer
from envkit.trainers.openrlhf.explorers.branch import BranchExplorer
from envkit.trainers.openrlhf.explorers.eden import EdenExplorer
from envkit.trainers.openrlhf.explorers.plain import PlainExplorer
from envkit.trainers.openrlhf.explorers.xrpo import XrpoExplorer

__all__ = ["EXPLORERS", "explorer_class", "make_explorer"]

#: ``--explorer`` value -> its explorer class.
EXPLORERS: dict[str, type[Explorer]] = {
    cls.name: cls for cls in (PlainExplorer, EdenExplorer, XrpoExplorer, BranchExplorer)
}


def explorer_class(name: str) -> type[Explorer]:
    """The explorer class ``--explorer name`` selects.

    Raises:
        ValueError: no explorer of that name (the message lists the known ones and the closest).
    """
    cls = EXPLORERS.get(name)
    if cls is None:
        hint = closest(name, EXPLORERS)
        guess = f"; did you mean {hint!r}?" if hint else ""
        raise ValueError(
            f"--explorer {name!r}: no OpenRLHF explorer of that name{guess} (known: {', '.join(sorted(EXPLORERS))})"
        )
    return cls


def make_explorer(config: BackendConfig) -> Explorer:
    """The run's explorer, built from its config (whose explorer settings are already sized and checked)."""
    return explorer_class(config.explorer)(config)
