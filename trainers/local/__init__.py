"""The single-process transformers trainer (``envkit-train local``): `trainer.LocalTrainer` runs `config.TrainConfig`.

One step (`trainer.LocalTrainer.step`): ``source.collect`` -> ``source.advantages`` -> `update` -> log, where the
batch source (`contracts.BatchSource`) is `single_turn_source.SingleTurnSource` or `agent_source.AgentSource`.

Contracts: `contracts` (`BatchSource`, `SingleTurnExplorer`, `AgentExplorer`, `Budget`; imports no driver), `config`
(`TrainConfig`, the owner of the run's sizes); explorers, one module per method: `explorers.plain`,
`explorers.eden`, `explorers.xrpo`, `explorers.branch`, built by `explorers.registry`; single-turn rollouts:
`single_turn`, `generation`, `tasks`, `task_specs`, `word_tasks`, `prompt_encoding`, `warmup`; multi-turn agents:
`episode` (`Episode`: tokens and tags around its recorder), `multi_turn` (play), `episode_steps` (step rows), `agent_bc`, `turn_cache`, `shared_prefix`, `sero` (SERO
continuations), `probe`; the update and bookkeeping: `update`, `checkpoint`, `metrics`, `preflight`.
"""
