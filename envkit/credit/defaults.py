"""The credit maths' documented defaults that more than one config shares, declared once (METHODS sections 3-4).

GAMMA_G: GraphGPO's distance discount (METHODS 3: 0.10 ALFWorld, 0.20 WebShop; per env: `EnvEntry.gamma_g`).
MIN_ROOT_BUDGET: a SERO root's minimum budget left (METHODS 4: >= 2), the default of `EnvEntry.min_root_budget`
    (where an env sets none) and of a `SeroConfig` built without an env.
TERMINAL_REWARD: a successful episode's return (GiGPO's 10 * success) where a run rewards success only.
SERO's reachability-weight defaults live on `envkit.credit.reachability.ReachConfig`.
"""

GAMMA_G = 0.10
MIN_ROOT_BUDGET = 2
TERMINAL_REWARD = 10.0
