"""Snapshot lifetimes in the local trainer: every snapshot SERO's play loop takes is discarded once its group is
credited, so a run on ``envkit/SWE-v0`` keeps its overlay layer store bounded (DESIGN, snapshot contract rule 6).

The policy (`file_writing_policy`, a real transformers model with hand-set weights) writes a file on every turn,
so each final snapshot freezes a new overlay layer: without the discards the store would grow by one layer per
episode.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow

EPISODES = 200
TASKS, GROUP = 2, 4  # 8 episodes per step: 25 steps


def test_swe_layer_store_stays_bounded_over_200_episodes(swe_sandbox, file_writing_policy):
    torch = pytest.importorskip("torch")
    torch.set_num_threads(1)
    from envkit.envs.swe.layers import LayerStore
    from envkit.trainers.local.agent_source import AgentSource
    from envkit.trainers.local.explorers.plain import PlainEpisodes
    from envkit.trainers.local.multi_turn import AgentConfig, shared_envs
    from envkit.trainers.local.trainer import TrainConfig
    from envkit.trainers.sero_options import TrainerSeroOptions

    model, tok, action = file_writing_policy
    # SERO on (so the loop snapshots before every step and at the end) with no oracle rows: the SWE oracle's
    # test runs would take seconds per root; this test is about the snapshots.
    agent = AgentConfig(
        estimator="graphgpo", sero=True, max_turns=1, max_context_tokens=4096,
        sero_opts=TrainerSeroOptions(max_oracle_share=0.0, min_budget=1),  # one turn: what is measured is the store
    )  # fmt: skip
    cfg = TrainConfig(
        task="envkit/SWE-v0", prompts_per_step=TASKS, group_size=GROUP, max_new_tokens=4, agent=agent,
        tensorboard=False, plot=False, progress=False,
    )  # fmt: skip
    store = LayerStore.default()
    # every task's pinned base layers exist before counting (they are built once per store, on first use)
    warm = shared_envs("envkit/SWE-v0", TASKS * GROUP)[0]
    for i in range(len(warm.tasks)):
        warm.reset(seed=0, options={"index": i})
    base = store.layer_count()
    first_id = int(store.new_id(), 16)
    counts, played, discarded = [], 0, 0
    for step in range(EPISODES // (TASKS * GROUP)):
        _, m = AgentSource(cfg, model, tok, PlainEpisodes(cfg, model, tok)).batch(step, seed=step)
        played += m["rollouts"]
        discarded += m["sero_discarded"]
        assert m["invalid_share"] == 0.0  # every action was the file-writing tool call
        counts.append(store.layer_count() - base)
    created = int(store.new_id(), 16) - first_id - 1
    assert played == EPISODES
    assert discarded == 2 * EPISODES  # the snapshot before the one step and the final one, per episode
    assert created >= EPISODES  # each episode froze its edit into a new layer ...
    # ... and only the layers the live envs' work trees still stand on remain (at most one per env instance)
    assert max(counts) <= TASKS * GROUP, counts
    for env in shared_envs("envkit/SWE-v0", TASKS * GROUP):
        assert env.tree is not None
        assert all(store.refcount(layer) >= 1 for layer in env.tree.stack)
