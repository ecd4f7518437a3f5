"""Where the configs and the caches live, in a source checkout and in an installed wheel.

A source checkout (git clone, `pip install -e .`) keeps conf/ and .cache/ at the project
root, beside mecefo_exp/. A wheel installs conf/ inside the package (mecefo_exp/conf, see
pyproject.toml) and has no project root, so its caches go to $MECEFO_CACHE or
~/.cache/mecefo-exp instead of site-packages.
"""

from __future__ import annotations

import os
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
SOURCE_ROOT = PACKAGE.parent


def is_source_checkout() -> bool:
    return (SOURCE_ROOT / "conf" / "config.yaml").exists() and (SOURCE_ROOT / "pyproject.toml").exists()


def conf_dir() -> Path:
    """The Hydra config folder: <checkout>/conf, or the copy the wheel carries."""
    if is_source_checkout():
        return SOURCE_ROOT / "conf"
    packaged = PACKAGE / "conf"
    if not (packaged / "config.yaml").exists():
        raise FileNotFoundError(f"no Hydra configs in {SOURCE_ROOT / 'conf'} or {packaged}: a broken install")
    return packaged


def default_cache_dir() -> Path:
    """<checkout>/.cache, or $MECEFO_CACHE, or ~/.cache/mecefo-exp for an installed wheel."""
    if os.environ.get("MECEFO_CACHE"):
        return Path(os.environ["MECEFO_CACHE"])
    if is_source_checkout():
        return SOURCE_ROOT / ".cache"
    return Path.home() / ".cache" / "mecefo-exp"
