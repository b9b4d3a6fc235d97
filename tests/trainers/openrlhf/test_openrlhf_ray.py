"""The whole driver path under a local CPU Ray: `entry.run` installs envkit's actor classes and runs OpenRLHF
0.11.2's ``train_ppo_ray`` through runpy; OpenRLHF's own ``train()`` then creates envkit's PPO-trainer actor (a
subclass of the real ``PPOTrainer.__ray_actor_class__``) in a Ray worker, which reads envkit's config from the
runtime env, builds its real tokenizer, prompt dataset and DeepSpeed strategy, and swaps in envkit's samples
generator and experience maker. ``train()`` stops where a CPU must: OpenRLHF's policy-model actor needs CUDA
(``torch.cuda.set_device``) in ``init_model_from_pretrained``. One logical GPU is declared to Ray for that actor.
"""

from __future__ import annotations

import glob
import json
import os
from pathlib import Path

import pytest


@pytest.mark.slow
def test_run_wires_envkit_trainer_actor_into_openrlhf_train(gpu_stub_dir, tokenizer_dir, tmp_path):
    import openrlhf.trainer.ppo_trainer as ppo_trainer
    import openrlhf.trainer.ray.vllm_engine as vllm_engine
    import ray
    from openrlhf.trainer.ppo_trainer import PPOTrainer

    from trainers.openrlhf.argv import openrlhf_argv
    from trainers.openrlhf.config import CONFIG_ENV, BackendConfig
    from trainers.openrlhf.entry import EXECUTOR_PATH, ray_runtime_env, run
    from trainers.openrlhf.trainer_actor import EnvkitPPOTrainer

    assert issubclass(EnvkitPPOTrainer, PPOTrainer.__ray_actor_class__)
    data = tmp_path / "tasks.jsonl"
    data.write_text("".join(json.dumps({"input": "{obs}", "label": json.dumps({"seed": i})}) + "\n" for i in range(6)))
    user_flags = [
        "--actor.model_name_or_path", str(tokenizer_dir), "--data.prompt_dataset", str(data),
        "--data.label_key", "label", "--rollout.n_samples_per_prompt", "4", "--rollout.batch_size", "2",
        "--train.batch_size", "8", "--data.max_len", "128", "--actor.num_gpus_per_node", "1",
        "--algo.kl.init_coef", "0", "--ckpt.output_dir", str(tmp_path / "ckpt"),
    ]  # fmt: skip
    flags = openrlhf_argv(user_flags, executor_path=EXECUTOR_PATH, explorer="none")
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
    old = ppo_trainer.PPOTrainer, vllm_engine.RolloutRayActor, os.environ.get(CONFIG_ENV)
    ray.init(num_cpus=2, num_gpus=1, include_dashboard=False, runtime_env=runtime_env, log_to_driver=False)
    try:
        with pytest.raises(Exception) as failure:
            run(cfg, flags)  # Ray is up, so run() only installs the classes and runs the CLI module
        session = ray._private.worker._global_node.get_session_dir_path()
        classes = {a["ActorClassName"] for a in ray._private.state.actors().values()}
    finally:
        ray.shutdown()
        ppo_trainer.PPOTrainer, vllm_engine.RolloutRayActor = old[0], old[1]
        if old[2] is None:
            os.environ.pop(CONFIG_ENV, None)
    # train() got past PPOTrainer.remote(...) and get_max_steps(): it failed only at the CUDA model init
    text = str(failure.value)
    assert "init_model_from_pretrained" in text and "torch.cuda.set_device" in text, text[-2000:]
    assert any("EnvkitPPOTrainer" in c for c in classes), classes
    lines = [
        line
        for path in glob.glob(os.path.join(session, "logs", "worker-*.out"))
        for line in Path(path).read_text(errors="replace").splitlines()
        if line.startswith("envkit-openrlhf installed: ")
    ]
    assert len(lines) == 1, lines
    desc = json.loads(lines[0].split(": ", 1)[1])
    assert desc["samples_generator"] == "EnvkitSamplesGenerator"
    assert desc["experience_maker"] == "EnvkitExperienceMaker"
    assert BackendConfig.from_json(desc["config"]) == cfg  # read from the runtime env inside the worker
    assert desc["max_steps"] == 6 * 4 // 8
