"""The Oobleck artifact's simulators replayed with our methods: a wing that depends on the core.

The core never imports this package. A scenario selects its classes by name through
`method.variant` (conf/scenario_method/oobleck_artifact/): `varuna.VarunaArtifact`,
`pipelines.OobleckArtifact` and `pipelines.BambooArtifact` are subclasses of our checkpoint,
Oobleck and Bamboo with the artifact's behaviours as overrides (docs/ARTIFACT.md). `queue`
replays its Varuna event heap, `heap_order` the order its heap hands out the first nodes.
"""
