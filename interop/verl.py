"""A verl agent loop for envkit envs, registered as ``envkit`` (``actor_rollout_ref.rollout.agent.default_agent_loop
=envkit``, or an ``agent_name: envkit`` column).

Each ``run`` plays one episode: reset the env (seed / options from the sample's ``extra_info``), put the
observation in the chat, then alternate model turns (``server_manager.generate`` on the running token ids) and env
steps (the decoded turn is the action) until the env ends the episode, ``max_turns``, or ``response_length``. Token
bookkeeping uses verl's Continuous Token helpers (``ct_merge_assistant_token`` / ``ct_merge_context_msg``): model
tokens have ``response_mask`` 1 and their log-probs, env observations 0. ``reward_score`` is the episode's summed env
reward; ``extra_fields`` carries per-turn rewards, the actions, success and the env id.

Settings: ``envkit: {env_id, remote, max_turns, env_kwargs}`` at the top of verl's trainer config; a sample's
``extra_info`` may override ``env_id``, ``seed`` and ``options``.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any
from uuid import uuid4

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput, register

import envkit
from envkit.core import env_success
from envkit.interop.trl import render

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


@register("envkit")
class EnvkitAgentLoop(AgentLoopBase):
    """Multi-turn agent loop over an envkit env (local, or on an envkit-serve server with ``envkit.remote``)."""

    def __init__(self, *args: Any, **kwargs: Any):
        kwargs.pop("tools", None)  # verl passes its tool list; envkit envs take actions as text
        super().__init__(*args, **kwargs)
        cfg = self.config.get("envkit", None) or {}
        self.env_id = str(cfg.get("env_id", "envkit/WebShop-v0"))
        self.remote = cfg.get("remote", None)
        self.max_turns = int(cfg.get("max_turns", 30))
        self.env_kwargs = dict(cfg.get("env_kwargs", None) or {})
        self.response_length = int(self.rollout_config.response_length)

    def _make(self, env_id: str) -> Any:
        if self.remote:
            return envkit.make(env_id, remote=str(self.remote), **self.env_kwargs)
        return envkit.make(env_id, **self.env_kwargs)

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        extra = dict(kwargs.get("extra_info") or {})
        env_id = str(extra.get("env_id", self.env_id))
        seed, options = int(extra.get("seed", kwargs.get("index", 0))), dict(extra.get("options") or {})
        messages = [dict(m) for m in kwargs["raw_prompt"]]
        loop = asyncio.get_running_loop()
        env = await loop.run_in_executor(None, self._make, env_id)
        try:
            obs, info = await loop.run_in_executor(None, lambda: env.reset(seed=seed, options=options))
            messages.append({"role": "user", "content": render(obs, info)})
            ids = await self.ct_build_initial_tokens(messages)
            mask: list[int] = []
            logprobs: list[float] = []
            rewards: list[float] = []
            actions: list[str] = []
            metrics: dict[str, Any] = {"generate_sequences": 0.0, "tool_calls": 0.0}
            turns = 0
            while turns < self.max_turns and len(mask) < self.response_length:
                t0 = loop.time()
                out = await self.server_manager.generate(
                    request_id=uuid4().hex, prompt_ids=ids, sampling_params=sampling_params
                )
                metrics["generate_sequences"] += loop.time() - t0
                merged, mask, lp = await self.ct_merge_assistant_token(
                    ids, out.token_ids, mask, logprobs if (logprobs or out.log_probs) else None,
                    assistant_logprobs=out.log_probs or None,
                )  # fmt: skip
                ids, logprobs, turns = merged.token_ids, list(lp or []), turns + 1
                tok: PreTrainedTokenizerBase = self.tokenizer
                action = str(tok.decode(out.token_ids, skip_special_tokens=True)).strip()
                messages.append({"role": "assistant", "content": action})
                actions.append(action)
                t1 = loop.time()
                obs, reward, term, trunc, info = await loop.run_in_executor(None, env.step, action)
                metrics["tool_calls"] += loop.time() - t1
                rewards.append(float(reward))
                if term or trunc or len(mask) >= self.response_length or turns >= self.max_turns:
                    break
                before = list(messages)
                messages.append({"role": "user", "content": render(obs, info)})
                merged, mask2, lp2 = await self.ct_merge_context_msg(before, messages, ids, mask, logprobs or None)
                if len(mask2) >= self.response_length:
                    break
                ids, mask, logprobs = merged.token_ids, mask2, list(lp2 or [])
        finally:
            await loop.run_in_executor(None, env.close)
        n = len(mask)
        response_ids, prompt_ids = ids[len(ids) - n :], ids[: len(ids) - n]
        L = self.response_length
        return AgentLoopOutput(
            prompt_ids=prompt_ids,
            response_ids=response_ids[:L],
            response_mask=mask[:L],
            response_logprobs=logprobs[:L] if logprobs else None,
            reward_score=float(sum(rewards)),
            num_turns=2 * turns + 1,
            metrics=AgentLoopMetrics(**metrics),
            extra_fields={
                "turn_scores": rewards,
                "envkit_success": env_success(info),
                "envkit_env_id": env_id,
                "envkit_actions": actions,
            },
        )
