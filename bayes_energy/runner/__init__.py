"""The measurement runner: train a BERT encoder for a few measured steps per configuration.

Modules, in the order data flows through them:

* :mod:`~bayes_energy.runner.plan` - TOML plan → configurations, run keys, shards.
* :mod:`~bayes_energy.runner.meters` - energy meters (NVML, RAPL, estimate).
* :mod:`~bayes_energy.runner.workload` - model, strategies and timed steps (torch).
* :mod:`~bayes_energy.runner.worker` - the torchrun entry point, one configuration per launch.
* :mod:`bayes_energy.sweep` - the command line that runs a plan and writes the sweep table.

The runner runs on GPU nodes that have torch and nvidia-ml-py but not PyMC:
it never imports the modelling side. Importing this package imports
neither torch nor pynvml's library (a missing NVML gives a null device).
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
from .plan import Plan, PlanError, RunConfig, load_plan

__all__ = [
    "EstimateMonitor",
    "Measurement",
    "MeterError",
    "MeterPermissionError",
    "MeterUnavailable",
    "NVMLMonitor",
    "RAPLMonitor",
    "ShortWindowWarning",
    "Plan",
    "PlanError",
    "RunConfig",
    "load_plan",
]
