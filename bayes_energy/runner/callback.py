"""A ``transformers.TrainerCallback`` that meters a ``Trainer`` run like :func:`~bayes_energy.runner.job.measure_job`.

::

    from bayes_energy.runner.callback import EnergyCallback

    trainer = Trainer(model, args, train_dataset=ds,
                      callbacks=[EnergyCallback("runs.csv", seq_len=128)])
    trainer.train()

Batch size and gradient accumulation come from the ``TrainingArguments``
(``per_device_train_batch_size``, ``gradient_accumulation_steps``), the
architecture from the model's configuration, the device count from the world
size and the strategy from the arguments: ``fsdp`` when ``args.fsdp`` is set,
``tp`` when ``args.parallelism_config`` has ``tp_size > 1``, ``ddp`` for
several processes otherwise, ``single`` for one. DeepSpeed runs must say
``strategy=``. With ``include_num_input_tokens_seen`` on, ``tokens`` is the
trainer's own count over the window; otherwise the runner's formula.

A ``Trainer`` has no callback for an exception: a run that raises never
reaches ``on_train_end``. The callback therefore registers an ``atexit``
hook when training begins: if the process ends (an uncaught exception,
``sys.exit``, SIGTERM) before ``on_train_end``, the row is written as
``failed`` with the error Python reported. In a notebook, where the process
lives on, the next ``on_train_begin`` of the same callback writes the
unfinished run as failed first; :meth:`EnergyCallback.fail` does it at once.

This module imports transformers; :mod:`bayes_energy.runner.job` does not.
"""

from __future__ import annotations

import atexit
import os
import sys
from collections.abc import Mapping
from typing import Any

from transformers import TrainerCallback

from . import meters
from .job import JobError, JobMeter

__all__ = ["EnergyCallback", "strategy_from_args"]


def strategy_from_args(args: Any) -> str:
    """The strategy of a ``Trainer`` run from its ``TrainingArguments``.

    Raises
    ------
    JobError
        For DeepSpeed (not one of the schema's strategies: pass ``strategy=``).
    """
    if getattr(args, "deepspeed", None):
        raise JobError("strategy: a DeepSpeed run is none of single, ddp, fsdp, tp; pass strategy= to EnergyCallback")
    pc = getattr(args, "parallelism_config", None)
    if pc is not None and int(getattr(pc, "tp_size", 1) or 1) > 1:
        return "tp"
    if getattr(args, "fsdp", None):
        return "fsdp"
    return "ddp" if int(getattr(args, "world_size", 1) or 1) > 1 else "single"


class EnergyCallback(TrainerCallback):
    """Meter a ``transformers.Trainer`` run and append one sweep-table row.

    Parameters
    ----------
    out : path
        The sweep table (CSV) the row is appended to.
    seq_len : int
        Tokens per example (the padded length).
    warmup_steps : int, default 2
        Optimiser steps excluded before the measured window.
    strategy : str, optional
        Default: from the training arguments (:func:`strategy_from_args`).
    architecture : mapping, optional
        Replaces or completes the model configuration's architecture.
    workload : str, default "job"
        Joins the run key (e.g. the task or data set name).
    **meter_options
        ``meter``, ``measured_by``, ``device``, ``tokens_per_step``, ``tdp_w``,
        ``idle_fraction``, ``sample_period_s``, ``powercap_root``,
        ``lock_timeout_s``: as for :func:`~bayes_energy.runner.job.measure_job`.

    Attributes
    ----------
    job : JobMeter or None
        The job being measured, or the last one.
    """

    def __init__(self, out: str | os.PathLike, *, seq_len: int, warmup_steps: int = 2, strategy: str | None = None,
                 architecture: Mapping | None = None, workload: str = "job", **meter_options) -> None:
        allowed = {"meter", "measured_by", "device", "tokens_per_step", "tdp_w", "idle_fraction", "sample_period_s",
                   "powercap_root", "lock_timeout_s"}
        unknown = sorted(set(meter_options) - allowed)
        if unknown:
            raise TypeError(f"EnergyCallback: unknown option(s) {', '.join(unknown)}; known: {', '.join(sorted(allowed))}")
        self.out, self.seq_len, self.warmup_steps = out, seq_len, warmup_steps
        self.strategy, self.architecture, self.workload = strategy, architecture, workload
        self.meter_options = meter_options
        self.job: JobMeter | None = None
        self._registered = False

    # ------------------------------------------------------------------ Trainer events
    def on_train_begin(self, args, state, control, model=None, **kwargs):
        if self.job is not None and self.job._state == "running":
            self.fail("a new train() began before on_train_end of the previous one")
        self.job = JobMeter(
            self.out, model, seq_len=self.seq_len, batch_size=int(args.per_device_train_batch_size),
            grad_accum=int(args.gradient_accumulation_steps), warmup_steps=self.warmup_steps,
            strategy=self.strategy or strategy_from_args(args), architecture=self.architecture,
            workload=self.workload, **self.meter_options,
        )
        self.job.start(tokens_seen=int(getattr(state, "num_input_tokens_seen", 0) or 0))
        if not self._registered:
            atexit.register(self._at_exit)
            self._registered = True

    def on_step_end(self, args, state, control, **kwargs):
        if self.job is not None and self.job._state == "running":
            self.job.step(tokens_seen=int(getattr(state, "num_input_tokens_seen", 0) or 0))

    def on_train_end(self, args, state, control, **kwargs):
        if self.job is not None and self.job._state == "running":
            self.job.finish()
        self._unregister()

    # ------------------------------------------------------------------ failures
    def fail(self, error: BaseException | str) -> dict | None:
        """Write the running job's row as ``failed`` now (e.g. from an ``except`` around ``trainer.train()``)."""
        row = self.job.fail(error) if self.job is not None and self.job._state == "running" else None
        self._unregister()
        return row

    def _at_exit(self) -> None:
        if self.job is None or self.job._state != "running":
            return
        err = getattr(sys, "last_value", None)  # set by Python when an uncaught exception ended the program
        if err is None:
            err = "the process ended before on_train_end (no exception was reported)"
        try:
            self.job.fail(err)
        except (meters.MeterError, OSError, ValueError) as exc:  # nothing else can be done at exit
            print(f"bayes_energy: could not write the failed row to {self.out}: {exc}", file=sys.stderr, flush=True)

    def _unregister(self) -> None:
        if self._registered:
            atexit.unregister(self._at_exit)
            self._registered = False
