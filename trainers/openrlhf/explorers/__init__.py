"""OpenRLHF's explorers, one module per method, and the registry that builds the run's one
(`envkit.trainers.openrlhf.explorers.registry.make_explorer`); the contract is `base.Explorer`."""
