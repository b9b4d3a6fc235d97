"""The local trainer's explorers, one module per method, each with its single-turn and agent forms.

`plain` (``--explorer none``: plain groups), `eden` (noisy rows / a noisy first turn), `xrpo` (phased budget, ICL
seeding, sharpening), `branch` (agent envs: forks at high-entropy decisions); `registry` builds the one a
`TrainConfig` names. Their contracts (`SingleTurnExplorer`, `AgentExplorer`) are in
`envkit.trainers.local.contracts`; the maths is in `envkit.trainers.explorers`.
"""
