"""The torchrun entry point: measure one configuration, write one JSON result.

Launched by :mod:`bayes_energy.runner.sweep` as::

    python -m torch.distributed.run --standalone --nproc_per_node N \\
        -m bayes_energy.runner.worker --config '{...}' --result out.json

Each rank builds the model, applies the strategy, runs the warm-up steps
(excluded), then ``repeats`` measured windows of ``steps`` optimiser steps.
Every window starts and ends with device synchronisation and a barrier.

Who measures (``--measured-by``), so no device is counted twice:

* ``node`` - local rank 0 measures every device of its node;
* ``per-rank`` - each rank measures its own device; the energies are summed.

The CPU estimate is node-level: every rank reports its CPU seconds, summed.
Rank 0 writes the result file; a failing rank writes ``<result>.rank<R>.err``
with its error message so the sweep can record it.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import platform
import socket
import statistics
import sys
import time
import traceback
from pathlib import Path

from . import meters
from .plan import RunConfig

__all__ = ["main", "run"]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bayes_energy.runner.worker", description=__doc__.split("\n")[0])
    p.add_argument("--config", required=True, help="the RunConfig as JSON")
    p.add_argument("--result", required=True, help="where rank 0 writes the JSON result")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    p.add_argument("--meter", choices=["auto", "nvml", "rapl", "estimate"], default="auto")
    p.add_argument("--measured-by", choices=["node", "per-rank"], default="per-rank",
                   help="GPU runs: one process measures the node, or each rank its own device")
    p.add_argument("--tdp-w", type=float, default=None, help="estimate meter: full-load CPU power, W")
    p.add_argument("--idle-fraction", type=float, default=meters.EstimateMonitor.IDLE_FRACTION)
    p.add_argument("--sample-period-s", type=float, default=0.1)
    p.add_argument("--threads-per-proc", type=int, default=1, help="CPU runs: torch intra-op threads per process")
    p.add_argument("--powercap-root", default=meters.POWERCAP)
    p.add_argument("--overhead-check", type=int, default=0, metavar="K",
                   help="also time K bare windows (no meter, no bookkeeping) against K measured ones")
    return p


def main(argv: list[str] | None = None) -> int:
    """Run the worker; exit status 0 on success."""
    args = _parser().parse_args(argv)
    rank = int(os.environ.get("RANK", "0"))
    _die_with_parent()
    try:
        run(args)
        return 0
    except BaseException as err:  # noqa: BLE001 - every failure must reach the sweep table
        msg = _error_message(err)
        Path(f"{args.result}.rank{rank}.err").write_text(msg + "\n\n" + traceback.format_exc())
        print(f"bayes_energy worker rank {rank} failed: {msg}", file=sys.stderr, flush=True)
        return 1


def _die_with_parent() -> None:
    """Get SIGTERM if torchrun dies (torchrun starts each worker in its own session)."""
    try:
        import ctypes
        import signal

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001 - not Linux: best effort
        pass


def _error_message(err: BaseException) -> str:
    name = type(err).__name__
    text = str(err).strip().splitlines()[0] if str(err).strip() else ""
    if "out of memory" in text.lower() or name in ("OutOfMemoryError", "MemoryError"):
        return f"out of memory ({name}: {text})"[:500]
    return f"{name}: {text}"[:500]


def run(args: argparse.Namespace) -> dict | None:
    """Measure the configuration in ``args``; rank 0 returns and writes the result."""
    t_start = time.time()
    cfg = RunConfig.from_dict(json.loads(args.config))
    problems = cfg.problems()
    if problems:
        raise ValueError("; ".join(problems))
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", str(world)))

    import torch
    import torch.distributed as dist

    from . import workload

    use_cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    if use_cuda:
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
        backend = "nccl"

        def sync() -> None:
            torch.cuda.synchronize(device)
    else:
        device = torch.device("cpu")
        backend = "gloo"
        # One intra-op thread per process: on CPU a "device" is a core. Several threads per
        # process slow tiny models down by 10-40x on a busy machine (each parallel region
        # waits for a thread that another program has preempted).
        torch.set_num_threads(args.threads_per_proc)

        def sync() -> None:
            return None

    if "MASTER_ADDR" in os.environ and not dist.is_initialized():
        dist.init_process_group(backend=backend, device_id=device if use_cuda else None)
    distributed = dist.is_initialized()

    def barrier() -> None:
        sync()
        if distributed:
            dist.barrier()

    def all_sum(x: float, op=dist.ReduceOp.SUM) -> float:
        if not distributed:
            return x
        t = torch.tensor([x], dtype=torch.float64, device=device)
        dist.all_reduce(t, op=op)
        return float(t.item())

    def all_max(x: float) -> float:
        return all_sum(x, op=dist.ReduceOp.MAX)

    t_build = time.perf_counter()
    model = workload.build_network(cfg, device)
    model = workload.apply_strategy(model, cfg, device)
    batch = workload.make_batch(cfg, device, rank)
    trainer = workload.Trainer(model, batch, cfg.grad_accum, sync)
    build_s = time.perf_counter() - t_build
    params_total, params_local = _param_counts(model)

    monitor, counts, measured_by, gpus = _make_monitor(args, use_cuda, local_rank, local_world, sync, all_sum)

    t_warm = time.perf_counter()
    warm_times = trainer.timed_steps(cfg.warmup)
    barrier()
    warmup_s = time.perf_counter() - t_warm
    steps = _steps_for(cfg, warm_times, all_max)

    windows = []
    for r in range(cfg.repeats):
        windows.append(_measured_window(trainer, steps, monitor, counts, barrier, all_sum, f"repeat-{r}"))
    bare = []
    for r in range(args.overhead_check):
        bare.append(_bare_window(trainer, steps, barrier))
        windows.append(_measured_window(trainer, steps, monitor, counts, barrier, all_sum, f"check-{r}"))

    names = _device_names(use_cuda, gpus, local_rank, dist if distributed else None)
    if monitor is not None:
        monitor.close()
    # Drop everything that holds the process group (DDP, FSDP and DTensor keep references)
    # before destroying it; a group destroyed under live references can abort at exit.
    del trainer, model, batch
    gc.collect()
    if distributed:
        dist.barrier()
        dist.destroy_process_group()
    if rank != 0:
        return None

    main_windows = windows[: cfg.repeats]
    times = [w["time_s"] for w in main_windows]
    energies = [w["energy_j"] for w in main_windows]
    tokens = workload.tokens_per_step(cfg) * steps
    time_s = statistics.fmean(times)
    overhead = statistics.fmean(w["overhead_s"] for w in main_windows)
    result = {
        **cfg.to_dict(),
        "status": "ok",
        "steps": steps,
        "tokens": tokens,
        "time_s": time_s,
        "energy_j": statistics.fmean(energies),
        "time_s_sd": statistics.stdev(times) if len(times) > 1 else None,
        "energy_j_sd": statistics.stdev(energies) if len(energies) > 1 else None,
        "power_w": statistics.fmean(energies) / time_s,
        "energy_source": main_windows[0]["source"],
        "measured_by": measured_by,
        "step_time_s": time_s / steps,
        "step_time_min_s": min(min(w["step_times_s"]) for w in main_windows),
        "overhead_s_per_step": overhead / steps,
        "overhead_share": overhead / time_s,
        "cpu_s": _mean_extra(main_windows, "cpu_s"),
        "cpu_util": _mean_extra(main_windows, "cpu_util"),
        "params_total": params_total,
        "params_local": params_local,
        "build_s": build_s,
        "warmup_s": warmup_s,
        "notes": "; ".join(sorted({n for w in main_windows for n in w["notes"]})),
        "windows": main_windows,
        "device_names": names,
        "device_count": cfg.n_gpus if use_cuda else meters.logical_cores(),
        "hardware": _hardware(names),
        "driver_version": getattr(gpus, "driver_version", "") if use_cuda else "none",
        "torch_version": torch.__version__,
        "transformers_version": _version("transformers"),
        "backend": backend if distributed else "none",
        "threads_per_proc": torch.get_num_threads(),
        "host": socket.gethostname(),
        "python_version": platform.python_version(),
        **({} if monitor is None else {f"meter_{k}": v for k, v in monitor.describe().items()}),
        "worker_started_at": t_start,
        "worker_ended_at": time.time(),
    }
    if bare:
        instr = [w["time_s"] / steps for w in windows[cfg.repeats:]]
        base = [b / steps for b in bare]
        result["overhead_check"] = {
            "bare_step_s": base,
            "measured_step_s": instr,
            "median_diff_s_per_step": statistics.median(i - b for i, b in zip(instr, base)),
        }
    tmp = Path(f"{args.result}.tmp")
    tmp.write_text(json.dumps(result, indent=1, default=str))
    os.replace(tmp, args.result)
    return result


def _steps_for(cfg: RunConfig, warm_times: list[float], all_max) -> int:
    """Measured steps: ``cfg.steps``, or more so a window lasts ``cfg.min_window_s``.

    The step time is the fastest warm-up step after the first (which pays
    one-off costs), the slowest over ranks; every rank gets the same count.
    """
    if cfg.min_window_s <= 0:
        return cfg.steps
    if not warm_times:
        raise ValueError("min_window_s needs at least one warm-up step to time")
    step_s = all_max(min(warm_times[1:] or warm_times))
    return max(cfg.steps, math.ceil(cfg.min_window_s / max(step_s, 1e-6)))


def _param_counts(model) -> tuple[int, int]:
    """Parameter elements of the whole model and those this rank holds (FSDP and TP shard them)."""
    total = local = 0
    for p in model.parameters():
        total += p.numel()
        local += p.to_local().numel() if hasattr(p, "to_local") else p.numel()
    return total, local


def _mean_extra(windows: list[dict], key: str) -> float | None:
    vals = [w["extra"][key] for w in windows if key in w["extra"]]
    return statistics.fmean(vals) if vals else None


def _version(dist_name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist_name)
    except PackageNotFoundError:
        return ""


def _hardware(names: list[str]) -> str:
    unique = list(dict.fromkeys(names))
    return "+".join(unique)


def _device_names(use_cuda: bool, gpus, local_rank: int, dist) -> list[str]:
    if use_cuda:
        import torch

        mine = gpus[local_rank].name if gpus is not None and gpus.available else torch.cuda.get_device_name(local_rank)
    else:
        mine = meters.cpu_model_name()
    if dist is None:
        return [mine]
    out: list = [None] * dist.get_world_size()
    dist.all_gather_object(out, mine)
    return out


def _make_monitor(args, use_cuda: bool, local_rank: int, local_world: int, sync, all_sum):
    """This rank's monitor, whether its energy counts, the ``measured_by`` label and the GPUs.

    The monitor is ``None`` on ranks whose device another rank measures.
    Runs are single-node (``torchrun --standalone``).
    """
    if use_cuda:
        if args.meter not in ("auto", "nvml"):
            raise ValueError(f"--meter {args.meter} cannot measure GPUs; use nvml")
        gpus = meters.NVMLGPUs()
        if args.measured_by == "node":
            if local_rank != 0:
                return None, False, "node", gpus
            idx = list(range(local_world))
        else:
            idx = [local_rank]
        mon = meters.NVMLMonitor(gpus, idx, sync=sync, sample_period_s=args.sample_period_s)
        return mon, True, args.measured_by, gpus
    if args.meter in ("auto", "rapl"):
        try:
            zones = meters.rapl_zones(args.powercap_root)
            # RAPL counts the node's packages and DRAM: one process measures them.
            return (meters.RAPLMonitor(zones, sync=sync) if local_rank == 0 else None), local_rank == 0, "node", None
        except (meters.MeterUnavailable, meters.MeterPermissionError):
            if args.meter == "rapl":
                raise
    if args.meter == "nvml":
        raise meters.MeterUnavailable("--meter nvml on a CPU run: no GPU is used")
    # Every rank reads its own CPU seconds (the all-reduce needs all of them); one node estimate counts.
    est = meters.EstimateMonitor(tdp_w=args.tdp_w, idle_fraction=args.idle_fraction, reduce=all_sum, sync=sync)
    return est, local_rank == 0, "node", None


def _measured_window(trainer, steps: int, monitor, counts: bool, barrier, all_sum, name: str) -> dict:
    """One measured window of ``steps`` steps, with the runner's own cost timed.

    The runner's overhead is the time spent in ``begin_window`` and
    ``end_window`` plus the bookkeeping between steps (the window's steps
    minus the sum of the step times). The closing barrier, which waits for
    the slowest rank, belongs to the distributed run and is not counted.
    """
    barrier()
    t_a = time.perf_counter()
    if monitor is not None:
        monitor.begin_window(name)
    t_b = time.perf_counter()
    step_times = trainer.timed_steps(steps)
    t_steps = time.perf_counter()
    barrier()
    t_c = time.perf_counter()
    m = monitor.end_window(name) if monitor is not None else None
    t_d = time.perf_counter()
    # Sum over ranks; ranks that do not count a device contribute 0, so each device counts once.
    energy = all_sum(m.energy_j if (m is not None and counts) else 0.0)
    window = m.time_s if m is not None else (t_c - t_b)
    overhead = (t_b - t_a) + (t_d - t_c) + max(0.0, (t_steps - t_b) - sum(step_times))
    return {
        "time_s": window,
        "energy_j": energy,
        "source": m.source if m is not None else "",
        "step_times_s": step_times,
        "overhead_s": overhead,
        "extra": dict(m.extra) if m is not None else {},
        "notes": list(m.notes) if m is not None else [],
        "started_at": m.started_at if m is not None else None,
    }


def _bare_window(trainer, steps: int, barrier) -> float:
    """The same steps with no meter and no per-step bookkeeping: the baseline for the overhead check."""
    barrier()
    t = time.perf_counter()
    for _ in range(steps):
        trainer.step()
    barrier()
    return time.perf_counter() - t


if __name__ == "__main__":
    code = main()
    # The result is on disk; skip interpreter teardown, where gloo's threads can
    # abort the process after a clean run ("terminate called without an active exception").
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
