"""Run a sweep plan and write the sweep table, one durable row per configuration.

Usage::

    python -m bayes_energy.runner.sweep PLAN.toml --out data/NAME.csv [--shard i/n]
        [--tdp-w W] [--timeout-s S] [--meter auto|nvml|rapl|estimate]
        [--measured-by per-rank|node] [--retry-failed] [--dry-run]

Each configuration is one ``torchrun`` launch of
:mod:`bayes_energy.runner.worker` (a subprocess, never a shell). Rows are
appended one at a time (one ``write`` of a full line, then ``fsync``); a
killed sweep loses at most the configuration in flight, and a torn last line
is cut off when the sweep resumes. Configurations whose run key is already in
the file are skipped, so re-running a plan resumes it. A configuration that
fails (error, out of memory, timeout) becomes a ``failed`` row and the sweep
goes on. Idle power is measured before the sweep and recorded in
``idle_power_w``; it is never subtracted from ``energy_j``.

This module never imports PyMC, ArviZ or the models: it runs on GPU nodes
that have only torch and nvidia-ml-py.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import fcntl
import io
import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

from ..cli import Parser, fail, nonnegative_float, positive_float, positive_int, probability, scratch_dir
from . import meters
from .plan import PlanError, RunConfig, SweepPlan, config_key, load_plan, parse_shard, shard
from ..schema import REQUIRED, SchemaError, validate

__all__ = ["COLUMNS", "SweepTable", "SweepError", "main", "run_sweep", "launch"]

#: Columns of the runner's CSV, in order: the schema's required columns first.
COLUMNS: tuple[str, ...] = (
    *REQUIRED,
    "workload", "status", "error",
    "steps", "warmup", "vocab_size", "params_total", "params_local", "step_time_s", "step_time_min_s", "time_s_sd", "energy_j_sd", "power_w",
    "idle_power_w", "idle_source", "idle_measured_at",
    "measured_by", "meter", "meter_devices", "tdp_w", "idle_model_w", "cpu_s", "cpu_util",
    "overhead_s_per_step", "overhead_share", "build_s", "warmup_s", "launch_s", "notes",
    "host", "hardware_detail", "device_names", "device_count", "driver_version", "torch_version",
    "transformers_version", "python_version", "backend", "threads_per_proc",
    "started_at", "ended_at", "plan", "shard", "runner_version",
)

#: Columns left empty on failed rows.
_OUTCOME_COLUMNS = {
    "tokens", "time_s", "energy_j", "energy_source", "repeats", "step_time_s", "step_time_min_s", "time_s_sd",
    "energy_j_sd", "power_w", "cpu_s", "cpu_util", "overhead_s_per_step", "overhead_share", "build_s", "warmup_s",
    "steps", "measured_by", "meter", "meter_devices", "tdp_w", "idle_model_w", "params_total", "params_local",
}

DEFAULT_TIMEOUT_S = 900.0


class SweepError(RuntimeError):
    """The sweep cannot go on (e.g. the output file is locked or has another layout)."""


# --------------------------------------------------------------------------- the durable table
class SweepTable:
    """The output CSV, opened for durable appends.

    Opening checks that an existing file is a sweep table written by this
    runner (a foreign file is refused before anything is changed), takes an
    exclusive lock (a second sweep on the same file fails at once), cuts off a
    torn last line left by a killed process and writes the header to a new
    file. With ``read_only`` (``--dry-run``) nothing is created, locked or
    changed.

    Parameters
    ----------
    path : path
        The CSV file; created with its folder if missing.
    read_only : bool
        Only read what is there.
    """

    def __init__(self, path: str | os.PathLike, read_only: bool = False) -> None:
        self.path = Path(path)
        self.read_only = read_only
        self.fd = -1
        self.repaired_bytes = 0
        if self.path.is_dir():
            raise SweepError(f"--out {self.path}: is a folder; give the sweep table's file name (CSV)")
        for parent in self.path.parents:
            if parent.exists():
                if not parent.is_dir():
                    raise SweepError(f"--out {self.path}: {parent} is a file, not a folder")
                break
        existing = self._existing_header()
        if read_only:
            self.fieldnames = existing or list(COLUMNS)
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        new = not self.path.exists()
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self.fd)
            self.fd = -1
            raise SweepError(f"{self.path}: another sweep is writing this file") from None
        if new:
            _fsync_dir(self.path.parent)
        self.repaired_bytes = self._repair()
        self.fieldnames = self._header()

    def _existing_header(self) -> list[str] | None:
        """The header of an existing file, after checking it is ours; None for a missing or empty file."""
        try:
            with open(self.path, "rb") as fh:
                head = fh.read(1 << 16)
        except FileNotFoundError:
            return None
        if not head:
            return None
        line, newline, _ = head.partition(b"\n")
        ours = _csv_line(COLUMNS)
        if not newline:
            if ours.startswith(head):  # a header torn by a killed sweep
                return None
            raise SweepError(f"--out {self.path}: not a sweep table written by this runner (no header line); "
                             "nothing was changed. Write to a new file")
        try:
            header = next(csv.reader([line.decode("utf-8")]))
        except (UnicodeDecodeError, csv.Error, StopIteration):
            header = []
        need = [c for c in (*REQUIRED, "status", "error", "workload") if c not in header]
        if need:
            raise SweepError(
                f"--out {self.path}: not a sweep table written by this runner; its header lacks "
                f"{', '.join(need[:4])}{' ...' if len(need) > 4 else ''}. Nothing was changed; write to a new file"
            )
        return header

    def _repair(self) -> int:
        """Cut a trailing partial line; return the bytes removed."""
        size = os.fstat(self.fd).st_size
        if size == 0:
            return 0
        with open(self.path, "rb") as fh:
            data = fh.read()
        if data.endswith(b"\n"):
            return 0
        keep = data.rfind(b"\n") + 1  # 0 when even the header is torn
        os.ftruncate(self.fd, keep)
        os.fsync(self.fd)
        return size - keep

    def _header(self) -> list[str]:
        if os.fstat(self.fd).st_size == 0:
            self._write_line(_csv_line(COLUMNS))
            return list(COLUMNS)
        with open(self.path, newline="") as fh:
            return next(csv.reader(fh))

    def _write_line(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            n = os.write(self.fd, view)
            view = view[n:]
        os.fsync(self.fd)

    def rows(self) -> list[dict[str, str]]:
        """The rows already in the file, as text."""
        if not self.path.exists():
            return []
        with open(self.path, newline="") as fh:
            return list(csv.DictReader(fh))

    def done_keys(self) -> set[tuple]:
        """Run keys already in the file (ok and failed rows alike)."""
        return {config_key(r, r["hardware"]) for r in self.rows()}

    def drop_failed(self) -> int:
        """Remove failed rows (atomically: a new file replaces the old); return how many."""
        rows = self.rows()
        keep = [r for r in rows if r.get("status", "ok") != "failed"]
        if len(keep) == len(rows):
            return 0
        tmp = self.path.with_name(self.path.name + ".tmp")
        with open(tmp, "w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=self.fieldnames, lineterminator="\n")
            w.writeheader()
            w.writerows(keep)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.path)
        _fsync_dir(self.path.parent)
        # keep holding a lock on the file now at this path
        old = self.fd
        self.fd = os.open(self.path, os.O_RDWR | os.O_APPEND)
        fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.close(old)
        return len(rows) - len(keep)

    def append(self, row: dict) -> None:
        """Append one row: a single write of the whole line, then fsync."""
        self._write_line(_csv_line([_cell(row.get(c)) for c in self.fieldnames]))

    def close(self) -> None:
        """Release the lock and the file."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> SweepTable:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _csv_line(values: Iterable) -> bytes:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerow(list(values))
    return buf.getvalue().encode()


