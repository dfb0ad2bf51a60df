"""The measurement runner: train a BERT encoder for a few measured steps per configuration.

Modules, in the order data flows through them:

* :mod:`~bayes_energy.runner.plan` - TOML plan → configurations, run keys, shards.
* :mod:`~bayes_energy.runner.meters` - energy meters (NVML, RAPL, estimate).
* :mod:`~bayes_energy.runner.workload` - model, strategies and timed steps (torch).
* :mod:`~bayes_energy.runner.worker` - the torchrun entry point, one configuration per launch.
* :mod:`bayes_energy.runner.sweep` - the command line that runs a plan and writes the sweep table.
* :mod:`~bayes_energy.runner.job` - :func:`measure_job`, meter a user's own training job (one row).
* :mod:`~bayes_energy.runner.callback` - :class:`EnergyCallback`, the same for a ``transformers.Trainer``.
* :mod:`~bayes_energy.runner.importers` - :func:`load_codecarbon`, :func:`load_zeus`: existing logs → rows.

The runner runs on GPU nodes that have torch and nvidia-ml-py but not PyMC:
it never imports the modelling side. Importing this package imports
neither torch nor pynvml's library (a missing NVML gives a null device);
the job meter, the callback (transformers) and the importers load on first use.
"""

from __future__ import annotations

from .meters import (
    EstimateMonitor,
    Measurement,
    MeterError,
    MeterPermissionError,
    MeterUnavailable,
    NVMLMonitor,
    RAPLMonitor,
    ShortWindowWarning,
)
from .plan import PlanError, RunConfig, SweepPlan, load_plan

_LAZY = {
    "measure_job": "job",
    "JobMeter": "job",
    "JobError": "job",
    "EnergyCallback": "callback",
    "load_codecarbon": "importers",
    "load_zeus": "importers",
    "read_zeus_log": "importers",
}

__all__ = [
    "EstimateMonitor",
    "Measurement",
    "MeterError",
    "MeterPermissionError",
    "MeterUnavailable",
    "NVMLMonitor",
    "RAPLMonitor",
    "ShortWindowWarning",
    "SweepPlan",
    "PlanError",
    "RunConfig",
    "load_plan",
    *_LAZY,
]


def __getattr__(name: str):
    if name in _LAZY:
        from importlib import import_module

        return getattr(import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
