"""EDEN in the local trainer, both forms: `EdenDriver` (single-turn) and `AgentEdenDriver` (agent envs).

Both run the model with the maths of `envkit.trainers.explorers.eden` (noisy rows: `eden_noise`; credit:
`eden_credit`) and keep the run's budget: per prompt (task) ``TrainConfig.group_size`` rollouts (episodes), the last
``n_noisy`` noisy. Both select their anchor bank once at start with `AnchorSelection.select_bank` and save it in
checkpoints (``state_dict``).

Single-turn (`EdenDriver`): the anchor bank is selected once at start from the model's own input-embedding table with
`envkit.trainers.explorers.eden.build_anchor_bank` (scored by noisy rollouts on ``n_selection_prompts`` training
prompts). Tokenizers without word tokens (the char-level arithmetic one, the byte-level one) have no
``candidate_tokens``: then every non-special token is a candidate (documented fallback). Noisy and clean rows
share one `generate` call; rows keep the clean prompt ids, so the extra position never reaches the loss.


Agent envs (`AgentEdenDriver`; as on the OpenRLHF backend, `envkit.trainers.openrlhf.rollout_actor`,
`envkit.trainers.openrlhf.explorers.eden`):

1. The last ``n_noisy`` episodes of each task are noisy: their FIRST generation appends one extra input position
   after the first prompt (`draw_noisy_rows`: one anchor per task, independent noise per episode, relative norm
   rho); every later turn sees the token context only. Noisy episodes sample at the cosine-warmed noisy
   temperature (`row_temperatures`), every turn.
2. Advantages: with an episode-level estimator, `eden_advantages` on the episodes' success (mixed-group
   normalisation, batch-wide top-p |A| among noisy episodes, gamma); with GiGPO / GraphGPO, `eden_turn_credit`
   (each episode's mean |turn advantage| ranks the noisy ones, `absorb` scales the kept ones by gamma; the same
   call as OpenRLHF's EDEN explorer).
   Dropped noisy episodes leave the loss; every row keeps its clean prompt (the extra position never reaches
   the loss).
3. The anchor bank is selected on first turns: a candidate's noisy first action is *valid* when the env accepts
   it and *correct* when the env reports success after it (ours: an agent env has no per-turn answer to check).
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from envkit.credit.advantages import ESTIMATORS  # the episode-level estimators
from envkit.trainers.explorers.anchors import AnchorBank, anchor_score, candidate_tokens, decoded_vocab
from envkit.trainers.explorers.eden_config import EdenBankConfig
from envkit.trainers.explorers.eden_credit import eden_advantages, eden_turn_credit
from envkit.trainers.explorers.eden_noise import (
    build_anchor_bank,
    draw_noisy_rows,
    noisy_mask,
    perturb,
    row_temperatures,
)
from envkit.trainers.local.contracts import (
    AgentExplorer,
    Budget,
    EpisodeCredit,
    RolloutCredit,
    SingleTurnExplorer,
)
from envkit.trainers.local.multi_turn import AgentConfig, Episode, EpisodeSpec, play_specs
from envkit.trainers.local.prompt_encoding import encode_prompt
from envkit.trainers.local.single_turn import Rollout, generate_rows
from envkit.trainers.local.tasks import Problem, ProblemSource

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from envkit.trainers.local.config import TrainConfig

__all__ = ["AgentEdenDriver", "AnchorSelection", "EdenDriver"]


class AnchorSelection:
    """EDEN's anchor-bank selection (docs/methods.md section 5, ours): score candidate tokens by noisy rollouts.

    Subclasses call `_init_eden` and say what a training prompt is (`_selection_items`) and how its rollouts score
    (`_rollouts`).
    """

    model: PreTrainedModel
    tok: PreTrainedTokenizerBase
    cfg: EdenBankConfig
    run: TrainConfig
    relaxed: bool
    bank: AnchorBank

    def _init_eden(
        self, cfg: EdenBankConfig, model: PreTrainedModel, tok: PreTrainedTokenizerBase, run: TrainConfig,
        state: dict[str, Any] | None,
    ) -> None:  # fmt: skip
        """Check the noisy share against the run's group, then load the bank from `state` or select it."""
        cfg.n_standard(run.group_size)
        self.cfg, self.model, self.tok, self.run = cfg, model, tok, run
        self.relaxed = False
        self.bank = AnchorBank(state["token_ids"], state["vectors"]) if state is not None else self.select_bank()

    def state_dict(self) -> dict[str, Any]:
        return {"token_ids": np.asarray(self.bank.token_ids), "vectors": np.asarray(self.bank.vectors)}

    def _selection_items(self, rng: np.random.Generator) -> list[Any]:
        raise NotImplementedError

    def _rollouts(self, items: Sequence[Any], n: int, rows: np.ndarray | None, seed: int) -> list[tuple[float, bool]]:
        raise NotImplementedError

    def _embeddings(self) -> np.ndarray:
        return self.model.get_input_embeddings().get_parameter("weight").detach().float().cpu().numpy()

    def select_bank(self) -> AnchorBank:
        """Score candidate anchors with noisy rollouts on training prompts; pick a complementary bank."""
        emb = self._embeddings()
        vocab = decoded_vocab(self.tok)
        special = set(self.tok.all_special_ids)
        rng = np.random.default_rng([self.run.seed, 99])
        items = self._selection_items(rng)
        n = max(1, self.cfg.n_noisy)
        clean = self._rollouts(items, n, None, seed=1)
        clean_solved = np.array([max(r for r, _ in clean[i * n : (i + 1) * n]) > 0 for i in range(len(items))])

        def score(token: int) -> Any:
            rows = perturb(emb[token], len(items) * n, self.cfg.effective_rho, rng)
            out = self._rollouts(items, n, rows, seed=2 + token)
            valid = np.array([v for _, v in out]).reshape(len(items), n)
            correct = np.array([r > 0 for r, _ in out]).reshape(len(items), n)
            return anchor_score(valid, correct, clean_solved)

        try:
            candidate_tokens(emb, vocab[: len(emb)], self.cfg.candidate_percentiles)
            vocab_for_selection = vocab
        except ValueError:
            # No single-word alphabetic tokens (char/byte tokenizers): treat every non-special token as a word.
            vocab_for_selection = ["tok" if i not in special else "" for i in range(len(vocab))]
        names = vocab_for_selection[: len(emb)]
        try:
            return build_anchor_bank(emb, names, score, self.cfg, rng)
        except ValueError as exc:
            # Too few candidates pass validity/cosine (small vocabularies, untrained models): keep the ranking but
            # drop both constraints, and say so.
            n_cands = len(candidate_tokens(emb, names, self.cfg.candidate_percentiles))
            relaxed = dataclasses.replace(
                self.cfg,
                min_validity=0.0,
                max_cos=1.0,
                n_anchors=min(self.cfg.n_anchors, n_cands),
                fixed_anchor_index=0,
            )
            warnings.warn(
                f"EDEN anchor selection relaxed (min_validity=0, max_cos=1, k={relaxed.n_anchors}): {exc}", stacklevel=2
            )
            self.relaxed = True
            return build_anchor_bank(emb, names, score, relaxed, rng)


