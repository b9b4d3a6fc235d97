"""Code verifier env (``envkit/Code-v0``): problems with tests, checked in a warm, isolated fork-server sandbox.

Modules: `data` (HumanEval / MBPP problems), `forkserver` (the sandbox server's entry point, stdlib only;
`check_server` its event loop), `sandbox`
(`Sandbox` client), `verifier` (`CodeVerifier.verify_many`), `env` (`CodeEnv`).
Importing this package imports nothing heavy.
"""
