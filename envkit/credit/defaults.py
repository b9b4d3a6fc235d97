"""The credit maths' documented defaults that more than one config shares, declared once (METHODS section 3).

GAMMA_G: GraphGPO's distance discount (METHODS 3: 0.10 ALFWorld, 0.20 WebShop; per env: `EnvEntry.gamma_g`).
SERO's reachability-weight defaults live on `envkit.credit.reachability.ReachConfig`.
"""

GAMMA_G = 0.10