class EdenDriver(AnchorSelection, SingleTurnExplorer):
    """EDEN rollouts on single-turn tasks (see the module docstring)."""

    def __init__(
        self, cfg: EdenBankConfig, model: PreTrainedModel, tok: PreTrainedTokenizerBase, task: ProblemSource,
        run: TrainConfig, state: dict[str, Any] | None,
    ):  # fmt: skip
        self.task = task
        self._init_eden(cfg, model, tok, run, state)

    def _selection_items(self, rng: np.random.Generator) -> list[Any]:
        """The training prompts that score anchor candidates: (problem, prompt ids) pairs."""
        problems = self.task.sample(rng, self.cfg.n_selection_prompts)
        return [(p, encode_prompt(self.tok, p.prompt, raw=self.task.raw_prompts)) for p in problems]

    def _rollouts(self, items: Sequence[Any], n: int, rows: np.ndarray | None, seed: int) -> list[tuple[float, bool]]:
        """(reward, well-formed) of `n` rollouts per item, noisy when `rows` holds one extra row per rollout."""
        problems = [p for p, _ in items]
        batch = [(g, ids) for g, (_, ids) in enumerate(items) for _ in range(n)]
        extra = None if rows is None else [torch.from_numpy(np.asarray(r, dtype=np.float32)) for r in rows]
        out = generate_rows(
            self.model, self.tok, batch, [self.cfg.tau_r] * len(batch), max_new_tokens=self.run.max_new_tokens,
            seed=seed, extra_rows=extra,
        )  # fmt: skip
        return self.task.check([problems[r.group] for r in out], [r.text for r in out])

    def _collect(
        self, step: int, problems: Sequence[Problem], prompts: Sequence[list[int]], budget: Budget, *, seed: int
    ) -> list[Rollout]:
        cfg, size = self.cfg, budget.group_size
        n_p, n_standard = len(prompts), cfg.n_standard(size)
        draw = draw_noisy_rows(self.bank, n_p, cfg, np.random.default_rng([self.run.seed, step, 17]))
        temps = row_temperatures(n_p, size, cfg, step) * (self.run.temperature / cfg.tau_r)
        mask = noisy_mask(n_p, size, cfg.n_noisy)
        rows, extra = [], []
        for g, p in enumerate(prompts):
            for j in range(size):
                rows.append((g, p))
                k = j - n_standard
                extra.append(torch.from_numpy(draw.rows[g, k]) if k >= 0 else None)
        out = generate_rows(
            self.model, self.tok, rows, temps.tolist(), max_new_tokens=self.run.max_new_tokens, seed=seed,
            extra_rows=extra,
        )  # fmt: skip
        checks = self.task.check([problems[r.group] for r in out], [r.text for r in out])
        return [
            dataclasses.replace(r, reward=reward, noisy=bool(noisy))
            for r, (reward, _), noisy in zip(out, checks, mask.tolist(), strict=True)
        ]

    def postprocess(
        self, step: int, problems: Sequence[Problem], rollouts: Sequence[Rollout], advantages: Sequence[float]
    ) -> RolloutCredit:
        """EDEN's advantages from the rewards (`eden_advantages`: mixed-group normalisation, top-p among noisy
        rows, gamma; the estimator's `advantages` are recomputed there) and its loss selection."""
        res = eden_advantages(
            [r.reward for r in rollouts], [r.group for r in rollouts], [r.noisy for r in rollouts], self.cfg,
            estimator=self.run.estimator,
        )  # fmt: skip
        stats: dict[str, Any] = {k: v for k, v in res.stats.items() if k != "zero_adv_fraction"}
        stats["eden_bank_relaxed"] = int(self.relaxed)
        keep = tuple(bool(k) for k in res.loss_mask.tolist())
        return RolloutCredit(tuple(res.advantages.tolist()), stats, keep)


