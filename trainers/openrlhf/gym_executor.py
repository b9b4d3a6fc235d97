"""A Gymnasium agent executor for OpenRLHF 0.11.2: one multi-turn episode of an envkit env per rollout.

OpenRLHF's rollout actor calls ``execute(prompt, label, sampling_params, max_length, hf_tokenizer,
llm_engine)`` once per rollout (``AgentExecutorBase``); `GymAgentExecutor` plays one episode:

- the task comes from the dataset's label: a JSON object ``{"env": ID, "seed": INT, "options": {...},
  "kwargs": {...}}`` (every key optional; ``env`` defaults to ``--env``) or a bare integer seed; without a seed
  the seed is derived from the prompt and label, so every rollout of a prompt plays the same episode;
- the first observation is inserted into the dataset prompt at ``{obs}`` (or appended when the prompt has no
  ``{obs}``); env calls run in threads (``asyncio.to_thread``), envs are reused across rollouts;
- token-in/token-out: the engine gets token ids and returns token ids; earlier turns are never re-tokenised,
  each env observation is tokenised once and appended (``--feedback-template``);
- every env step goes to the episode's one record, an `envkit.recorder.EpisodeRecorder` (observation, action,
  reward, info with the env's ``invalid`` flag and verdict; with a snapshot before each step when SERO or branching
  keep the episode), and per step the action's token span (`envkit.trainers.openrlhf.rollout_records.Turn`); the
  response carries the recorder's steps (`RolloutRecord.steps`), from which the credit reads states and anchors;
- truncation is reported, never silent: ``record.reason`` is "context" (max_len reached), "max_turns",
  "env_truncated" or "generation_length" and ``response["truncated"]`` is set.

The response dict is OpenRLHF's (``observation_tokens``, ``action_ranges``, ``reward``, ``scores``, ...) plus the
record under ``"envkit"``. ``trainers/openrlhf/agent_executor.py`` is the file OpenRLHF loads.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import itertools
import math
from collections.abc import AsyncIterator, Mapping
from copy import deepcopy
from typing import TYPE_CHECKING, Any

import gymnasium as gym
from openrlhf.utils.agent import AgentExecutorBase

from envkit.core import Step
from envkit.lifetime import discard_many
from envkit.recorder import EpisodeRecorder
from envkit.snapshot import snapshot_env
from envkit.trainers.openrlhf.config import BackendConfig
from envkit.trainers.openrlhf.executor_contract import ForkStart, GenerationContext, RolloutTask
from envkit.trainers.openrlhf.explorers.registry import make_explorer
from envkit.trainers.openrlhf.rollout_records import RESPONSE_KEY, RolloutRecord, RolloutSpec, Turn

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase
    from vllm import SamplingParams

    from envkit.trainers.openrlhf.executor_contract import TokenEngine
    from envkit.trainers.openrlhf.sero_rows import SeroEpisode


def render_prompt(prompt: str, observation: str) -> str:
    """The first model input: the observation at ``{obs}`` in the dataset prompt, else appended."""
    return prompt.replace("{obs}", observation) if "{obs}" in prompt else prompt + observation


def clean_action(text: str, tokenizer: PreTrainedTokenizerBase) -> str:
    """The action text sent to the env: special tokens (EOS, chat markers) removed, whitespace stripped."""
    for special in getattr(tokenizer, "all_special_tokens", []) or []:
        if special:
            text = text.replace(special, "")
    return text.strip()


def _tokenize(tokenizer: PreTrainedTokenizerBase, text: str) -> list[int]:
    return list(tokenizer(text=text, add_special_tokens=False)["input_ids"])


class GymAgentExecutor(AgentExecutorBase):
    """OpenRLHF agent executor running envkit (Gymnasium) envs; see the module docstring.

    Args:
        config: The backend config; by default read from the Ray worker's environment.
    """

    def __init__(self, config: BackendConfig | None = None) -> None:
        self.config = config if config is not None else BackendConfig.from_env()
        self.explorer = make_explorer(self.config)  # keeps_episodes / episode_extra (branching)
        self._free: dict[str, list[gym.Env[str, str]]] = {}
        self._episodes: dict[str, SeroEpisode] = {}  # SERO, branch: episodes with snapshots until their group ends
        self._held: set[int] = set()  # branch: envs kept out of the cache with their episode (instance snapshots)
        self._ids = itertools.count()

    # ----- env reuse -----------------------------------------------------------------------------------------
    @contextlib.asynccontextmanager
    async def lease(self, task: RolloutTask) -> AsyncIterator[gym.Env[str, str]]:
        """An env for `task` (a cached one of its id and kwargs, else a new one), returned to the cache after."""
        free = self._free.setdefault(task.env_key, [])
        env = free.pop() if free else await asyncio.to_thread(self._make, task)
        try:
            yield env
        finally:
            if id(env) not in self._held:
                self._free.setdefault(task.env_key, []).append(env)

    def _make(self, task: RolloutTask) -> gym.Env[str, str]:
        """A new env for `task`: in this process, or a session on the env fleet (``--fleet.*``)."""
        if self.config.fleet is None:
            return gym.make(task.env_id, **task.kwargs)
        from envkit.fleet.env import FleetEnv

        return FleetEnv(task.env_id, self.config.fleet, **task.kwargs)

    def close(self) -> None:
        """Close every cached env."""
        for envs in self._free.values():
            for env in envs:
                env.close()
        self._free.clear()

    # ----- OpenRLHF's executor API ---------------------------------------------------------------------------
    async def execute(
        self,
        prompt: str,
        label: object,
        sampling_params: SamplingParams,
        max_length: int,
        hf_tokenizer: PreTrainedTokenizerBase,
        llm_engine: TokenEngine,
        images: object = None,
    ) -> dict[str, Any]:
        task = RolloutTask.from_label(label, self.config)
        if task.seed is None:  # all rollouts of one prompt must play the same episode: seed from the prompt
            digest = hashlib.sha256(f"{prompt}\x00{label}".encode()).hexdigest()
            task = dataclasses.replace(task, seed=int(digest[:8], 16))
        if getattr(getattr(llm_engine, "spec", None), "fork", False):  # branching: filled in finish_group
            from envkit.trainers.openrlhf.branch_rows import fork_slot

            return fork_slot(prompt, label)
        gen = GenerationContext(llm_engine, hf_tokenizer, max_length, sampling_params)
        async with self.lease(task) as env:
            return await self.play_episode(env, task, prompt, label, gen)

    async def play_episode(
        self,
        env: gym.Env[str, str],
        task: RolloutTask,
        prompt: str,
        label: object,
        gen: GenerationContext,
        fork: ForkStart | None = None,
    ) -> dict[str, Any]:
        """One episode in `env` from reset (or from `fork`'s restored state) as an OpenRLHF response row."""
        engine, tokenizer, max_length, sampling_params = gen.engine, gen.tokenizer, gen.max_length, gen.sampling_params
        if fork is None:
            obs, info = await asyncio.to_thread(env.reset, seed=task.seed, options=task.options)
        else:  # branching: `env` was restored to a backbone's state (`branch_rows.ForkStart`)
            obs, info = fork.observation, fork.info
        episode = None
        branch = self.explorer.keeps_episodes
        keep = (self.config.sero or branch) and fork is None  # SERO / branching: snapshots before every step
        recorder = EpisodeRecorder(obs, info, snapshots=keep)  # the episode's one record of steps
        if keep:
            from envkit.trainers.openrlhf.sero_rows import SeroEpisode

            episode = SeroEpisode(task, recorder, env)
        tokens = _tokenize(tokenizer, render_prompt(prompt, str(obs)))
        spec = getattr(engine, "spec", None) or RolloutSpec(group="")
        want_logprobs = getattr(sampling_params, "logprobs", None) is not None
        logprobs: list[float] | None = [0.0] * len(tokens) if want_logprobs else None
        action_lps: list[float] = []
        turns: list[Turn] = []
        ranges: list[tuple[int, int]] = []
        reason, truncated = "terminated", False
        terminated = env_trunc = False
        nll: list[float] = []  # per turn: the sampled tokens' mean -log p (branching's entropy estimate)
        if fork is not None:  # continue the backbone's row: its tokens and turns before the fork turn
            tokens, turns = list(fork.tokens), list(fork.turns)
            logprobs = list(fork.logprobs) if logprobs is not None else None
        if len(tokens) >= max_length:
            tokens = tokens[-(max_length - 1) :]  # keep the end (OpenRLHF's rule), and say so
            truncated, reason = True, "context"
            if logprobs is not None:
                logprobs = logprobs[-(max_length - 1) :]
        while True:
            budget = max_length - len(tokens)
            if budget <= 0:
                truncated, reason = True, "context"
                break
            if self.config.turn_cap and len(turns) >= self.config.turn_cap:  # resolved: --sero fills the env's
                truncated, reason = True, "max_turns"
                break
            params = deepcopy(sampling_params)
            per_turn = getattr(sampling_params, "max_tokens", None)
            params.max_tokens = min(per_turn, budget) if per_turn else budget
            if branch and params.logprobs is None:
                params.logprobs = 0  # the sampled token's log-prob only (docs/openrlhf.md, explorer branch)
            out = (await engine.generate(tokens, params)).outputs[0]
            action_tokens = list(out.token_ids)
            action = clean_action(out.text, tokenizer)
            start, end = len(tokens), len(tokens) + len(action_tokens)
            snap = await asyncio.to_thread(snapshot_env(env).snapshot) if episode is not None else None
            obs, reward, terminated, env_trunc, info = await asyncio.to_thread(env.step, action)
            recorder.step(snap, action, obs, reward, terminated, env_trunc, info)
            turns.append(Turn(start, end))
            ranges.append((start, end))
            tokens = tokens + action_tokens
            lps = [float(d[t].logprob) if d and t in d else 0.0 for t, d in zip(action_tokens, out.logprobs or [])]
            lps += [0.0] * (len(action_tokens) - len(lps))
            nll.append(-sum(lps) / max(len(lps), 1))
            if logprobs is not None:
                logprobs.extend(lps)
                action_lps.extend(lps)
            if terminated or env_trunc:
                truncated = truncated or bool(env_trunc and not terminated)
                reason = "env_truncated" if env_trunc and not terminated else "terminated"
                break
            if out.finish_reason == "length" and len(tokens) >= max_length:
                truncated, reason = True, "generation_length"
                break
            feedback = _tokenize(tokenizer, self.config.feedback_template.format(obs=obs))
            tokens = tokens + feedback
            if logprobs is not None:
                logprobs.extend([0.0] * len(feedback))
        extra: dict[str, Any] = {}
        # the final state's snapshot only when this loop cut a kept episode (envkit.recorder's rule)
        final = recorder.wants_final_snapshot
        recorder.stop(await asyncio.to_thread(snapshot_env(env).snapshot) if final else None)
        if episode is not None:
            extra["episode"] = f"e{next(self._ids)}"
            self._episodes[extra["episode"]] = episode
            if branch:  # kept with its episode until finish_group (ALFWorld's snapshots are instance-scoped)
                self._held.add(id(env))
                extra.update(self.explorer.episode_extra(nll))
        mean_lp = sum(action_lps) / len(action_lps) if action_lps else None
        # the row's record: from reset, or (a fork) from its backbone's reset with the backbone's steps first
        first: tuple[str, Mapping[str, Any], tuple[Step, ...]] = (
            (recorder.initial_observation, recorder.initial_info, ())
            if fork is None
            else (fork.start_observation, fork.start_info, fork.steps)
        )
        record = RolloutRecord(
            spec=spec,
            observation=first[0],
            info=first[1],
            steps=first[2] + recorder.steps,
            turns=tuple(turns),
            truncated=truncated,
            reason=reason,
            mean_logprob=mean_lp if mean_lp is None or math.isfinite(mean_lp) else None,
            extra=extra,
        )
        return {
            "prompt": prompt,
            "label": label,
            "images": None,
            "mm_train_inputs": None,
            "reward": record.episode_return,
            "scores": float(record.success),
            "observation_tokens": tokens[:max_length],
            "action_ranges": ranges,
            "rollout_log_probs": logprobs[:max_length] if logprobs is not None else None,
            "truncated": truncated,
            "extra_logs": {
                "envkit_success": float(record.success),
                "envkit_turns": float(len(turns)),
                "envkit_oracle": 0.0,
            },
            RESPONSE_KEY: record.to_dict(),
        }

    async def finish_group(self, responses: list[dict], gen: GenerationContext) -> list[dict]:
        """After one prompt's rollouts: SERO oracle rows (``--sero``), the branch step's forks (fork slots of
        ``--explorer branch``), else the responses unchanged.

        Called by envkit's rollout actor with the group's responses and how they were generated (`gen`, its engine
        the rollout actor); see `envkit.trainers.openrlhf.sero_rows` and `envkit.trainers.openrlhf.branch_rows`.
        """
        records = [RolloutRecord.from_dict(r[RESPONSE_KEY]) for r in responses]
        episodes = [self._episodes.pop(k, None) if (k := r.extra.get("episode")) else None for r in records]
        forks = any(r.spec.fork for r in records)
        if not (self.config.sero or forks or any(episodes)):
            return responses
        try:
            if forks:
                from envkit.trainers.openrlhf.branch_rows import branch_group

                return await branch_group(self, responses, episodes, gen)
            if not self.config.sero:
                return responses
            from envkit.trainers.openrlhf.sero_rows import sero_group

            return await sero_group(self, responses, episodes, gen)
        finally:  # the group is credited: release its snapshots in the envs that took them (SWE layers)
            for ep in episodes:
                if ep is not None:
                    await asyncio.to_thread(discard_many, ep.env, ep.snapshots())
                    if id(ep.env) in self._held:  # back to the cache
                        self._held.discard(id(ep.env))
                        self._free.setdefault(ep.task.env_key, []).append(ep.env)

    @property
    def pending_episodes(self) -> int:
        """Episodes kept with their snapshots until their group's `finish_group` (SERO)."""
        return len(self._episodes)
