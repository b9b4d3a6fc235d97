"""The PPO-trainer Ray-actor subclass that puts envkit's samples generator and experience maker in place.

OpenRLHF 0.11.2's ``PPOTrainer`` is declared with ``@ray.remote``; `EnvkitPPOTrainer` subclasses the class under
it (``PPOTrainer.__ray_actor_class__``), and `remote_trainer` wraps it with `ray.remote` again. The entry point
assigns that to ``openrlhf.trainer.ppo_trainer.PPOTrainer``, where ``train_ppo_ray.train`` imports it from.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import ray
from openrlhf.trainer.ppo_trainer import PPOTrainer

from envkit.trainers.openrlhf.config import BackendConfig
from envkit.trainers.openrlhf.experience import EnvkitExperienceMaker
from envkit.trainers.openrlhf.samples import EnvkitSamplesGenerator


class EnvkitPPOTrainer(PPOTrainer.__ray_actor_class__):  # type: ignore[name-defined,misc]
    """OpenRLHF's PPO trainer with envkit's samples generator and experience maker."""

    def __init__(
        self,
        pretrain: str,
        strategy: Any,
        actor_model_group: Any,
        critic_model_group: Any,
        reward_model_group: Any,
        reference_model_group: Any,
        vllm_engines: Any,
        **generate_kwargs: Any,
    ) -> None:
        super().__init__(
            pretrain,
            strategy,
            actor_model_group,
            critic_model_group,
            reward_model_group,
            reference_model_group,
            vllm_engines,
            **generate_kwargs,
        )
        self.envkit_config = BackendConfig.from_env()
        self.samples_generator = EnvkitSamplesGenerator(
            config=self.envkit_config,
            strategy=strategy,
            prompts_dataloader=self.prompts_dataloader,
            eval_dataloader=self.eval_dataloader,
            tokenizer=self.tokenizer,
            vllm_engines=vllm_engines,
        )
        self.experience_maker = EnvkitExperienceMaker(
            actor_model_group,
            critic_model_group,
            reward_model_group,
            reference_model_group,
            self.kl_ctl,
            strategy,
            self.tokenizer,
            config=self.envkit_config,
        )
        print(f"envkit-openrlhf installed: {json.dumps(self.envkit_describe())}", flush=True)

    # ----- the weight check after every broadcast (envkit.trainers.openrlhf.weight_check) -------------------------
    def fit(self, global_step: int = 0) -> None:
        if self.envkit_config.verify_weights and self.vllm_engines:
            state = self._envkit_actor_state()
            self._envkit_last_sums = state.pop("checksums")
            self._envkit_sync_log({"event": "start", **state})
        super().fit(global_step)

    def broadcast_to_vllm(self) -> None:
        t = time.perf_counter()
        super().broadcast_to_vllm()
        took = time.perf_counter() - t
        if self.envkit_config.verify_weights and self.vllm_engines:
            self.envkit_verify_weights(broadcast_s=took)

    def envkit_verify_weights(self, broadcast_s: float = 0.0) -> dict[str, Any]:
        """Compare every engine's live weights with the actor's (per-tensor checksums, synced dtype); log the
        result (and the log-probs of a fixed probe under both); raise `WeightSyncError` on any difference."""
        from envkit.trainers.openrlhf.weight_check import WeightSyncError, changed, compare

        t = time.perf_counter()
        state = self._envkit_actor_state()
        sums = state.pop("checksums")
        specs = {name: (dtype, shape) for name, (dtype, shape, _) in sums.items()}
        engines = ray.get([e.weight_checksums.remote(specs) for e in self.vllm_engines])
        probes = ray.get([e.prompt_logprobs.remote(self._envkit_probe) for e in self.vllm_engines])
        bad = {i: compare(sums, got["tensors"]) for i, got in enumerate(engines)}
        prev = getattr(self, "_envkit_last_sums", None)
        self._envkit_syncs = getattr(self, "_envkit_syncs", 0) + 1
        entry = {
            "event": "sync",
            "sync": self._envkit_syncs,
            "tensors": len(sums),
            "changed_since_last": changed(prev, sums) if prev is not None else None,
            "engine_equal": not any(bad.values()),
            "engine_versions": [got["version"] for got in engines],
            "actor_digest": state["actor_digest"],
            "actor_probe_logprob": state["probe_logprob"],
            "engine_probe_logprob": [_mean(p) for p in probes],
            "broadcast_s": round(broadcast_s, 3),
            "verify_s": round(time.perf_counter() - t, 3),
        }
        self._envkit_last_sums = sums
        self._envkit_sync_log(entry)
        if any(bad.values()):
            lines = [f"engine {i}: {len(b)} of {len(sums)} tensors differ, e.g. {b[:3]}" for i, b in bad.items() if b]
            raise WeightSyncError(
                "the vLLM engines' weights differ from the actor's after the broadcast (silent corruption): "
                + "; ".join(lines)
                + ". Check --vllm.sync_backend (on a CPU run with --cpu) and the engines' dtype (--ds.param_dtype bf16)"
            )
        return entry

    def _envkit_actor_state(self) -> dict[str, Any]:
        if not hasattr(self, "_envkit_probe"):
            self._envkit_probe = list(self.tokenizer("The answer is 42, because 6 x 7 = 42.")["input_ids"])
        refs = [
            h.__ray_call__.remote(actor_state, self._envkit_probe)
            for h in self.actor_model_group._actor_handlers  # every rank: ZeRO-3 gathers collectively
        ]
        state = ray.get(refs)[0]
        state["actor_digest"] = digest(state["checksums"])
        return state

    def _envkit_sync_log(self, entry: dict[str, Any]) -> None:
        line = json.dumps(entry)
        print(f"envkit-weight-sync {line}", flush=True)
        out = getattr(getattr(self.args, "ckpt", None), "output_dir", None)
        if out:
            Path(out).mkdir(parents=True, exist_ok=True)
            with open(Path(out) / "envkit_weight_sync.jsonl", "a") as f:
                f.write(line + "\n")

    def envkit_describe(self) -> dict[str, Any]:
        """What is installed (for checks and logs): component classes and the backend config."""
        return {
            "samples_generator": type(self.samples_generator).__qualname__,
            "experience_maker": type(self.experience_maker).__qualname__,
            "config": self.envkit_config.to_json(),
            "max_steps": self.max_steps,
        }


def digest(sums: dict[str, Any]) -> str:
    """A short hash of all per-tensor checksums (the same weights give the same digest)."""
    import hashlib

    return hashlib.sha256(json.dumps(sorted((k, list(v[2])) for k, v in sums.items())).encode()).hexdigest()[:16]


def _mean(values: list[float]) -> float | None:
    return round(sum(values) / len(values), 6) if values else None


def actor_state(policy_actor: Any, probe: list[int]) -> dict[str, Any]:
    """Runs inside OpenRLHF's ``PolicyModelActor`` (through Ray's ``__ray_call__``): the checksums of its
    module's tensors and the mean log-prob of ``probe`` under it (not under ZeRO-3)."""
    import torch

    from envkit.trainers.openrlhf.weight_check import actor_checksums

    model = policy_actor.actor.model.module
    zero3 = policy_actor.strategy.args.ds.zero_stage == 3
    state: dict[str, Any] = {"checksums": actor_checksums(model, zero3), "probe_logprob": None}
    if not zero3 and len(probe) > 1:
        device = next(model.parameters()).device
        ids = torch.tensor([probe], device=device)
        with torch.no_grad():
            logits = model(input_ids=ids).logits[0, :-1].float()
        lp = torch.log_softmax(logits, -1).gather(1, ids[0, 1:, None])[:, 0]
        state["probe_logprob"] = round(float(lp.mean()), 6)
    return state


def remote_trainer() -> Any:
    """The Ray actor class to put in place of OpenRLHF's ``PPOTrainer``."""
    return ray.remote(EnvkitPPOTrainer)
