"""Adapters that put envkit envs inside the trainers people already use.

- `interop.trl`: an envkit env as a TRL ``environment_factory`` (GRPOTrainer's multi-turn tool loop);
- `interop.gem`: envkit ids in GEM's registry (``gem.make("envkit:WebShop-v0")``), snapshots as GEM state;
- `interop.skyrl`: a SkyRL-gym ``BaseTextEnv`` for any id;
- `interop.verl`: a verl ``AgentLoopBase`` registered as ``envkit``.

Each works with local envs or with envs on an ``envkit-serve`` server (``remote="http://..."``). Layer: above
``envkit`` (imports nothing from ``oracles`` or ``trainers``); each module imports its framework, so import the one
you use. docs/interop.md has the examples.
"""
