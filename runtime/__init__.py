"""Runtime plumbing under every front-end: models and tokenizers, transformers' KV-cache argument, command lines.

`models` (`ModelConfig`, `load_model`: local folders, GGUF files, SmolLM2, tiny random models), `hf_cache` (the
KV-cache keyword across transformers versions) and `command_line` (tyro parsing with one-line errors). It sits
directly on `envkit` core and below `envs`: it imports only `envkit` core (torch / transformers / tyro lazily or
where the module is the command line), so oracles, trainers and serve all build on it.

Installed as ``envkit.runtime`` (the folder ``runtime/`` is linked as ``envkit/runtime``).
"""

if __name__ != "envkit.runtime":  # the folder is importable as `runtime` from the repository root: refuse that name
    raise ImportError(f"import envkit.runtime, not {__name__}: envkit installs only names under envkit.")
