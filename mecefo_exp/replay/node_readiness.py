"""How the Oobleck artifact's simulators meet a removal with a node's readiness (docs/ARTIFACT.md):
named by the scenarios' `failure.node_readiness` when `scenario.quirks` is on."""

from ..failures.nodes import Readiness


class ArtifactReadiness(Readiness):
    """A node removed before it is usable still fails its (empty) slot: the simulators restart for it
    as for any removal (V:1213-1243, O:1006-1023). One removed at its ready instant was not usable:
    their event heap pops a removal before a ready event of the same millisecond."""

    unusable_removal_fails = True

    def usable_when_removed(self, ready_at: float, removed_at: float) -> bool:
        return ready_at < removed_at
