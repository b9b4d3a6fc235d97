"""The whole driver path under a local CPU Ray: `entry.run` installs envkit's actor classes and runs OpenRLHF
0.11.2's ``train_ppo_ray`` through runpy; OpenRLHF's own ``train()`` then creates envkit's PPO-trainer actor (a
subclass of the real ``PPOTrainer.__ray_actor_class__``) in a Ray worker, which reads envkit's config from the
runtime env, builds its real tokenizer, prompt dataset and DeepSpeed strategy, and swaps in envkit's samples
generator and experience maker. ``train()`` stops where a CPU must: OpenRLHF's policy-model actor needs CUDA
(``torch.cuda.set_device``) in ``init_model_from_pretrained``. One logical GPU is declared to Ray for that actor.

In the same Ray session, envkit's samples generator (driver side, OpenRLHF's real ``generate_samples`` loop)
dispatches per-rollout plans to envkit's rollout actor in a Ray worker, whose vLLM engine is replaced by a tiny
random transformers model (vLLM needs CUDA) and whose agent executor plays envkit/Toy-v0.
"""

from __future__ import annotations

import glob
import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest


def _hf_rollout_actor_class():
    """envkit's rollout actor whose vLLM engine is replaced by a tiny random transformers model (vLLM needs CUDA).

    Defined in a function so that Ray pickles it by value (the test module is not importable in workers).
    """
    from envkit.trainers.openrlhf.rollout_actor import EnvkitRolloutActor

    class HFEngine:
        def __init__(self, model, tokenizer):
            self.model, self.tokenizer = model, tokenizer

        async def generate(self, prompt, params, request_id):
            from types import SimpleNamespace

            import torch

            ids = torch.tensor([prompt["prompt_token_ids"]])
            torch.manual_seed(len(prompt["prompt_token_ids"]))
            with torch.no_grad():
                out = self.model.generate(
                    ids, attention_mask=torch.ones_like(ids), max_new_tokens=params.max_tokens, do_sample=True,
                    temperature=params.temperature, pad_token_id=0,
                )  # fmt: skip
            new = out[0, ids.shape[1] :].tolist()
            text = self.tokenizer.decode(new)
            yield SimpleNamespace(
                outputs=[SimpleNamespace(token_ids=new, text=text, finish_reason="length", logprobs=None)]
            )

    class HFRolloutActor(EnvkitRolloutActor):
        async def __init__(self, tokenizer_dir):
            import torch
            from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

            from envkit.trainers.openrlhf.config import BackendConfig
            from envkit.trainers.openrlhf.gym_executor import GymAgentExecutor

            torch.set_num_threads(1)
            torch.manual_seed(0)
            tok = AutoTokenizer.from_pretrained(tokenizer_dir)
            cfg = LlamaConfig(
                vocab_size=len(tok), hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                num_key_value_heads=2, max_position_embeddings=256,
            )  # fmt: skip
            self.envkit_config = BackendConfig.from_env()
            self.executor = GymAgentExecutor(self.envkit_config)
            self.llm = HFEngine(LlamaForCausalLM(cfg).eval(), tok)
            self._mm_pad_token_ids = None
            self._weight_version, self._anchor_rows, self._prompt_rows = 0, {}, {}

        def get_num_unfinished_requests(self):
            return 0

    return HFRolloutActor


@pytest.mark.slow
def test_run_wires_envkit_trainer_actor_into_openrlhf_train(gpu_stub_dir, tokenizer_dir, tokenizer, tmp_path):
    import openrlhf.trainer.ppo_trainer as ppo_trainer
    import openrlhf.trainer.ray.vllm_engine as vllm_engine
    import ray
    from openrlhf.trainer.ppo_trainer import PPOTrainer

    from envkit.trainers.openrlhf.argv import openrlhf_argv
    from envkit.trainers.openrlhf.config import CONFIG_ENV, BackendConfig
    from envkit.trainers.openrlhf.entry import EXECUTOR_PATH, ray_runtime_env, run
    from envkit.trainers.openrlhf.trainer_actor import EnvkitPPOTrainer

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
    ray.init(
        address="local", num_cpus=2, num_gpus=1, include_dashboard=False, runtime_env=runtime_env, log_to_driver=False
    )
    try:
        # started first so that its worker imports while the driver path runs (2 cores: overlap the waits)
        rollout_actor = ray.remote(num_cpus=0)(_hf_rollout_actor_class()).remote(str(tokenizer_dir))
        with pytest.raises(Exception) as failure:
            run(cfg, flags)  # Ray is up, so run() only installs the classes and runs the CLI module
        session = ray._private.worker._global_node.get_session_dir_path()
        classes = {a["ActorClassName"] for a in ray._private.state.actors().values()}
        samples = _samples_through_ray(rollout_actor, tokenizer, cfg)
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

    _check_samples(samples, cfg)


def _samples_through_ray(actor, tokenizer, cfg):
    """envkit's samples generator (in the driver) -> generate_planned on a rollout actor in a Ray worker."""
    from envkit.trainers.openrlhf.samples import EnvkitSamplesGenerator

    strategy = SimpleNamespace(args=_resolve(["--rollout.n_samples_per_prompt", "4", "--rollout.batch_size", "2"]))
    labels = [json.dumps({"seed": 0}), json.dumps({"seed": 1})]
    loader = [(["toy", "toy"], ["Act: {obs}", "Act: {obs}"], labels, [None, None])]
    gen = EnvkitSamplesGenerator(
        config=cfg, strategy=strategy, prompts_dataloader=loader, eval_dataloader=None, tokenizer=tokenizer,
        vllm_engines=[actor],
    )  # fmt: skip
    samples, _, consumed, exhausted = gen.generate_samples(max_len=96, max_new_tokens=4, temperature=1.0, top_p=1.0)
    assert consumed == 2 and not exhausted  # 2 prompts drawn; the loader is found empty on the next call
    return samples


def _resolve(flags):
    from envkit.trainers.openrlhf.argv import openrlhf_argv
    from envkit.trainers.openrlhf.entry import EXECUTOR_PATH, resolve_openrlhf_args

    return resolve_openrlhf_args(
        openrlhf_argv([*flags, "--actor.model_name_or_path", "m"], executor_path=EXECUTOR_PATH, explorer="none")
    )


def _check_samples(samples, cfg):
    import torch

    from envkit.trainers.openrlhf.rollout_records import INFO_KEY, RolloutRecord

    assert len(samples) == 2 * 4  # batch x n
    records = [RolloutRecord.from_dict(s.info[INFO_KEY][0]) for s in samples]
    groups = {}
    for r in records:
        groups.setdefault(r.spec.group, []).append(r.spec.index)
    assert sorted(sorted(v) for v in groups.values()) == [[0, 1, 2, 3], [0, 1, 2, 3]]
    for s, r in zip(samples, records):
        assert r.turns and r.reason in ("context", "terminated", "env_truncated", "generation_length")
        assert s.sequences.shape[1] <= 96 and int(s.action_mask.sum()) > 0
        first = r.turns[0]
        assert torch.equal(
            s.action_mask[0, first.start - 1 : first.end - 1],
            torch.ones(first.end - first.start, dtype=s.action_mask.dtype),
        )
