"""SWE domain: ``envkit/SWE-v0`` (repository tasks in a sandbox, rewarded by tests) and its parts.

- `envs.swe.env`: the env (`SWEEnv`) and its tool-call actions; see docs/swe.md.
- `envs.swe.tasks`: the task format, envkit JSONL and SWE-bench loaders, the shipped task set.
- `envs.swe.generator`: offline bug-injection task generation and validation.
- `envs.swe.layers`, `envs.swe.overlay`, `envs.swe.layer_files`: the store of immutable overlay layers, the work
  tree mounted from a stack of them (the native snapshots), and the mount / whiteout / merge primitives.
- `envs.swe.backend`: `Limits`, `CommandResult` and the `Backend` base class; `envs.swe.sandbox` /
  `envs.swe.container`: the local bubblewrap and the Docker-API backends.
- `envs.swe.workspace`, `envs.swe.grading`, `envs.swe.tools`: task layers, test grading, file tools.
"""
