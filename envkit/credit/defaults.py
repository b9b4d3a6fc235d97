"""The credit maths' documented defaults, declared once (METHODS sections 3 and 4.5); every config refers here.

GAMMA_G: GraphGPO's distance discount (METHODS 3: 0.10 ALFWorld, 0.20 WebShop; per env: `EnvEntry.gamma_g`).
P_FLOOR, TAU_W, W_MIN: SERO's reachability weight ``w_k = clip(exp(sum_j max(l_j, log P_FLOOR) / TAU_W), W_MIN,
1)`` (METHODS 4.5: floor 0.05, temperature 1, minimum 0.05).
"""

GAMMA_G = 0.10
P_FLOOR = 0.05
TAU_W = 1.0
W_MIN = 0.05
