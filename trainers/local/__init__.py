"""The single-process transformers trainer (``envkit-train local``): `trainer` runs `trainer.TrainConfig`.

Single-turn rollouts and explorers: `single_turn`, `single_turn_explorers`, `generation`, `tasks`, `word_tasks`,
`prompt_encoding`, `warmup`; multi-turn agents: `multi_turn` (play), `agent_batch` (credit and rows), `agent_eden`,
`agent_xrpo`, `agent_bc`, `turn_cache`, `shared_prefix`, `sero` (SERO continuations); the explorer contracts:
`explorer_drivers`; the update and bookkeeping: `update`, `checkpoint`, `metrics`, `preflight`.
"""
