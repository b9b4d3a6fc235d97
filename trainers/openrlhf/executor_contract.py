"""What the OpenRLHF executor's parts share: the task of one rollout (`RolloutTask`), how its rows are generated
(`GenerationContext`: engine, tokenizer, max_length, sampling params, one value instead of four loose arguments),
where a fork starts (`ForkStart`), and what the builders that finish a group (`envkit.trainers.openrlhf.branch_rows`,
`envkit.trainers.openrlhf.sero_rows`) need of the executor that played it (`GroupExecutor`, met by
`envkit.trainers.openrlhf.gym_executor.GymAgentExecutor`).

The executor calls those builders; they know it only through this protocol, so neither imports the other back.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import gymnasium as gym

from envkit.core import Step
from envkit.trainers.openrlhf.config import BackendConfig
from envkit.trainers.openrlhf.rollout_records import Turn

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase
    from vllm import RequestOutput, SamplingParams


@dataclass(frozen=True)
class RolloutTask:
    """One episode's env and reset arguments, parsed from a dataset label."""

    env_id: str
    seed: int | None = None
    options: dict[str, Any] = field(default_factory=dict)
    kwargs: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_label(cls, label: object, config: BackendConfig) -> RolloutTask:
        """Parse a label (JSON object, integer seed, or None) with the config's defaults.

        Raises:
            ValueError: the label cannot be read or no env id is known.
        """
        data: Any = label
        if isinstance(label, str):
            text = label.strip()
            try:
                data = json.loads(text) if text else {}
            except json.JSONDecodeError as exc:
                raise ValueError(
                    f"task label {label!r} is neither JSON nor an integer seed; write labels as "
                    '\'{"seed": 3, "options": {...}}\' (and "env": "envkit/<Id>" unless --env is given)'
                ) from exc
        if data is None:
            data = {}
        if isinstance(data, int) and not isinstance(data, bool):
            data = {"seed": data}
        if not isinstance(data, Mapping):
            raise ValueError(f"task label {label!r}: expected a JSON object or an integer seed")
        env_id = data.get("env") or config.env_id
        if not env_id:
            raise ValueError(f"task label {label!r} names no env and --env was not given")
        kwargs = {**config.env_kwargs, **dict(data.get("kwargs", {}))}
        seed = data.get("seed")
        return cls(str(env_id), None if seed is None else int(seed), dict(data.get("options", {})), kwargs)

    @property
    def env_key(self) -> str:
        return json.dumps([self.env_id, self.kwargs], sort_keys=True, default=str)


class TokenEngine(Protocol):
    """What generates a row's tokens and scores them: OpenRLHF's ``llm_engine`` for one rollout
    (`envkit.trainers.openrlhf.rollout_actor.SpecEngine`), or the rollout actor itself when a group is finished."""

    async def generate(
        self, prompt_token_ids: list[int], sampling_params: SamplingParams, multi_modal_data: object = None
    ) -> RequestOutput: ...

    async def prompt_logprobs(self, prompt_token_ids: list[int]) -> list[float]:
        """Per token of the prompt after the first, its log-prob under the live policy."""
        ...


@dataclass(frozen=True)
class GenerationContext:
    """How one prompt's rows are generated: built once per group (`rollout_actor.run_planned`; per rollout from
    OpenRLHF's ``execute`` arguments) and handed down whole to the executor, SERO's and branching's row builders.

    Attributes:
        engine: What generates (`TokenEngine`): a rollout's `SpecEngine`, or the rollout actor for a whole group.
        tokenizer: The policy's tokenizer (OpenRLHF's ``hf_tokenizer``).
        max_length: Tokens one row may hold, prompt and every turn (OpenRLHF's ``--generate.max_len``).
        sampling_params: vLLM's, as OpenRLHF built them for this step (copied before a change, never mutated).
    """

    engine: TokenEngine
    tokenizer: PreTrainedTokenizerBase
    max_length: int
    sampling_params: SamplingParams


@dataclass(frozen=True)
class ForkStart:
    """Where a fork's episode starts (``--explorer branch``): the restored state and the backbone's row up to the
    fork turn (`envkit.trainers.openrlhf.branch_rows.fork_start`).

    Attributes:
        observation: The restored state's observation (the backbone's at the fork turn).
        info: The info the restore returned.
        start_observation: The backbone's first observation (the fork's record starts there too).
        start_info: Its info.
        steps: The backbone's steps before the fork turn (the fork's record holds them first).
        turns: Their turns (token spans in `tokens`).
        tokens: The backbone's row up to the fork turn's first action token.
        logprobs: Their rollout log-probs.
    """

    observation: str
    info: dict[str, Any]
    start_observation: str
    start_info: Mapping[str, Any]
    steps: tuple[Step, ...]
    turns: tuple[Turn, ...]
    tokens: tuple[int, ...]
    logprobs: tuple[float, ...]


class GroupExecutor(Protocol):
    """The executor as a group's row builders use it."""

    config: BackendConfig

    def lease(self, task: RolloutTask) -> contextlib.AbstractAsyncContextManager[gym.Env[str, str]]:
        """An env for `task`, returned to the executor's cache after."""
        ...

    async def play_episode(
        self,
        env: gym.Env[str, str],
        task: RolloutTask,
        prompt: str,
        label: object,
        gen: GenerationContext,
        fork: ForkStart | None = None,
    ) -> dict[str, Any]:
        """One episode in `env` (from reset, or from a fork's restored state), as an OpenRLHF response row."""
        ...
