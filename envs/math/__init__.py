"""Math verifier env (``envkit/Math-v0``): problems, answer extraction, math-verify in a killable worker pool.

Modules: `verdict` (Verdict), `extract` (answer extraction), `data` (datasets), `check` (one check, in a
worker), `worker` (worker entry point), `verifier` (`MathVerifier.verify_many`), `env` (`MathEnv`).
Importing this package imports nothing heavy.
"""
