"""Energy models: specification, PyMC build, sampling, saving.

``ols`` is the paper's least-squares law (no posterior). ``pooled`` and
``hierarchical`` are Bayesian; see their modules for the maths.
"""

from __future__ import annotations

import importlib.util
import logging
import warnings

#: What the modelling side needs beyond the core (numpy, pandas): the ``model`` extra.
MODEL_EXTRA = ("pymc", "arviz", "nutpie", "matplotlib", "threadpoolctl")
_missing = [name for name in MODEL_EXTRA if importlib.util.find_spec(name) is None]
if _missing:
    raise ImportError(
        f"bayes_energy's modelling side (fit, predict, plan, design, report) needs {', '.join(_missing)}, "
        "not installed here (the core and the runner do not): pip install \"bayes_energy[model]\"",
        name=_missing[0],
    )

# PyTensor warns, on its first compile, that it "could not link to a BLAS installation ... severely
# degraded": pip wheels of numpy ship an OpenBLAS with renamed symbols that PyTensor's C backend cannot
# link. Our default sampler, nutpie, compiles the model with numba (whose matrix products call numpy's
# BLAS), and predict, plan and the report use numpy only, so that C path is not used and the warning
# would only alarm users. `--sampler pymc` does use the C backend; models.sample says so on that path.
warnings.filterwarnings("ignore", message="PyTensor could not link to a BLAS installation", category=UserWarning)
logging.getLogger("pytensor.tensor.blas").setLevel(logging.ERROR)  # its "Using NumPy C-API based implementation" line

from . import hierarchical, pooled  # noqa: E402 - after the filter, which must precede PyTensor's import

#: Bayesian models: name -> default config.
MODELS = {pooled.NAME: pooled.DEFAULT_CONFIG, hierarchical.NAME: hierarchical.DEFAULT_CONFIG}
#: Every model the CLI knows, the default last.
MODEL_NAMES = ("ols", "pooled", "hierarchical")
DEFAULT_MODEL = "hierarchical"
#: Tuning steps per chain (4 chains) of a fit. 400: sampled whole, the smallest that passed the diagnostics on every
#: seed tried (docs/speed.md, section 5); in parts, SBC's ranks were not uniform after 200 (three parameters of energy
#: and time below the Bonferroni line, p = 0.0001-0.001) and were after 400 (docs/speed.md, section 20).
TUNE = 400
#: Draws per chain of a fit sampled in its two parts (models.parts: every run's efficiency measured, the usual case):
#: on the reference table min ESS bulk 838-1083 over three seeds after 200 tuning steps, R-hat 1.01, no divergence.
DRAWS = 800
#: Draws per chain of a fit sampled whole (a run's efficiency unknown): with nutpie and models.sample.nuts_settings,
#: the smallest tested that pass the diagnostics (R-hat <= 1.01, ESS_bulk >= 400; >= 879 on the reference
#: table) on every seed tried (docs/speed.md, section 5).
WHOLE_DRAWS = 1500


def default_config(name: str, user: dict | None = None) -> dict:
    """The default config of model ``name`` merged with the user's (``defaults | user``)."""
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; choose one of {', '.join(MODELS)}")
    base = dict(MODELS[name])
    user = dict(user or {})
    priors = dict(base["priors"]) | dict(user.pop("priors", {}) or {})
    return base | user | {"priors": priors}


__all__ = ["MODELS", "MODEL_NAMES", "DEFAULT_MODEL", "DRAWS", "TUNE", "WHOLE_DRAWS", "default_config"]
