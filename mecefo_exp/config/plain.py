"""A config node as plain, resolved values with attribute access (`plain`, `AttrDict`): what the
hot paths of a run read instead of OmegaConf."""

from __future__ import annotations


class AttrDict(dict):
    """A plain, resolved copy of a config node with attribute access.

    OmegaConf's attribute lookups cost ~30 us each; the loop of a numerics-free run reads
    the config a few dozen times per step, 60,000 steps long, so hot paths read this instead.
    """

    def __getattr__(self, key):
        try:
            return self[key]
        except KeyError:
            raise AttributeError(key) from None


def plain(node) -> AttrDict:
    from omegaconf import OmegaConf

    def wrap(value):
        if isinstance(value, dict):
            return AttrDict({k: wrap(v) for k, v in value.items()})
        if isinstance(value, list):
            return [wrap(v) for v in value]
        return value

    return wrap(OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node)
