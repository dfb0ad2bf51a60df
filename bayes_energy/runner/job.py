"""Meter a user's own training job and append its row to a sweep table.

::

    from bayes_energy.runner.job import measure_job

    with measure_job("runs.csv", model, seq_len=128, batch_size=32) as job:
        for batch in loader:
            loss = model(**batch).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            job.step()                 # once per optimiser step

The job is measured with the runner's own meters and the runner's rules for
who measures what (:func:`bayes_energy.runner.worker._make_monitor`): NVML on
GPUs, RAPL on CPUs where it is readable, else the labelled CPU estimate. The
first ``warmup_steps`` optimiser steps are excluded, as in the runner; the
measured window opens after them (device synchronisation and a barrier) and
closes when the ``with`` block ends. Everything between, evaluation and
checkpointing included, belongs to the window.

Under ``torchrun`` every rank enters the block and calls :meth:`JobMeter.step`;
only rank 0 writes, one row. What each rank measures, so that no device is
counted twice:

* GPUs, ``measured_by="per-rank"`` (default): each rank reads the NVML
  counter of its own device (``cuda:LOCAL_RANK``); the energies are summed
  over ranks with one all-reduce.
* GPUs, ``measured_by="node"``: local rank 0 reads every device of its node,
  the other ranks contribute 0.
* CPUs: RAPL counts the node's packages and DRAM, so local rank 0 alone
  reads it; the estimate sums the CPU seconds of every rank into one node
  estimate, counted once.

A block left by an exception (or by SIGTERM, e.g. torchrun or Slurm stopping
the job) writes a ``failed`` row with the error; its outcome columns stay
empty, as on the sweep's failed rows. A row is never written as ``ok`` for a
job that did not finish. Rows are appended through
:class:`bayes_energy.runner.sweep.SweepTable` (one locked, fsynced write of a whole
line) and checked against the schema first (:func:`bayes_energy.runner.sweep.check_row`).

Nothing here imports PyMC or transformers; torch is imported when a job
starts, not when this module is imported.
"""

from __future__ import annotations

import datetime as dt
import os
import platform
import signal
import socket
import sys
import threading
import time
import warnings
from collections.abc import Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from . import meters
from .worker import _device_names, _error_message, _hardware, _make_monitor, _param_counts, _version

__all__ = ["JobMeter", "JobError", "measure_job", "architecture_of", "detect_strategy"]

#: Configuration attributes read for each architecture field, in order (HF names first).
_ARCH_ATTRS: dict[str, tuple[str, ...]] = {
    "num_layers": ("num_hidden_layers", "n_layer", "num_layers", "n_layers"),
    "hidden_size": ("hidden_size", "n_embd", "d_model", "dim"),
    "heads": ("num_attention_heads", "n_head", "num_heads", "n_heads"),
    "ff": ("intermediate_size", "ffn_dim", "d_ff", "encoder_ffn_dim", "n_inner"),
}
_METERS = ("auto", "nvml", "rapl", "estimate")
_MEASURED_BY = ("per-rank", "node")
_LOCK_MESSAGE = "another sweep is writing this file"


class JobError(ValueError):
    """The job cannot be measured as set up; the message says which setting to change."""