class AgentEdenDriver(AnchorSelection, AgentExplorer):
    """EDEN on an agent env: the anchor bank and the per-step hooks (see the module docstring)."""

    def __init__(
        self, cfg: EdenBankConfig, model: PreTrainedModel, tok: PreTrainedTokenizerBase, run: TrainConfig,
        state: dict[str, Any] | None = None,
    ):  # fmt: skip
        self.agent: AgentConfig = run.agent
        self.env_id: str = run.task
        self._init_eden(cfg, model, tok, run, state)

    # ----- anchor selection on first turns (AnchorSelection.select_bank calls these two) -----
    def _selection_items(self, rng: np.random.Generator) -> list[Any]:
        return [int(s) for s in rng.integers(0, 2**31 - 1, size=self.cfg.n_selection_prompts)]

    def _rollouts(self, items: Sequence[Any], n: int, rows: np.ndarray | None, seed: int) -> list[tuple[float, bool]]:
        one_turn = dataclasses.replace(self.agent, max_turns=1, sero=False)
        specs = [
            EpisodeSpec(g, k, int(s), first_extra=None if rows is None else torch.from_numpy(rows[g * n + k]))
            for g, s in enumerate(items)
            for k in range(n)
        ]
        chunk = max(1, Budget.of(self.run).total)  # the env instances a step uses anyway
        out: list[tuple[float, bool]] = []
        for i in range(0, len(specs), chunk):
            eps = play_specs(
                self.model, self.tok, self.env_id, specs[i : i + chunk], one_turn,
                max_new_tokens=self.run.max_new_tokens, temperature=self.cfg.tau_r, seed=seed * 1009 + i,
            )  # fmt: skip
            out += [(float(e.success), bool(e.actions) and not e.invalid[0]) for e in eps]
        return out

    # ----- one step -----
    def _collect(self, step: int, seeds: list[int], budget: Budget, *, seed: int) -> list[Episode]:
        """Play the step's episodes, the last `n_noisy` of each task with a noisy first turn."""
        cfg, run, size = self.cfg, self.run, budget.group_size
        n_p, n_standard = len(seeds), cfg.n_standard(size)
        draw = draw_noisy_rows(self.bank, n_p, cfg, np.random.default_rng([run.seed, step, 17]))
        temps = row_temperatures(n_p, size, cfg, step) * (run.temperature / cfg.tau_r)
        specs = []
        for g, s in enumerate(seeds):
            for j in range(size):
                k = j - n_standard
                extra = torch.from_numpy(draw.rows[g, k]) if k >= 0 else None
                specs.append(EpisodeSpec(g, j, int(s), temperature=float(temps[g * size + j]), first_extra=extra))
        return play_specs(
            self.model, self.tok, run.task, specs, self.agent, max_new_tokens=run.max_new_tokens,
            temperature=run.temperature, seed=seed, record=run.agent.sero,
        )  # fmt: skip

    def postprocess(self, episodes: list[Episode], turn_advantages: list[np.ndarray]) -> EpisodeCredit:
        """EDEN's absorb on the turn advantages; dropped noisy episodes leave the loss (``EpisodeCredit.in_loss``)."""
        cfg = self.cfg
        groups = [e.group for e in episodes]
        noisy = np.array([e.noisy for e in episodes], dtype=bool)
        stats: dict[str, Any] = {"eden_bank_relaxed": int(self.relaxed)}
        if self.agent.estimator in ESTIMATORS:
            res = eden_advantages(
                [float(e.success) for e in episodes], groups, noisy, cfg, estimator=self.agent.estimator
            )
            out = [np.full(len(a), res.advantages[i]) for i, a in enumerate(turn_advantages)]
            keep = res.loss_mask
            stats.update({k: v for k, v in res.stats.items() if k != "zero_adv_fraction"})
        else:  # a per-turn estimator: the one composition both trainers call
            success = [e.success for e in episodes]
            turns = eden_turn_credit(turn_advantages, noisy, success, cfg)
            out, keep = turns.per_turn, turns.loss_mask
            stats.update(turns.stats)
        return EpisodeCredit(tuple(out), stats, tuple(bool(k) for k in np.asarray(keep, dtype=bool).tolist()))
