"""OpenRLHF 0.11.2 backend: GRPO / GiGPO / GraphGPO with EDEN, XRPO and SERO on Ray + DeepSpeed + vLLM.

Use it through the CLI (``envkit-train openrlhf --explorer eden --advantage grpo -- <train_ppo_ray flags>``,
see docs/openrlhf.md). Modules:

- `config`: `BackendConfig`, our options, passed to Ray workers through the runtime env.
- `argv`: splits ``ours -- openrlhf`` argv, forces the estimator and the agent executor, refuses what we
  do not support.
- `entry`: ``main(argv)``: parse, install the subclasses in the driver, run ``openrlhf.cli.train_ppo_ray``.
- `records`: the per-rollout plan (`RolloutSpec`) and what comes back (`RolloutRecord`): the only contract
  between the rollout side and the experience maker.
- `experience`: the experience-maker subclass (our advantages, EDEN absorb, XRPO sharpening, SERO weights).
- `samples`: the samples-generator subclass (per-prompt rollout plans: EDEN noisy rollouts, XRPO phases).
- `rollout_actor`: the vLLM rollout-actor subclass (prompt embeddings for EDEN's noisy rollouts).
- `trainer_actor`: the PPOTrainer Ray-actor subclass that puts the two above in place.
- `agent_executor`: the Gymnasium agent executor file given to ``--train.agent_func_path``.

Importing this package is light; the submodules that subclass OpenRLHF classes import openrlhf (and so vllm).
"""