# --------------------------------------------------------------------------- what ran
def architecture_of(model: Any = None, architecture: Mapping | None = None) -> dict[str, Any]:
    """The architecture columns of a model: ``num_layers``, ``hidden_size``, ``heads``, ``ff``, ``family``.

    Read from the model's configuration (``model.config``, after unwrapping
    ``.module`` of DDP and FSDP wrappers), from a configuration object passed
    as ``model``, or from a mapping. Hugging Face names are understood
    (``num_hidden_layers``, ``hidden_size``, ``num_attention_heads``,
    ``intermediate_size``; GPT-2's ``n_layer``, ``n_embd``, ``n_head``,
    ``n_inner``, whose ``None`` means ``4 * n_embd``). ``family`` is the
    configuration's ``model_type``; ``vocab_size`` is read when present.

    Parameters
    ----------
    model : torch.nn.Module, configuration or mapping, optional
    architecture : mapping, optional
        Values that replace or complete what the configuration gives.

    Raises
    ------
    JobError
        Naming the field that neither the configuration nor ``architecture`` gives.
    """
    cfg = model
    for _ in range(8):  # DDP(FSDP(model)) and the like
        if cfg is not None and not hasattr(cfg, "config") and hasattr(cfg, "module"):
            cfg = cfg.module
        else:
            break
    cfg = getattr(cfg, "config", cfg)

    def get(name: str):
        if isinstance(cfg, Mapping):
            return cfg.get(name, _MISSING)
        return getattr(cfg, name, _MISSING) if cfg is not None else _MISSING

    out: dict[str, Any] = {}
    for field, names in _ARCH_ATTRS.items():
        for n in names:
            v = get(n)
            if v is _MISSING:
                continue
            if v is None and n == "n_inner" and out.get("hidden_size"):
                v = 4 * int(out["hidden_size"])  # GPT-2 convention
            if v is not None:
                out[field] = v
                break
    fam = get("family")
    if fam is _MISSING or fam is None:
        fam = get("model_type")
    if fam is not _MISSING and fam:
        out["family"] = str(fam).lower()
    vocab = get("vocab_size")
    if vocab is not _MISSING and vocab is not None:
        out["vocab_size"] = vocab
    out.update(dict(architecture or {}))
    where = type(cfg).__name__ if cfg is not None else "no model"
    for field in (*_ARCH_ATTRS, "family"):
        if out.get(field) in (None, ""):
            tried = ", ".join(_ARCH_ATTRS.get(field, ("model_type",)))
            raise JobError(
                f"architecture: cannot read '{field}' from {where} (looked for {tried}); "
                f"pass architecture={{'{field}': ...}}"
            )
    for field in _ARCH_ATTRS:
        v = out[field]
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise JobError(f"architecture: '{field}' must be a positive whole number, got {v!r}")
    return out


_MISSING = object()


def detect_strategy(model: Any, world_size: int) -> str:
    """The parallel strategy of a prepared model: ``single``, ``ddp``, ``fsdp`` or ``tp``.

    FSDP (``fully_shard`` modules or ``FullyShardedDataParallel``) is
    ``fsdp``; ``DistributedDataParallel`` is ``ddp``; parameters that are
    DTensors without FSDP are ``tp``; one process is ``single``.

    Raises
    ------
    JobError
        When several processes run a model none of these wraps (pass ``strategy=``).
    """
    import torch.distributed as dist

    if world_size <= 1:
        return "single"
    mods = list(model.modules()) if hasattr(model, "modules") else []
    if dist.is_available():
        from torch.distributed import fsdp

        kinds = tuple(k for k in (getattr(fsdp, "FSDPModule", None), getattr(fsdp, "FullyShardedDataParallel", None)) if k)
        if kinds and any(isinstance(m, kinds) for m in mods):
            return "fsdp"
    from torch.nn.parallel import DistributedDataParallel

    if isinstance(model, DistributedDataParallel):
        return "ddp"
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # pragma: no cover - old torch
        DTensor = ()  # noqa: N806
    if DTensor and any(isinstance(p, DTensor) for p in model.parameters()):
        return "tp"
    raise JobError(
        f"strategy: {world_size} processes run a {type(model).__name__} that is neither DistributedDataParallel, "
        "FSDP nor tensor-parallel; pass strategy='ddp', 'fsdp' or 'tp'"
    )


