"""The explorer registry: which `SingleTurnExplorer` / `AgentExplorer` a `TrainConfig` names, and the run's
`BatchSource` around it (`make_source`, what `LocalTrainer` calls).

``--explorer none`` is plain groups (`envkit.trainers.local.explorers.plain`); ``eden`` and ``xrpo`` exist in both
forms; ``branch`` only on agent envs. ``state`` is the explorer's ``state_dict()`` from a checkpoint (None: new).
The contracts are in `envkit.trainers.local.contracts` (a module that imports no driver).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from envkit.trainers.local.agent_source import AgentSource
from envkit.trainers.local.contracts import AgentExplorer, BatchSource, SingleTurnExplorer
from envkit.trainers.local.explorers.branch import AgentBranchDriver
from envkit.trainers.local.explorers.eden import AgentEdenDriver, EdenDriver
from envkit.trainers.local.explorers.plain import PlainEpisodes, PlainGroups
from envkit.trainers.local.explorers.xrpo import AgentXrpoDriver, XrpoDriver
from envkit.trainers.local.single_turn_source import SingleTurnSource
from envkit.trainers.local.tasks import ProblemSource

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from envkit.trainers.local.config import TrainConfig

__all__ = [
    "AGENT_EXPLORERS",
    "SINGLE_TURN_EXPLORERS",
    "make_agent_explorer",
    "make_single_turn_explorer",
    "make_source",
]

State = dict[str, Any] | None
#: name -> builder(run, model, tokenizer, task, state), single-turn runs.
SINGLE_TURN_EXPLORERS: dict[str, Callable[..., SingleTurnExplorer]] = {
    "none": lambda run, model, tok, task, state: PlainGroups(run, model, tok, task),
    "eden": lambda run, model, tok, task, state: EdenDriver(run.eden, model, tok, task, run, state),
    "xrpo": lambda run, model, tok, task, state: XrpoDriver(run.xrpo, model, tok, task, run, state),
}
#: name -> builder(run, model, tokenizer, state), multi-turn runs.
AGENT_EXPLORERS: dict[str, Callable[..., AgentExplorer]] = {
    "none": lambda run, model, tok, state: PlainEpisodes(run, model, tok),
    "eden": lambda run, model, tok, state: AgentEdenDriver(run.eden, model, tok, run, state),
    "xrpo": lambda run, model, tok, state: AgentXrpoDriver(run.xrpo, model, tok, run, state),
    "branch": lambda run, model, tok, state: AgentBranchDriver(run.branch, model, tok, run, state),
}


def _unknown(name: str, names: list[str], kind: str) -> ValueError:
    hint = difflib.get_close_matches(name, names, n=1)
    return ValueError(
        f"no {kind} explorer named {name!r}" + (f"; did you mean {hint[0]!r}?" if hint else "")
        + f" (known: {', '.join(names)})"
    )  # fmt: skip


def make_single_turn_explorer(
    run: TrainConfig, model: PreTrainedModel, tok: PreTrainedTokenizerBase, task: ProblemSource, state: State
) -> SingleTurnExplorer:
    """The single-turn explorer `run.explorer` names. Raises ValueError for an unknown name (it lists the names)."""
    if run.explorer not in SINGLE_TURN_EXPLORERS:
        raise _unknown(run.explorer, sorted(SINGLE_TURN_EXPLORERS), "single-turn")
    return SINGLE_TURN_EXPLORERS[run.explorer](run, model, tok, task, state)


def make_agent_explorer(
    run: TrainConfig, model: PreTrainedModel, tok: PreTrainedTokenizerBase, state: State
) -> AgentExplorer:
    """The multi-turn explorer `run.explorer` names. Raises ValueError for an unknown name (it lists the names)."""
    if run.explorer not in AGENT_EXPLORERS:
        raise _unknown(run.explorer, sorted(AGENT_EXPLORERS), "multi-turn")
    return AGENT_EXPLORERS[run.explorer](run, model, tok, state)


def make_source(
    run: TrainConfig, model: PreTrainedModel, tok: PreTrainedTokenizerBase, task: ProblemSource | None, state: State
) -> BatchSource[Any]:
    """The run's batch source: `AgentSource` on multi-turn envs, else `SingleTurnSource` over `task`."""
    if run.multi_turn:
        return AgentSource(run, model, tok, make_agent_explorer(run, model, tok, state))
    if task is None:
        raise ValueError(f"a single-turn run needs its task (envkit.trainers.local.task_specs.make_task({run.task!r}))")
    return SingleTurnSource(run, tok, task, make_single_turn_explorer(run, model, tok, task, state))
