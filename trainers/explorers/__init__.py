"""Explorers: how a GRPO-family trainer spends its rollout budget (backend-agnostic maths and planning).

API summary:
    envkit.trainers.explorers.eden     EdenConfig, anchor bank (explorers.anchors), anchored perturbation, noisy share,
                                tau_n warm-up, top-p selection, absorb (docs/methods.md section 5); it exports
                                eden_config (settings), eden_noise (noisy rows), eden_credit (selection, absorb)
    envkit.trainers.explorers.xrpo     XrpoConfig, XrpoPlanner (t-interval priority, phased greedy allocation),
                                IclCorpus (explorers.icl), novelty-guided sharpening (docs/methods.md section 6)

Submodules import only numpy/scipy (no torch), so the trainers and the OpenRLHF backend share them.
"""