def _cell(v) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return "" if not math.isfinite(v) else repr(v)
    return " ".join(str(v).split())  # one line per row: no newlines inside a cell


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# --------------------------------------------------------------------------- the node
class Node:
    """What the sweep runs on: device kind, meter, names, idle power.

    Parameters
    ----------
    device : {"auto", "cpu", "cuda"}
    meter : {"auto", "nvml", "rapl", "estimate"}
    tdp_w, idle_fraction : float
        The estimate meter's parameters.
    powercap_root : path
        Where RAPL zones live.
    """

    def __init__(self, device: str = "auto", meter: str = "auto", tdp_w: float | None = None,
                 idle_fraction: float = meters.EstimateMonitor.IDLE_FRACTION,
                 powercap_root: str = meters.POWERCAP, sample_period_s: float = 0.1,
                 threads_per_proc: int = 1) -> None:
        self.gpus = meters.nvml_gpus()
        if device == "auto":
            device = "cuda" if len(self.gpus) else "cpu"
        if device == "cuda" and not len(self.gpus):
            raise SweepError(f"--device cuda, but no GPU is visible to NVML ({getattr(self.gpus, 'reason', 'none visible')})")
        self.device = device
        self.tdp_w, self.idle_fraction = tdp_w, idle_fraction
        self.powercap_root = powercap_root
        self.sample_period_s = sample_period_s
        self.threads_per_proc = int(threads_per_proc)
        self.why_estimate = ""
        if device == "cuda":
            if meter not in ("auto", "nvml"):
                raise SweepError(f"--meter {meter} cannot measure GPU runs; use nvml")
            self.meter = "nvml"
        elif meter in ("auto", "rapl"):
            try:
                meters.rapl_zones(powercap_root)
                self.meter = "rapl"
            except meters.MeterError as err:
                if meter == "rapl":
                    raise SweepError(str(err)) from None
                self.meter, self.why_estimate = "estimate", str(err)
        elif meter == "estimate":
            self.meter, self.why_estimate = "estimate", "asked for with --meter estimate"
        else:
            raise SweepError("--meter nvml needs a GPU; none is visible")
        self.cpu_name = meters.cpu_model_name()
        self.host = socket.gethostname()
        self.idle_w_by_device: dict[str, float] = {}
        self.idle_source = ""
        self.idle_measured_at = ""

    def device_names(self, n: int) -> list[str]:
        """Names of the devices an ``n``-device run uses."""
        if self.device == "cuda":
            return [self.gpus[i].name for i in range(min(n, len(self.gpus)))]
        return [self.cpu_name]

    def hardware(self, n: int) -> str:
        """The ``hardware`` value of an ``n``-device run (part of the run key)."""
        return "+".join(dict.fromkeys(self.device_names(n)))

    def fits(self, cfg: RunConfig) -> str:
        """Why ``cfg`` cannot run here ('' when it can)."""
        if self.device == "cuda" and cfg.n_gpus > len(self.gpus):
            return f"needs {cfg.n_gpus} GPUs, {len(self.gpus)} visible"
        return ""

    def monitor(self):
        """A monitor over the whole node, for the idle measurement."""
        if self.meter == "nvml":
            return meters.NVMLMonitor(self.gpus, sample_period_s=self.sample_period_s)
        if self.meter == "rapl":
            return meters.RAPLMonitor(root=self.powercap_root)
        return meters.EstimateMonitor(tdp_w=self.tdp_w, idle_fraction=self.idle_fraction)

    def measure_idle(self, seconds: float) -> None:
        """Measure idle power over ``seconds`` with nothing running; store it by device."""
        mon = self.monitor()
        try:
            mon.begin_window("idle", sync=False)
            time.sleep(seconds)
            m = mon.end_window("idle", sync=False)
        finally:
            mon.close()
        self.idle_w_by_device = {k: v / m.time_s for k, v in m.per_device_j.items()}
        self.idle_source = m.source
        self.idle_measured_at = _iso(m.started_at)

    def idle_power_w(self, n: int) -> float | None:
        """Idle power of the devices an ``n``-device run uses (the node's on CPU)."""
        if not self.idle_w_by_device:
            return None
        if self.meter == "nvml":
            return sum(self.idle_w_by_device.get(f"cuda:{i}", 0.0) for i in range(n))
        return sum(self.idle_w_by_device.values())


