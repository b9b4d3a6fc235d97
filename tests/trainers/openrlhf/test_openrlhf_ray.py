"""Ray actor-class subclassing under a local CPU Ray: envkit's PPO-trainer actor is built by a Ray worker from
OpenRLHF 0.11.2's real ``PPOTrainer.__ray_actor_class__`` with a real DeepSpeed strategy, tokenizer and prompt
dataset, and reads envkit's config from the runtime env, as ``envkit-train openrlhf`` sets it up."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest


@pytest.mark.slow
def test_trainer_actor_subclass_under_local_cpu_ray(gpu_stub_dir, tokenizer_dir, tmp_path, strategy_factory):
    import ray
    from openrlhf.trainer.ppo_trainer import PPOTrainer
    from openrlhf.trainer.ray.vllm_engine import RolloutRayActor

    from trainers.openrlhf.config import CONFIG_ENV, BackendConfig
    from trainers.openrlhf.entry import ray_runtime_env
    from trainers.openrlhf.rollout_actor import EnvkitRolloutActor, remote_rollout_actor
    from trainers.openrlhf.trainer_actor import EnvkitPPOTrainer, remote_trainer

    data = tmp_path / "tasks.jsonl"
    data.write_text("".join(json.dumps({"input": "{obs}", "label": json.dumps({"seed": i})}) + "\n" for i in range(6)))
    strategy = strategy_factory(
        4,
        (
            "--data.prompt_dataset", str(data), "--data.label_key", "label", "--rollout.batch_size", "2",
            "--train.batch_size", "8", "--data.max_len", "128",
        ),
    )  # fmt: skip
    cfg = BackendConfig(env_id="envkit/Toy-v0", advantage="gigpo", n_samples_per_prompt=4, rollout_batch_size=2)
    runtime_env = ray_runtime_env(cfg)
    repo = str(Path(__file__).resolve().parents[3])
    runtime_env["env_vars"].update(
        {
            "PYTHONPATH": os.pathsep.join([str(gpu_stub_dir), repo]),
            "OMP_NUM_THREADS": "1",
            "TOKENIZERS_PARALLELISM": "false",
        }
    )
    assert CONFIG_ENV in runtime_env["env_vars"]
    trainer_cls = remote_trainer()
    assert issubclass(trainer_cls.__ray_actor_class__, PPOTrainer.__ray_actor_class__)
    assert trainer_cls.__ray_actor_class__ is EnvkitPPOTrainer
    rollout_cls = remote_rollout_actor()
    assert rollout_cls.__ray_actor_class__ is EnvkitRolloutActor
    assert issubclass(EnvkitRolloutActor, RolloutRayActor.__ray_actor_class__)

    ray.init(num_cpus=2, include_dashboard=False, runtime_env=runtime_env, logging_level="ERROR", log_to_driver=False)
    try:
        trainer = trainer_cls.remote(
            str(tokenizer_dir), strategy, None, None, None, None, None, max_len=128, max_new_tokens=16, temperature=1.0
        )
        desc = ray.get(trainer.envkit_describe.remote(), timeout=240)
        max_steps = ray.get(trainer.get_max_steps.remote(), timeout=60)  # a method of OpenRLHF's own class
    finally:
        ray.shutdown()
    assert desc["samples_generator"] == "EnvkitSamplesGenerator"
    assert desc["experience_maker"] == "EnvkitExperienceMaker"
    assert BackendConfig.from_json(desc["config"]) == cfg  # the worker read it from the runtime env
    assert max_steps == desc["max_steps"] == 6 * 4 // 8
