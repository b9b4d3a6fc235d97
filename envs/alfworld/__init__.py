"""ALFWorld on the real TextWorld/PDDL engine (``envkit/ALFWorld-v0``).

Modules: `envs.alfworld.env` (the gymnasium env), `envs.alfworld.engine` (the engine with native state
capture), `envs.alfworld.assets` (per-game caches), `envs.alfworld.grammar` (fast, identical text generation),
`envs.alfworld.deps` (the engine packages), `envs.alfworld.data` (games and game-file building),
`envs.alfworld.planner` (a fast planner over the PDDL facts, used by `oracles.alfworld`) and
`envs.alfworld.prompt` (verl-agent-style prompts with the last H steps). Importing this package imports nothing
heavy; `envs.alfworld.env` needs ``pip install 'envkit[alfworld]'``.
"""