def _iso(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).isoformat(timespec="seconds")


# --------------------------------------------------------------------------- one launch
def _die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    """Ask Linux to send SIGTERM to the child when the sweep dies (even by SIGKILL)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except Exception:
        pass


def worker_command(cfg: RunConfig, result: Path, node: Node, measured_by: str, extra: Iterable[str] = ()) -> list[str]:
    """The torchrun command line for one configuration (a list: no shell)."""
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={cfg.n_gpus}",
        "-m", "bayes_energy.runner.worker",
        "--config", json.dumps(cfg.to_dict()), "--result", str(result),
        "--device", node.device, "--meter", node.meter, "--measured-by", measured_by,
        "--idle-fraction", repr(node.idle_fraction), "--powercap-root", str(node.powercap_root),
        "--sample-period-s", repr(node.sample_period_s), "--threads-per-proc", str(node.threads_per_proc),
    ]
    if node.tdp_w is not None:
        cmd += ["--tdp-w", repr(float(node.tdp_w))]
    return cmd + list(extra)


def worker_env(cfg: RunConfig, node: Node) -> dict[str, str]:
    """The environment of a launch: offline Hugging Face, PCI device order, threads per process."""
    env = dict(os.environ)
    pkg_root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join([pkg_root, *filter(None, [env.get("PYTHONPATH")])])
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("TRANSFORMERS_OFFLINE", "1")
    env.setdefault("TRANSFORMERS_VERBOSITY", "error")
    env.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")  # CUDA ordinals = NVML indices
    env["OMP_NUM_THREADS"] = str(node.threads_per_proc if node.device == "cpu" else 1)
    return env


def launch(cfg: RunConfig, node: Node, workdir: Path, timeout_s: float, measured_by: str = "per-rank",
           extra: Iterable[str] = (), log_name: str = "run") -> dict:
    """Run one configuration under torchrun.

    Returns
    -------
    dict
        The worker's result (``status == "ok"``), or ``{"status": "failed",
        "error": message}``; ``launch_s`` and the start and end times are
        always set.
    """
    result = workdir / f"{log_name}.json"
    log = workdir / f"{log_name}.log"
    for old in workdir.glob(f"{log_name}.json*"):
        old.unlink()
    t0, wall0 = time.perf_counter(), time.time()
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            worker_command(cfg, result, node, measured_by, extra), stdout=out, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, env=worker_env(cfg, node), start_new_session=True, preexec_fn=_die_with_parent,
        )
        try:
            rc = proc.wait(timeout=timeout_s)
            timed_out = False
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            rc, timed_out = proc.returncode, True
        except BaseException:  # Ctrl-C: take the workers down with us
            _kill_group(proc)
            raise
    times = {"launch_s": time.perf_counter() - t0, "started_at": _iso(wall0), "ended_at": _iso(time.time())}
    if timed_out:
        return {"status": "failed", "error": f"timeout after {timeout_s:g} s", **times}
    if result.exists():  # written atomically by rank 0 after every window closed
        res = {**json.loads(result.read_text()), **times}
        if rc != 0:  # a crash in teardown, after the measurement: keep it, say so
            note = f"torchrun exited with status {rc} after the result was written ({_failure_message(rc, result, log)})"
            res["notes"] = "; ".join(filter(None, [res.get("notes"), note]))
        return res
    return {"status": "failed", "error": _failure_message(rc, result, log), **times}


def _kill_group(proc: subprocess.Popen) -> None:
    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def _failure_message(rc: int, result: Path, log: Path) -> str:
    errs = sorted(result.parent.glob(result.name + ".rank*.err"))
    if errs:
        return errs[0].read_text().splitlines()[0][:500]
    text = log.read_text(errors="replace") if log.exists() else ""
    if rc is not None and rc < 0:
        return f"killed by signal {-rc}"
    if "SIGKILL" in text or "Signal 9" in text:
        return "a worker was killed by SIGKILL (out of host memory?)"
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    hits = [ln for ln in lines if "Error" in ln or "error" in ln]
    msg = (hits or lines or ["no output"])[-1]
    return f"exit status {rc}: {msg}"[:500]


# --------------------------------------------------------------------------- rows
def make_row(cfg: RunConfig, res: dict, node: Node, plan_name: str, shard_text: str) -> dict:
    """One sweep-table row from a configuration and its launch result."""
    from .. import __version__

    row: dict = {k: v for k, v in res.items() if k in COLUMNS}
    row.update(
        hardware=node.hardware(cfg.n_gpus), family=cfg.family, workload=cfg.workload,
        num_layers=cfg.num_layers, hidden_size=cfg.hidden_size, heads=cfg.heads, ff=cfg.ff, seq_len=cfg.seq_len,
        batch_size=cfg.batch_size, grad_accum=cfg.grad_accum, strategy=cfg.strategy, n_gpus=cfg.n_gpus,
        warmup=cfg.warmup, vocab_size=cfg.vocab_size, repeats=cfg.repeats,
        idle_power_w=node.idle_power_w(cfg.n_gpus), idle_source=node.idle_source, idle_measured_at=node.idle_measured_at,
        host=node.host, hardware_detail=f"{node.device}: {node.hardware(cfg.n_gpus)}",
        plan=plan_name, shard=shard_text, runner_version=__version__,
    )
    if res.get("status") == "ok":
        row["device_names"] = ";".join(res.get("device_names", []))
        row["meter"] = res.get("meter_meter", "")
        row["meter_devices"] = res.get("meter_devices") or res.get("meter_counter") or ""
        row["tdp_w"] = res.get("meter_tdp_w")
        row["idle_model_w"] = res.get("meter_idle_model_w")
        if res.get("hardware") and res["hardware"] != row["hardware"]:
            row["notes"] = "; ".join(filter(None, [res.get("notes"), f"worker saw {res['hardware']}"]))
    else:
        for c in _OUTCOME_COLUMNS:
            row[c] = None
        row["device_names"] = ";".join(node.device_names(cfg.n_gpus))
        row["device_count"] = cfg.n_gpus if node.device == "cuda" else meters.logical_cores()
        row["driver_version"] = node.gpus.driver_version if node.device == "cuda" else "none"
        row["torch_version"] = _dist_version("torch")
    row["status"] = res.get("status", "failed")
    row["error"] = res.get("error", "")
    return row


def check_row(row: dict) -> dict:
    """Validate an ok row against the schema; a row that breaks it becomes a failed row."""
    if row["status"] != "ok":
        return row
    import pandas as pd

    try:
        validate(pd.DataFrame([{c: row.get(c) for c in COLUMNS}]), source="measured row")
    except SchemaError as err:
        row = {**row, **{c: None for c in _OUTCOME_COLUMNS}, "status": "failed", "error": f"invalid measurement: {err}"}
    return row


def _dist_version(name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return ""


# --------------------------------------------------------------------------- the sweep
def _progress(total: int, disable: bool):
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover - tqdm is a runner dependency
        tqdm = None
    if tqdm is None or disable:
        class _Bar:
            def __init__(self) -> None:
                self.n = 0

            def set_description_str(self, s: str) -> None:
                print(f"[{self.n + 1}/{total}] {s}", file=sys.stderr, flush=True)

            def set_postfix_str(self, s: str) -> None:
                pass

            def update(self, k: int) -> None:
                self.n += k

            def close(self) -> None:
                pass

            @staticmethod
            def write(s: str) -> None:
                print(s, file=sys.stderr, flush=True)

        return _Bar()
    return tqdm(total=total, unit="config", dynamic_ncols=True, smoothing=0.1, file=sys.stderr)


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def run_sweep(plan: SweepPlan, out: str | os.PathLike, node: Node, shard_spec: tuple[int, int] = (0, 1),
              timeout_s: float | None = None, measured_by: str = "per-rank", idle_s: float = 3.0,
              retry_failed: bool = False, dry_run: bool = False, log_dir: str | None = None,
              no_progress: bool = False, plan_name: str = "") -> dict:
    """Measure every configuration of the plan's shard not yet in ``out``.

    Returns
    -------
    dict
        Counts: ``planned``, ``done_before``, ``ok``, ``failed``, ``unfit``, ``wall_s``.
    """
    t_start = time.perf_counter()
    i, n = shard_spec
    configs = shard(plan.configs, i, n)
    shard_text = f"{i}/{n}"
    summary = {"planned": len(configs), "done_before": 0, "ok": 0, "failed": 0, "unfit": 0, "wall_s": 0.0}
    with SweepTable(out, read_only=dry_run) as table:
        if node.meter == "estimate":
            tdp = meters.EstimateMonitor(tdp_w=node.tdp_w, idle_fraction=node.idle_fraction)
            _say(
                "NOTE: energy is an ESTIMATE, not a measurement (energy_source='estimate'): "
                f"{node.why_estimate}. Power = idle + (TDP - idle) x CPU utilisation of the run's processes, "
                f"with TDP = {tdp.tdp_w:g} W (--tdp-w) and idle = {tdp.idle_w:g} W (--idle-fraction) "
                f"on {tdp.cores} logical cores."
            )
        if table.repaired_bytes:
            _say(f"{out}: removed a partial last line ({table.repaired_bytes} bytes) left by an interrupted sweep")
        if retry_failed and not dry_run:
            k = table.drop_failed()
            if k:
                _say(f"{out}: removed {k} failed row(s) to run them again")
        done = table.done_keys()
        todo, unfit = [], []
        for cfg in configs:
            key = config_key(cfg, node.hardware(cfg.n_gpus))
            if key in done:
                summary["done_before"] += 1
            elif node.fits(cfg):
                unfit.append(f"{cfg.label}: {node.fits(cfg)}")
            else:
                todo.append(cfg)
        summary["unfit"] = len(unfit)
        if plan.skipped:
            _say(f"{plan.source}: {len(plan.skipped)} grid combination(s) left out, e.g. {plan.skipped[0]}")
        for u in unfit:
            _say(f"skipped (cannot run here) {u}")
        _say(
            f"{plan.source}: shard {shard_text}: {len(configs)} configurations, {summary['done_before']} already in {out}, "
            f"{len(todo)} to run on {node.hardware(1)} ({node.device}, meter {node.meter})"
        )
        if dry_run:
            for cfg in todo:
                print(cfg.label)
            summary["todo"] = len(todo)
            return summary
        if not todo:
            return summary
        node.measure_idle(idle_s)
        _say(f"idle power {node.idle_power_w(1):.2f} W ({node.idle_source}, {idle_s:g} s); recorded in idle_power_w, not subtracted")
        timeout = timeout_s or plan.timeout_s or DEFAULT_TIMEOUT_S
        workdir = Path(log_dir) if log_dir else scratch_dir(tempfile.gettempdir(), "bayes_energy_sweep_")
        workdir.mkdir(parents=True, exist_ok=True)
        bar = _progress(len(todo), no_progress)
        try:
            for k, cfg in enumerate(todo):
                bar.set_description_str(cfg.label)
                res = launch(cfg, node, workdir, timeout, measured_by, log_name=f"{i}-{k}")
                row = check_row(make_row(cfg, res, node, plan_name or Path(plan.source).name, shard_text))
                table.append(row)
                summary[row["status"]] += 1
                if row["status"] == "failed":
                    bar.write(f"FAILED {cfg.label}: {row['error']}")
                bar.update(1)
                bar.set_postfix_str(f"ok={summary['ok']} failed={summary['failed']}" + (" [estimate]" if node.meter == "estimate" else ""))
        finally:
            bar.close()
            if not log_dir:
                shutil.rmtree(workdir, ignore_errors=True)
    summary["wall_s"] = time.perf_counter() - t_start
    return summary


def _parser() -> Parser:
    p = Parser(
        prog="python -m bayes_energy.runner.sweep",
        description="Measure the configurations of a TOML plan and append them to a sweep table (CSV).",
    )
    p.add_argument("plan", help="the plan file (TOML)")
    p.add_argument("--out", required=True, help="the sweep table to write or resume (CSV)")
    p.add_argument("--shard", default="0/1", help="run shard i of n (0-based), e.g. $SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT")
    p.add_argument("--tdp-w", type=positive_float, default=None,
                   help="estimate meter: full-load CPU power in W (default 10 W per logical core)")
    p.add_argument("--idle-fraction", type=probability, default=meters.EstimateMonitor.IDLE_FRACTION,
                   help="estimate meter: idle power as a share of the TDP (default %(default)s)")
    p.add_argument("--timeout-s", type=positive_float, default=None,
                   help=f"per-configuration timeout (default: the plan's timeout_s, else {DEFAULT_TIMEOUT_S:g})")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    p.add_argument("--meter", choices=["auto", "nvml", "rapl", "estimate"], default="auto")
    p.add_argument("--measured-by", choices=["per-rank", "node"], default="per-rank",
                   help="GPU runs: each rank measures its own device, or local rank 0 the node's")
    p.add_argument("--sample-period-s", type=positive_float, default=0.1,
                   help="power sampling period for GPUs without the energy counter (default %(default)s)")
    p.add_argument("--threads-per-proc", type=positive_int, default=1,
                   help="CPU runs: intra-op threads per process; one process per core is a CPU 'device' (default 1)")
    p.add_argument("--idle-s", type=nonnegative_float, default=3.0, help="seconds of idle measurement before the sweep")
    p.add_argument("--powercap-root", default=meters.POWERCAP, help=argparse.SUPPRESS)
    p.add_argument("--retry-failed", action="store_true", help="measure failed rows again (they are removed first)")
    p.add_argument("--dry-run", action="store_true", help="list what would run, run nothing")
    p.add_argument("--log-dir", default=None, help="keep each launch's log and JSON result here")
    p.add_argument("--no-progress", action="store_true", help="plain lines instead of a progress bar")
    return p


def main(argv: list[str] | None = None) -> int:
    """The command line; returns the exit status."""
    args = _parser().parse_args(argv)
    try:
        plan = load_plan(args.plan)
        shard_spec = parse_shard(args.shard)
        node = Node(args.device, args.meter, args.tdp_w, args.idle_fraction, args.powercap_root, args.sample_period_s,
                    args.threads_per_proc)
        summary = run_sweep(
            plan, args.out, node, shard_spec, timeout_s=args.timeout_s, measured_by=args.measured_by,
            idle_s=args.idle_s, retry_failed=args.retry_failed, dry_run=args.dry_run, log_dir=args.log_dir,
            no_progress=args.no_progress, plan_name=Path(args.plan).name,
        )
    except (PlanError, SweepError, meters.MeterError) as err:
        return fail(err)
    except KeyboardInterrupt:
        _say("interrupted; rows written so far are kept, re-run the same command to resume")
        return 130
    if not args.dry_run:
        _say(
            f"done in {summary['wall_s']:.0f} s: {summary['ok']} ok, {summary['failed']} failed, "
            f"{summary['done_before']} already measured, {summary['unfit']} cannot run here -> {args.out}"
            + (" (energy is an ESTIMATE)" if node.meter == "estimate" else "")
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
