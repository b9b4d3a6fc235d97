"""OpenRLHF 0.11.2 backend: GRPO / GiGPO / GraphGPO with EDEN, XRPO and SERO on Ray + DeepSpeed + vLLM.

Use it through the CLI (``envkit-train openrlhf --explorer eden --advantage grpo -- <train_ppo_ray flags>``,
see docs/openrlhf.md). Modules:

- `config`: `BackendConfig`, our options, passed to Ray workers through the runtime env.
- `argv`: splits ``ours -- openrlhf`` argv, forces the estimator and the agent executor, refuses what we
  do not support.
- `entry`: ``main(argv)``: parse, install the subclasses in the driver, run ``openrlhf.cli.train_ppo_ray``.
- `rollout_records`: the per-rollout plan (`RolloutSpec`) and what comes back (`RolloutRecord`: the executor's
  recorded steps, one `Turn` token span per step): the only contract between the rollout side and the experience
  maker.
- `explorers`: the run's explorer, chosen once (`explorers.registry.make_explorer`; `plain`, `eden`, `xrpo`,
  `branch`): the hooks the modules below call instead of comparing ``--explorer`` (plans, engine options, episode
  keeping, row / turn credit, metrics).
- `turn_advantages`: per-turn advantages of a batch from envkit's maths (torch-free).
- `experience`: the experience-maker subclass (spreads them over tokens, folds weights, drops, logs).
- `samples`: the samples-generator subclass (per-prompt rollout plans from the explorer; XRPO's phases).
- `xrpo_rounds`: XRPO's phased dispatch of one step and its ICL corpus.
- `rollout_actor`: the vLLM rollout-actor subclass (plans; prompt embeddings for EDEN's noisy rollouts).
- `trainer_actor`: the PPOTrainer Ray-actor subclass that puts the samples generator and experience maker in place.
- `gym_executor`: the Gymnasium agent executor (one envkit episode per rollout); `sero_rows`: SERO oracle rows.
- `agent_executor`: the file given to ``--train.agent_func_path`` (re-exports the executor).
- `weight_check`: per-tensor checksums of actor vs engine weights after every broadcast (`WeightSyncError`).
- `cpu_shim` / `cpu_engine`: ``--cpu`` only: the calls replaced so OpenRLHF trains without CUDA (trainer side /
  vLLM engine side).

Importing this package is light; the submodules that subclass OpenRLHF classes import openrlhf (and so vllm).
"""
