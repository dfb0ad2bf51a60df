"""Energy models: specification, PyMC build, sampling, saving.

``ols`` is the paper's least-squares law (no posterior). ``pooled`` and
``hierarchical`` are Bayesian; see their modules for the maths.
"""

from __future__ import annotations

from . import hierarchical, pooled

#: Bayesian models: name -> default config.
MODELS = {pooled.NAME: pooled.DEFAULT_CONFIG, hierarchical.NAME: hierarchical.DEFAULT_CONFIG}
#: Every model the CLI knows, the default last.
MODEL_NAMES = ("ols", "pooled", "hierarchical")
DEFAULT_MODEL = "hierarchical"


def default_config(name: str, user: dict | None = None) -> dict:
    """The default config of model ``name`` merged with the user's (``defaults | user``)."""
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; choose one of {', '.join(MODELS)}")
    base = dict(MODELS[name])
    user = dict(user or {})
    priors = dict(base["priors"]) | dict(user.pop("priors", {}) or {})
    return base | user | {"priors": priors}


__all__ = ["MODELS", "MODEL_NAMES", "DEFAULT_MODEL", "default_config"]
