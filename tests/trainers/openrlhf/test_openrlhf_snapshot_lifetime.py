"""Snapshot lifetimes in the OpenRLHF executor: with ``--sero`` the executor snapshots before every step and keeps
the episodes until their group's `finish_group`, which discards every snapshot in the env that took it, so 200
episodes of ``envkit/SWE-v0`` keep the overlay layer store bounded (DESIGN, snapshot contract rule 6).

The engine runs `file_writing_policy` (a real transformers model with hand-set weights that writes a file on
every turn) through the local trainer's sampler, in place of vLLM (which needs a GPU).
"""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

import pytest

pytestmark = pytest.mark.slow

EPISODES, GROUP = 200, 4


class ModelEngine:
    """Answers OpenRLHF's ``generate(token_ids, params)`` with the local trainer's sampler on a transformers model."""

    def __init__(self, model, tokenizer):
        self.model, self.tok = model, tokenizer

    async def generate(self, prompt_token_ids, sampling_params, multi_modal_data=None):
        from envkit.trainers.local.generation import sample

        out = sample(
            self.model, self.tok, [list(prompt_token_ids)], [float(sampling_params.temperature)],
            max_new_tokens=int(sampling_params.max_tokens), seed=0, return_logprobs=True,
        )  # fmt: skip
        ids = list(out.tokens[0])
        assert out.logprobs is not None
        lps = [{t: SimpleNamespace(logprob=lp)} for t, lp in zip(ids, out.logprobs[0], strict=True)]
        finish = "length" if out.truncated[0] else "stop"
        text = self.tok.decode(ids)
        return SimpleNamespace(outputs=[SimpleNamespace(token_ids=ids, text=text, finish_reason=finish, logprobs=lps)])


def test_executor_discards_every_snapshot_and_the_swe_layer_store_stays_bounded(swe_sandbox, file_writing_policy):
    import torch
    from vllm import SamplingParams

    import envkit
    from envkit.envs.swe.layers import LayerStore
    from envkit.trainers.openrlhf.config import BackendConfig
    from envkit.trainers.openrlhf.executor_contract import GenerationContext
    from envkit.trainers.openrlhf.gym_executor import GymAgentExecutor
    from envkit.trainers.openrlhf.rollout_records import RESPONSE_KEY, RolloutRecord
    from envkit.trainers.sero_options import TrainerSeroOptions

    torch.set_num_threads(1)
    model, tok, action = file_writing_policy
    # SERO on (snapshots before every step and at the end) with no oracle rows: the SWE oracle's test runs take
    # seconds per root, and this test is about the snapshots.
    cfg = BackendConfig(
        env_id="envkit/SWE-v0", sero=True, advantage="graphgpo", max_turns=1, n_samples_per_prompt=GROUP,
        sero_opts=TrainerSeroOptions(max_oracle_share=0.0, min_budget=1),  # one turn: roots need budget 1 (never run)
    )  # fmt: skip
    ex = GymAgentExecutor(cfg)
    engine = ModelEngine(model, tok)
    params = SamplingParams(temperature=1.0, max_tokens=4, logprobs=1)
    store = LayerStore.default()
    warm = envkit.make("envkit/SWE-v0").unwrapped  # every task's pinned base layers exist before counting
    for i in range(len(warm.tasks)):
        warm.reset(seed=0, options={"index": i})
    warm.close()
    base = store.layer_count()
    first_id = int(store.new_id(), 16)

    async def group(g: int) -> list[dict]:
        label = json.dumps({"seed": g})
        outs = await asyncio.gather(
            *(ex.execute("{obs}\nassistant: ", label, params, 4096, tok, engine) for _ in range(GROUP))
        )
        assert ex.pending_episodes == GROUP
        return await ex.finish_group(list(outs), GenerationContext(engine, tok, 4096, params))

    counts, played = [], 0
    try:
        for g in range(EPISODES // GROUP):
            outs = asyncio.run(group(g))
            for out in outs:
                rec = RolloutRecord.from_dict(out[RESPONSE_KEY])
                assert [s.action for s in rec.steps] == [action] and not rec.invalid[0]
            played += len(outs)
            assert ex.pending_episodes == 0
            counts.append(store.layer_count() - base)
        created = int(store.new_id(), 16) - first_id - 1
        envs = [e for free in ex._free.values() for e in free]
        assert played == EPISODES
        assert created >= EPISODES  # each episode froze its edit into a new layer ...
        # ... and only the layers the cached envs' work trees stand on remain (at most one per env instance)
        assert max(counts) <= len(envs) <= GROUP, counts
    finally:
        ex.close()