# --------------------------------------------------------------------------- the meter
class JobMeter:
    """Meters one training job and appends one sweep-table row (see :func:`measure_job`).

    Use it as a context manager, or call :meth:`start`, :meth:`step` after
    each optimiser step, and :meth:`finish` (or :meth:`fail`).

    Parameters
    ----------
    out : path
        The sweep table (CSV) the row is appended to; created if missing.
        An existing file must be a sweep table, and must not already hold
        the job's run key (checked before training starts).
    model : torch.nn.Module, configuration or mapping, optional
        The model as trained (wrapped or not). Its configuration gives the
        architecture (:func:`architecture_of`), its parameters the device and,
        under torchrun, the strategy (:func:`detect_strategy`).
    seq_len : int
        Tokens per example (the padded length of a batch).
    batch_size : int
        Examples per micro-batch and process.
    grad_accum : int, default 1
        Micro-batches per optimiser step.
    warmup_steps : int, default 2
        Optimiser steps before the measured window (excluded, as in the runner).
    strategy : {"single", "ddp", "fsdp", "tp"}, optional
        Default: detected from ``model`` and the world size.
    architecture : mapping, optional
        ``num_layers``, ``hidden_size``, ``heads``, ``ff``, ``family``: replace
        or complete what the model's configuration gives.
    workload : str, default "job"
        Joins the run key: runs of one configuration with different data or
        tasks need different names.
    tokens_per_step : int, optional
        Tokens one optimiser step processes over all ranks. Default
        ``batch_size * seq_len * grad_accum * ranks`` (``ranks`` = 1 under
        ``tp``, where every rank sees the same batch), as in the runner.
    device : torch.device or str, optional
        The device this process trains on; default that of the model's
        first parameter (CPU without a model).
    meter : {"auto", "nvml", "rapl", "estimate"}, default "auto"
        As ``--meter`` of the sweep: NVML on GPUs; on CPUs RAPL when readable,
        else the estimate (labelled ``estimate``, with a NOTE on stderr).
    measured_by : {"per-rank", "node"}, default "per-rank"
        GPU jobs under torchrun: each rank its own device, or local rank 0 every
        device of the node.
    tdp_w, idle_fraction : float
        The estimate's parameters (default 10 W per logical core, 0.3).
    sample_period_s : float, default 0.1
        Power sampling period for GPUs without the NVML energy counter.
    powercap_root : path, default ``/sys/class/powercap``
    lock_timeout_s : float, default 60
        How long the final append waits for another writer of ``out``.

    Raises
    ------
    JobError
        Before training, for a setting that cannot be measured (and names it).
    bayes_energy.runner.meters.MeterError
        When the chosen meter cannot be read.

    Attributes
    ----------
    row : dict or None
        The row written (rank 0), after :meth:`finish` or :meth:`fail`.
    steps : int
        Optimiser steps seen so far, warm-up included.
    """

    def __init__(
        self,
        out: str | os.PathLike,
        model: Any = None,
        *,
        seq_len: int,
        batch_size: int,
        grad_accum: int = 1,
        warmup_steps: int = 2,
        strategy: str | None = None,
        architecture: Mapping | None = None,
        workload: str = "job",
        tokens_per_step: int | None = None,
        device: Any = None,
        meter: str = "auto",
        measured_by: str = "per-rank",
        tdp_w: float | None = None,
        idle_fraction: float = meters.EstimateMonitor.IDLE_FRACTION,
        sample_period_s: float = 0.1,
        powercap_root: str | os.PathLike = meters.POWERCAP,
        lock_timeout_s: float = 60.0,
    ) -> None:
        from ..schema import STRATEGIES

        for name, v, lo in (("seq_len", seq_len, 1), ("batch_size", batch_size, 1), ("grad_accum", grad_accum, 1),
                            ("warmup_steps", warmup_steps, 0)):
            if isinstance(v, bool) or not isinstance(v, int) or v < lo:
                raise JobError(f"{name}: expected a whole number >= {lo}, got {v!r}")
        if tokens_per_step is not None and (isinstance(tokens_per_step, bool) or not isinstance(tokens_per_step, int)
                                            or tokens_per_step < 1):
            raise JobError(f"tokens_per_step: expected a positive whole number, got {tokens_per_step!r}")
        if meter not in _METERS:
            raise JobError(f"meter: expected one of {', '.join(_METERS)}, got {meter!r}")
        if measured_by not in _MEASURED_BY:
            raise JobError(f"measured_by: expected one of {', '.join(_MEASURED_BY)}, got {measured_by!r}")
        if strategy is not None and strategy not in STRATEGIES:
            raise JobError(f"strategy: expected one of {', '.join(STRATEGIES)}, got {strategy!r}")
        if not str(workload).strip():
            raise JobError("workload: expected a non-empty name")
        self.out = Path(out)
        self.model = model
        self.arch = architecture_of(model, architecture)
        self.seq_len, self.batch_size, self.grad_accum = seq_len, batch_size, grad_accum
        self.warmup_steps = warmup_steps
        self.strategy = strategy
        self.workload = str(workload).strip()
        self.tokens_per_step = tokens_per_step
        self.device = device
        self.meter, self.measured_by_asked = meter, measured_by
        self.tdp_w, self.idle_fraction = tdp_w, idle_fraction
        self.sample_period_s, self.powercap_root = sample_period_s, str(powercap_root)
        self.lock_timeout_s = float(lock_timeout_s)
        self.row: dict | None = None
        self.steps = 0
        self._state = "new"
        self._window_open = False
        self._tokens_seen0: int | None = None
        self._tokens_seen: int | None = None
        self._step_marks: list[float] = []
        self._old_sigterm = None
        self._terminated_by = ""

    # ------------------------------------------------------------------ start
    def start(self, tokens_seen: int | None = None) -> JobMeter:
        """Resolve the run (ranks, device, strategy, meter), check the output file, open the window if no warm-up.

        ``tokens_seen`` is the job's running token count at the start (see :meth:`step`).
        """
        if self._state != "new":
            raise JobError("this JobMeter was already started; make a new one per job")
        import torch
        import torch.distributed as dist

        self._t_start, self._wall_start = time.perf_counter(), time.time()
        self._dist = dist if (dist.is_available() and dist.is_initialized()) else None
        env_world = int(os.environ.get("WORLD_SIZE", "1"))
        if self._dist is None and env_world > 1:
            raise JobError(
                f"WORLD_SIZE={env_world} but torch.distributed is not initialised: call "
                "torch.distributed.init_process_group() before the job starts, so that one rank writes one row"
            )
        self.rank = self._dist.get_rank() if self._dist else 0
        self.world = self._dist.get_world_size() if self._dist else 1
        local_rank = int(os.environ.get("LOCAL_RANK", str(self.rank)))
        local_world = int(os.environ.get("LOCAL_WORLD_SIZE", str(self.world)))

        dev = self._resolve_device(torch)
        self.use_cuda = dev.type == "cuda"
        cuda_index = dev.index if dev.index is not None else (local_rank if self._dist else 0)
        if self.use_cuda and self._dist is not None and cuda_index != local_rank:
            raise JobError(
                f"rank {self.rank} trains on cuda:{cuda_index} but LOCAL_RANK is {local_rank}: the meters measure "
                "cuda:LOCAL_RANK under torchrun; put each rank on its own cuda:LOCAL_RANK (torch.cuda.set_device)"
            )
        self._backend = self._dist.get_backend() if self._dist else "none"
        self._tensor_device = dev if (self.use_cuda and self._backend != "gloo") else torch.device("cpu")

        def sync() -> None:
            # No CUDA work can be pending in a process that never initialised CUDA.
            if self.use_cuda and torch.cuda.is_initialized():
                torch.cuda.synchronize(dev)

        self._sync = sync
        if self.strategy is None:
            self.strategy = detect_strategy(self.model, self.world) if self.model is not None and hasattr(
                self.model, "parameters") else ("single" if self.world == 1 else None)
            if self.strategy is None:
                raise JobError(f"strategy: {self.world} processes and no model to inspect; pass strategy=")
        if self.strategy == "single" and self.world != 1:
            raise JobError(f"strategy 'single' runs on 1 device, but {self.world} processes run this job")

        measured_by = self.measured_by_asked
        meter_rank = local_rank
        if self.use_cuda and self._dist is None:
            meter_rank, measured_by = cuda_index, "per-rank"  # one process: measure the device it uses
        args = SimpleNamespace(meter=self.meter, measured_by=measured_by, sample_period_s=self.sample_period_s,
                               powercap_root=self.powercap_root, tdp_w=self.tdp_w, idle_fraction=self.idle_fraction)
        self.monitor, self._counts, self.measured_by, self._gpus = _make_monitor(
            args, self.use_cuda, meter_rank, local_world, sync, self._all_sum)
        try:
            if self.use_cuda and self._gpus is not None and torch.cuda.is_available():
                nvml_name, torch_name = self._gpus[cuda_index].name, torch.cuda.get_device_name(cuda_index)
                if nvml_name != torch_name:
                    raise meters.MeterUnavailable(
                        f"cuda:{cuda_index} is {torch_name!r} to torch but {nvml_name!r} to NVML: the device orders "
                        "differ. Set CUDA_DEVICE_ORDER=PCI_BUS_ID before the job starts"
                    )
            self.device_names = _device_names(self.use_cuda, self._gpus, cuda_index, self._dist)
            self.hardware = _hardware(self.device_names)
            self._install_sigterm()
            problem = self._check_out_file() if self.rank == 0 else ""
            if self._dist is not None:
                box = [problem]
                self._dist.broadcast_object_list(box, src=0)
                problem = box[0]
            if problem:
                raise JobError(problem)
        except BaseException:
            self._close_monitor()
            self._restore_sigterm()
            self._state = "done"
            raise
        if self.rank == 0 and self.monitor is not None and self.monitor.source == "estimate":
            why = "asked for with meter='estimate'" if self.meter == "estimate" else "no GPU and no readable RAPL"
            print(
                f"NOTE: energy of this job is an ESTIMATE, not a measurement (energy_source='estimate'; {why}). "
                f"Power = idle + (TDP - idle) x CPU utilisation, TDP = {self.monitor.tdp_w:g} W.",
                file=sys.stderr, flush=True,
            )
        self._state = "running"
        if tokens_seen is not None and tokens_seen >= 0:
            self._tokens_seen = int(tokens_seen)
        if self.warmup_steps == 0:
            self._open_window()
        return self

    def _resolve_device(self, torch):
        if self.device is not None:
            return torch.device(self.device)
        params = getattr(self.model, "parameters", None)
        if params is not None:
            for p in params():
                d = p.device
                if d.type == "meta":
                    continue
                return d
        return torch.device("cpu")

    def _all_sum(self, x: float) -> float:
        if self._dist is None:
            return x
        import torch

        t = torch.tensor([x], dtype=torch.float64, device=self._tensor_device)
        self._dist.all_reduce(t)
        return float(t.item())

    def _barrier(self) -> None:
        self._sync()
        if self._dist is not None:
            self._dist.barrier()

    def _key_row(self) -> dict:
        return {
            "hardware": self.hardware, "family": self.arch["family"], "num_layers": self.arch["num_layers"],
            "hidden_size": self.arch["hidden_size"], "heads": self.arch["heads"], "ff": self.arch["ff"],
            "seq_len": self.seq_len, "batch_size": self.batch_size, "grad_accum": self.grad_accum,
            "strategy": self.strategy, "n_gpus": self.world if self.strategy != "single" else 1,
            "workload": self.workload,
        }

    def _check_out_file(self) -> str:
        """Why the row could not be appended to ``out`` ('' when it can): checked before training starts."""
        from .sweep import SweepError, SweepTable
        from .plan import config_key

        try:
            table = SweepTable(self.out, read_only=True)
            key = config_key(self._key_row(), self.hardware)
            lines = [i + 2 for i, r in enumerate(table.rows()) if config_key(r, r.get("hardware", "")) == key]
        except SweepError as err:
            return str(err)
        except (OSError, KeyError, ValueError) as err:
            return f"{self.out}: cannot be read as a sweep table ({err})"
        if lines:
            return (
                f"{self.out}: line {lines[0]} already holds this run key (the same configuration on {self.hardware}, "
                f"workload {self.workload!r}); a sweep table has one row per key. Pass another workload= name to keep "
                "the runs apart, or write to another file"
            )
        return ""

    # ------------------------------------------------------------------ steps
    def step(self, tokens_seen: int | None = None) -> None:
        """Count one optimiser step; the window opens after the warm-up steps (every rank must call this).

        Parameters
        ----------
        tokens_seen : int, optional
            The job's running count of input tokens over all ranks after this
            step (e.g. Hugging Face's ``state.num_input_tokens_seen``). When
            given, the window's ``tokens`` is its increase over the window
            instead of the ``tokens_per_step`` formula.
        """
        if self._state != "running":
            raise JobError(f"step() on a job that is {self._state}; use it inside the with block")
        self.steps += 1
        if tokens_seen is not None and tokens_seen > 0:
            self._tokens_seen = int(tokens_seen)
        if self._window_open:
            self._step_marks.append(time.perf_counter())
        elif self.steps == self.warmup_steps:
            self._open_window()

    def _open_window(self) -> None:
        self._barrier()
        self._warmup_s = time.perf_counter() - self._t_start
        if self.monitor is not None:
            self.monitor.begin_window("job")
        self._t_window = time.perf_counter()
        self._step_marks = [self._t_window]
        self._window_open = True
        self._tokens_seen0 = self._tokens_seen

    # ------------------------------------------------------------------ end
    def finish(self) -> dict | None:
        """Close the window (every rank), write the ``ok`` row (rank 0) and return it.

        A job that ran no step after the warm-up gets a ``failed`` row
        instead: nothing was measured.
        """
        if self._state != "running":
            raise JobError(f"finish() on a job that is {self._state}")
        if not self._window_open or self.steps <= self.warmup_steps:
            return self.fail(
                f"no step after the {self.warmup_steps} warm-up step(s) (the job ran {self.steps}): nothing was "
                "measured; lower warmup_steps or run more steps"
            )
        try:
            self._barrier()
            t_end = time.perf_counter()
            m = self.monitor.end_window("job") if self.monitor is not None else None
            energy = self._all_sum(m.energy_j if (m is not None and self._counts) else 0.0)
        except Exception as err:  # a meter or a collective failed at the end: the row says so
            self.fail(err)
            raise
        self._window_open = False
        self._close_monitor()
        self._restore_sigterm()
        self._state = "done"
        if self.rank != 0:
            return None
        row = self._base_row()
        steps = self.steps - self.warmup_steps
        time_s = m.time_s if m is not None else t_end - self._t_window
        gaps = [b - a for a, b in zip(self._step_marks, self._step_marks[1:])]
        notes = sorted(set(m.notes)) if m is not None else []
        tokens = self._window_tokens(steps)
        if self._counted_tokens() is not None:
            notes.append("tokens counted by the job (tokens_seen)")
        desc = self.monitor.describe() if self.monitor is not None else {}
        row.update(
            status="ok", error="", steps=steps, tokens=tokens, time_s=time_s, energy_j=energy,
            energy_source=m.source if m is not None else "", repeats=1, power_w=energy / time_s if time_s > 0 else None,
            step_time_s=time_s / steps, step_time_min_s=min(gaps) if gaps else None,
            measured_by=self.measured_by, meter=desc.get("meter", ""),
            meter_devices=desc.get("devices") or desc.get("counter") or "",
            tdp_w=desc.get("tdp_w"), idle_model_w=desc.get("idle_model_w"),
            cpu_s=(m.extra.get("cpu_s") if m is not None else None),
            cpu_util=(m.extra.get("cpu_util") if m is not None else None),
            warmup_s=self._warmup_s, notes="; ".join(notes),
            started_at=_iso(m.started_at if m is not None else self._wall_start),
            ended_at=_iso(m.ended_at if m is not None else time.time()),
        )
        return self._write(row)

    def _counted_tokens(self) -> float | None:
        """Tokens the job itself counted over the window, when it reported a running count at both ends."""
        if self._tokens_seen0 is not None and self._tokens_seen is not None and self._tokens_seen > self._tokens_seen0:
            return float(self._tokens_seen - self._tokens_seen0)
        return None

    def _window_tokens(self, steps: int) -> float:
        counted = self._counted_tokens()
        if counted is not None:
            return counted
        if self.tokens_per_step is not None:
            return float(self.tokens_per_step * steps)
        ranks = 1 if self.strategy == "tp" else self.world
        return float(self.batch_size * self.seq_len * self.grad_accum * ranks * steps)

    def fail(self, error: BaseException | str) -> dict | None:
        """End the job as failed: close the meters without collectives, write a ``failed`` row (rank 0).

        Safe to call from any rank after any error: it never waits for the
        other ranks (they may be gone).
        """
        if self._state == "done":
            return self.row
        msg = error if isinstance(error, str) else _error_message(error)
        if self._terminated_by:
            msg = f"stopped by {self._terminated_by} ({msg})"
        partial = ""
        if self._state == "running" and self._window_open and self.monitor is not None:
            if hasattr(self.monitor, "reduce"):
                self.monitor.reduce = None  # no all-reduce: the other ranks may be gone
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", meters.ShortWindowWarning)
                    m = self.monitor.end_window("job", sync=False)
                partial = (f"before the failure this rank's {m.source} meter read {m.energy_j:.4g} J over "
                           f"{m.time_s:.4g} s (not a whole-job measurement)")
            except Exception:  # noqa: BLE001 - the job already failed; keep its first error
                pass
        self._window_open = False
        if self._state == "running":
            self._close_monitor()
            self._restore_sigterm()
        was_started = self._state == "running"
        self._state = "done"
        if not was_started or self.rank != 0:
            return None
        from .sweep import _OUTCOME_COLUMNS

        row = self._base_row()
        for c in _OUTCOME_COLUMNS:
            row[c] = None
        row.update(status="failed", error=msg, warmup=self.warmup_steps, notes=partial,
                   started_at=_iso(self._wall_start), ended_at=_iso(time.time()))
        return self._write(row)

    def _base_row(self) -> dict:
        from .. import __version__

        try:
            params_total, params_local = _param_counts(self.model) if hasattr(self.model, "parameters") else (None, None)
        except Exception:  # noqa: BLE001 - a broken model must not cost the row
            params_total = params_local = None
        import torch

        script = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else "python"
        return {
            **self._key_row(),
            "warmup": self.warmup_steps, "vocab_size": self.arch.get("vocab_size"),
            "params_total": params_total, "params_local": params_local,
            "idle_power_w": None, "idle_source": "", "idle_measured_at": "",
            "host": socket.gethostname(),
            "hardware_detail": f"{'cuda' if self.use_cuda else 'cpu'}: {self.hardware}",
            "device_names": ";".join(self.device_names),
            "device_count": self._key_row()["n_gpus"] if self.use_cuda else meters.logical_cores(),
            "driver_version": getattr(self._gpus, "driver_version", "") if self.use_cuda else "none",
            "torch_version": torch.__version__, "transformers_version": _version("transformers"),
            "python_version": platform.python_version(), "backend": self._backend,
            "threads_per_proc": torch.get_num_threads(),
            "plan": f"job:{script}", "shard": "", "runner_version": __version__,
        }

    def _write(self, row: dict) -> dict:
        """Validate and append the row; wait for a lock held by another writer up to ``lock_timeout_s``."""
        from .sweep import SweepError, SweepTable, check_row

        row = check_row(row)
        deadline = time.monotonic() + self.lock_timeout_s
        while True:
            try:
                with SweepTable(self.out) as table:
                    table.append(row)
                break
            except SweepError as err:
                if _LOCK_MESSAGE not in str(err) or time.monotonic() > deadline:
                    self.row = row
                    raise
                time.sleep(0.1)
        self.row = row
        return row

    def _close_monitor(self) -> None:
        if getattr(self, "monitor", None) is not None:
            try:
                self.monitor.close()
            except Exception:  # noqa: BLE001
                pass

    # ------------------------------------------------------------------ signals
    def _install_sigterm(self) -> None:
        """Turn SIGTERM into an exception so a stopped job writes its failed row (main thread, default handler only)."""
        if threading.current_thread() is not threading.main_thread():
            return
        if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
            return

        def handler(signum, frame):
            self._terminated_by = "SIGTERM"
            raise SystemExit(128 + signum)

        self._old_sigterm = signal.signal(signal.SIGTERM, handler)

    def _restore_sigterm(self) -> None:
        if self._old_sigterm is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._old_sigterm)
            self._old_sigterm = None

    # ------------------------------------------------------------------ context manager
    def __enter__(self) -> JobMeter:
        return self.start()

    def __exit__(self, exc_type, exc, tb) -> bool:
        if self._state != "running":
            return False
        if exc is None:
            self.finish()
        else:
            self.fail(exc)
        return False


def measure_job(out: str | os.PathLike, model: Any = None, **options: Any) -> JobMeter:
    """Meter a training job; use as ``with measure_job(...) as job:`` and call ``job.step()`` per optimiser step.

    The same as ``JobMeter(out, model, **options)``; see :class:`JobMeter`
    for the options (``seq_len`` and ``batch_size`` are required).

    Examples
    --------
    >>> with measure_job("runs.csv", model, seq_len=128, batch_size=16) as job:  # doctest: +SKIP
    ...     for batch in loader:
    ...         train_step(batch)
    ...         job.step()
    """
    return JobMeter(out, model, **options)


def _iso(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).isoformat(timespec="seconds")
