"""Credit maths (pure numpy, float64): the GRPO family's advantages, GraphGPO graphs and step tables, SERO root
selection and credit, and reachability weights. METHODS sections 1-4; no torch, no env, no oracle."""
