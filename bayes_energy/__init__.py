"""bayes_energy: posterior distributions of Transformer fine-tuning energy and time.

The data flow, one module family per stage::

    runner (measure) -> sweep table -> model spec -> posterior -> predict / plan -> report

Importing the package is light: it needs neither torch nor PyMC. The heavy
stages are imported on first use.
"""

from __future__ import annotations

import os
import sys
from importlib import import_module
from importlib.metadata import PackageNotFoundError, version
from types import ModuleType

try:
    __version__ = version("bayes_energy")
except PackageNotFoundError:  # running from a source tree without install
    __version__ = "0.1.0"

#: The one default central-interval probability used across the package.
DEFAULT_PROB = 0.9

_LAZY = {
    "predict": ("bayes_energy.predict", "predict"),
    "plan": ("bayes_energy.plan", "plan"),
    "load_sweep": ("bayes_energy.datasets", "load_sweep"),
    "load_mayaki2026": ("bayes_energy.datasets", "load_mayaki2026"),
    "validate": ("bayes_energy.schema", "validate"),
}

__all__ = ["__version__", "DEFAULT_PROB", "threads", *_LAZY]


def threads() -> int:
    """Cores the package's parallel work may use: sampling chains and prediction chunks.

    ``$BAYES_ENERGY_THREADS`` if set (e.g. 1 for each of several fits run side by side),
    else the cores this process may run on (:func:`bayes_energy.runner.meters.logical_cores`).
    """
    env = os.environ.get("BAYES_ENERGY_THREADS", "").strip()
    if env:
        try:
            return max(1, int(env))
        except ValueError:
            raise ValueError(f"BAYES_ENERGY_THREADS must be a whole number of threads, got {env!r}") from None
    from .runner.meters import logical_cores

    return logical_cores()


def __getattr__(name: str):
    if name in _LAZY:
        module, attr = _LAZY[name]
        return getattr(import_module(module), attr)
    raise AttributeError(f"module 'bayes_energy' has no attribute {name!r}")


class _Package(ModuleType):
    """The package module: ``bayes_energy.predict`` and ``bayes_energy.plan`` stay the functions.

    Importing the submodule ``bayes_energy.predict`` makes Python set the
    package attribute ``predict`` to that module, which would shadow the
    documented function (``be.predict(idata, candidates)`` would then raise
    "'module' object is not callable"). Here such an assignment stores the
    function instead. The submodules stay importable as usual
    (``from bayes_energy.predict import check_candidates``,
    ``importlib.import_module("bayes_energy.predict")``).
    """

    def __setattr__(self, name, value):
        if name in _LAZY and isinstance(value, ModuleType) and value.__name__ == _LAZY[name][0]:
            value = getattr(value, _LAZY[name][1])
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
