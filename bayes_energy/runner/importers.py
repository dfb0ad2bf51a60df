"""Bring existing energy logs into the sweep table: CodeCarbon and Zeus.

Users who already log with CodeCarbon or Zeus have the energy and time of
their runs, but not the configuration the models need. These readers join a
log to a table of run configurations and return validated sweep-table rows
whose ``energy_source`` says where the energy came from (``codecarbon`` or
``zeus``).

**The join key.** The configurations table has one row per run and a column
named like the log's key column; its values must match exactly (after
stripping spaces):

* CodeCarbon: ``run_id`` by default (a UUID CodeCarbon makes per tracker;
  ``tracker.run_id`` after ``start()``), or ``on="project_name"`` (or any
  other log column) when each configuration has its own project name;
* Zeus: ``window_name``, the name given to ``begin_window``/``end_window``.

Besides the key, a configuration row gives the schema's configuration
columns: ``family``, ``num_layers``, ``hidden_size``, ``heads``, ``ff``,
``seq_len``, ``batch_size``, ``grad_accum`` (default 1), ``tokens`` (tokens the
logged run processed), ``strategy``, ``n_gpus``, and ``hardware`` (for
CodeCarbon it may be left out: it is then read from the log's ``gpu_model``,
``"4 x NVIDIA A100-SXM4-40GB"``, or ``cpu_model`` on CPU-only runs). Other
columns (``workload``, ``group``, ...) pass through. Outcome columns
(``time_s``, ``energy_j``, ``energy_source``) come from the log only.

A log row without a configuration is refused with a
:class:`~bayes_energy.schema.SchemaError` naming the file, its line(s) and
the key values; so are duplicated configuration keys. Configurations
without a log row are left out. Several log rows that join to the same run
key are averaged into one row with ``repeats`` (weighted by any ``repeats``
the configurations give) and ``time_s_sd``/``energy_j_sd``; pass
``aggregate=False`` to refuse them instead.

**CodeCarbon** (``emissions.csv``, versions 2 and 3): ``duration`` (s) →
``time_s``; ``energy_consumed`` (kWh, CPU + GPU + RAM) × 3.6e6, divided by
the logged ``pue`` (CodeCarbon multiplies energies by the PUE it was given;
the sweep table holds device energy, and PUE is applied when converting to
carbon or cost) → ``energy_j``. CodeCarbon writes the running totals of a
tracker at each ``flush()`` and at ``stop()``, so rows sharing a ``run_id``
are snapshots of one run: the longest (the last) is kept. Its CPU share is
measured with RAPL where readable and otherwise modelled from a TDP; the log
does not say which, and ``tracking_mode`` (``machine`` or ``process``) is kept
so the reader can tell machine-wide totals apart.

**Zeus** (``ZeusMonitor(log_file=...)``): the CSV Zeus writes, header
``start_time,window_name,elapsed_time,gpu0_energy,gpu1_energy,...``, one line
per ended window: Unix start time (s), the window name, seconds, and joules
per monitored GPU (CUDA index). ``energy_j`` is the sum over the GPU columns
(Zeus's ``total_energy``); a window of 0 J (shorter than the counter's update
period) is refused. The number of GPU columns must equal the configuration's
``n_gpus``: Zeus monitors every visible GPU by default, and idle ones would
be counted. :func:`load_zeus` also takes the ``Measurement`` objects that
``end_window`` returns, keyed by window name; their energy is the GPU sum, or
CPU package plus DRAM when no GPU was monitored.

Pandas is imported here as it already is by the runner (through
:mod:`bayes_energy.schema`); nothing imports PyMC.
"""

from __future__ import annotations

import datetime as dt
import math
import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import pandas as pd

from ..datasets import read_csv
from ..schema import KWH_TO_J, REQUIRED, SchemaError, run_key, validate, validate_configs

__all__ = ["load_codecarbon", "load_zeus", "read_zeus_log"]

_GPU_COL = re.compile(r"^gpu(\d+)_energy$")
_OUTCOME_IN_CONFIG = ("time_s", "energy_j", "energy_source")
_HARDWARE_RE = re.compile(r"^\s*(\d+)\s*x\s*(.+?)\s*$")


# --------------------------------------------------------------------------- shared
def _table(obj: Any, what: str) -> tuple[pd.DataFrame, str]:
    if isinstance(obj, pd.DataFrame):
        return obj.copy().reset_index(drop=True), f"{what} (DataFrame)"
    return read_csv(obj, what), str(obj)


def _where(lines: Iterable[str], limit: int = 5) -> str:
    items = list(dict.fromkeys(lines))
    more = f" and {len(items) - limit} more" if len(items) > limit else ""
    return ", ".join(items[:limit]) + more


def _numbers(df: pd.DataFrame, col: str, where: pd.Series, source: str, positive: bool = True) -> pd.Series:
    num = pd.to_numeric(df[col], errors="coerce")
    bad = num.isna() | ~np.isfinite(num.fillna(0.0)) | ((num <= 0) if positive else (num < 0))
    if bad.any():
        first = df[col][bad].iloc[0]
        need = "a positive number" if positive else "a number >= 0"
        raise SchemaError(f"{source}: {_where(where[bad])}, column '{col}': expected {need}, got {first!r}")
    return num.astype(float)


def _iso(t: float) -> str:
    return dt.datetime.fromtimestamp(float(t), dt.timezone.utc).isoformat(timespec="seconds")


def _join(entries: pd.DataFrame, configs: Any, key: str, log_source: str, aggregate: bool) -> pd.DataFrame:
    """Join log entries (``key``, ``time_s``, ``energy_j``, ``energy_source``, ``_where``...) to configurations."""
    cfg, csrc = _table(configs, "run configurations")
    if key not in cfg.columns:
        raise SchemaError(
            f"{csrc}: no column '{key}'; the configurations are joined to {log_source} on '{key}', "
            f"so they need a '{key}' column with the log's values"
        )
    clash = [c for c in _OUTCOME_IN_CONFIG if c in cfg.columns]
    if clash:
        raise SchemaError(f"{csrc}: column(s) {', '.join(clash)}: outcomes come from {log_source}; remove them from the configurations")
    cline = pd.Series([f"line {i + 2}" for i in range(len(cfg))]) if not csrc.endswith("(DataFrame)") else pd.Series(
        [f"row {i}" for i in range(len(cfg))])
    ckey = cfg[key].astype("string").str.strip()
    empty = ckey.isna() | (ckey == "")
    if empty.any():
        raise SchemaError(f"{csrc}: {_where(cline[empty])}, column '{key}': expected a key value, got a missing value")
    dup = ckey.duplicated(keep=False)
    if dup.any():
        raise SchemaError(
            f"{csrc}: {_where(cline[dup])}, column '{key}': expected one configuration per key, "
            f"got {ckey[dup].iloc[0]!r} more than once"
        )
    if "heads" not in cfg.columns:
        raise SchemaError(f"{csrc}: missing column 'heads'; a sweep-table row needs the attention heads")
    cfg[key] = ckey.astype(str)
    has_hw = "hardware" in cfg.columns
    check = cfg.copy()
    if not has_hw:
        check["hardware"] = "from the log"
    else:
        hw_empty = check["hardware"].isna() | (check["hardware"].astype(str).str.strip() == "")
        check.loc[hw_empty, "hardware"] = "from the log"
    row_offset = 2 if not csrc.endswith("(DataFrame)") else 0
    validate_configs(check, source=csrc, row_offset=row_offset)  # names the configuration's line

    ekey = entries[key].astype("string").str.strip()
    unmatched = ~ekey.isin(set(cfg[key]))
    if unmatched.any():
        shown = ", ".join(repr(v) for v in list(dict.fromkeys(ekey[unmatched]))[:3])
        raise SchemaError(
            f"{log_source}: {_where(entries['_where'][unmatched])}, column '{key}': no configuration with {key} "
            f"{shown} in {csrc}; every logged run needs a configuration row"
        )
    entries = entries.assign(**{key: ekey.astype(str)})
    if "grad_accum" not in cfg.columns:
        cfg["grad_accum"] = 1
    merged = entries.merge(cfg, on=key, how="left", suffixes=("", "_config"))
    hw_from_log = merged.pop("_hardware") if "_hardware" in merged.columns else pd.Series([""] * len(merged))
    if not has_hw:
        merged["hardware"] = hw_from_log
    else:
        missing = merged["hardware"].isna() | (merged["hardware"].astype(str).str.strip() == "")
        merged.loc[missing, "hardware"] = hw_from_log[missing]
    no_hw = merged["hardware"].isna() | (merged["hardware"].astype(str).str.strip().isin(["", "nan"]))
    if no_hw.any():
        raise SchemaError(
            f"{log_source}: {_where(merged['_where'][no_hw])}: no hardware in the configuration and none in the log; "
            f"add a 'hardware' column to {csrc}"
        )
    if "repeats" not in merged.columns:
        merged["repeats"] = 1
    if "n_gpus_logged" in merged.columns:
        n_cfg = pd.to_numeric(merged["n_gpus"], errors="coerce")
        off = merged["n_gpus_logged"].notna() & (merged["n_gpus_logged"] != n_cfg)
        if off.any():
            i = int(np.flatnonzero(off.to_numpy())[0])
            raise SchemaError(
                f"{log_source}: {_where(merged['_where'][off])}: the window measured {int(merged['n_gpus_logged'].iloc[i])} "
                f"GPU(s) but its configuration says n_gpus={merged['n_gpus'].iloc[i]}; idle GPUs would be counted. "
                "Monitor only the run's GPUs (ZeusMonitor(gpu_indices=[...]))"
            )
        merged = merged.drop(columns="n_gpus_logged")
    merged = merged.drop(columns="_where")
    if aggregate:
        merged = _aggregate(merged, key)
    out = validate(merged, source=f"{log_source} joined to {csrc}", row_offset=0)
    first = [c for c in REQUIRED] + [c for c in ("workload", key) if c in out.columns]
    return out[first + [c for c in out.columns if c not in first]]


def _aggregate(df: pd.DataFrame, key: str) -> pd.DataFrame:
    """One row per run key: repeats-weighted means of time, energy and tokens, their spread, the keys joined."""
    cols = run_key(df)
    norm = df[cols].astype(str).apply(lambda s: s.str.strip().str.lower())
    groups = norm.groupby(cols, sort=False, dropna=False).indices
    rows = []
    for idx in groups.values():
        part = df.iloc[list(idx)]
        if len(part) == 1:
            rows.append(part.iloc[0].to_dict())
            continue
        w = pd.to_numeric(part["repeats"], errors="coerce").fillna(1.0).to_numpy(dtype=float)
        row = part.iloc[0].to_dict()
        for c in ("time_s", "energy_j", "tokens"):
            x = pd.to_numeric(part[c], errors="coerce").to_numpy(dtype=float)
            row[c] = float(np.sum(x * w) / np.sum(w))
        for c in ("time_s", "energy_j"):
            x = pd.to_numeric(part[c], errors="coerce").to_numpy(dtype=float)
            row[f"{c}_sd"] = float(np.std(x, ddof=1))
        row["repeats"] = int(np.sum(w))
        row[key] = ";".join(part[key].astype(str))
        if "started_at" in part.columns:
            row["started_at"] = min(part["started_at"].astype(str))
        if "notes" in part.columns:
            row["notes"] = "; ".join(dict.fromkeys(n for n in part["notes"].astype(str) if n and n != "nan"))
        rows.append(row)
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------- CodeCarbon
def _hardware_from_codecarbon(log: pd.DataFrame) -> pd.Series:
    """``gpu_model`` without its ``"N x "`` count (one GPU model only), else ``cpu_model``; '' when neither."""
    out = pd.Series([""] * len(log), dtype=object)
    for i in range(len(log)):
        gpu = str(log["gpu_model"].iloc[i]) if "gpu_model" in log.columns and pd.notna(log["gpu_model"].iloc[i]) else ""
        cpu = str(log["cpu_model"].iloc[i]) if "cpu_model" in log.columns and pd.notna(log["cpu_model"].iloc[i]) else ""
        m = _HARDWARE_RE.match(gpu)
        if m and " x " not in m.group(2):
            out.iloc[i] = m.group(2)
        elif gpu.strip() and " x " not in gpu:
            out.iloc[i] = gpu.strip()
        elif not gpu.strip() and cpu.strip():
            out.iloc[i] = cpu.strip()
    return out


def load_codecarbon(emissions_csv: str | os.PathLike | pd.DataFrame, configs: str | os.PathLike | pd.DataFrame,
                    *, on: str = "run_id", aggregate: bool = True) -> pd.DataFrame:
    """CodeCarbon's ``emissions.csv`` joined to run configurations, as a validated sweep table.

    Parameters
    ----------
    emissions_csv : path or pandas.DataFrame
        CodeCarbon's output file (``EmissionsTracker(output_file=...)``).
    configs : path or pandas.DataFrame
        One configuration per run, with a column named ``on`` (see the module
        docstring for the columns).
    on : str, default "run_id"
        The join column, in both tables (``run_id``, ``project_name``, ...).
    aggregate : bool, default True
        Average runs with the same run key into one row with ``repeats``.

    Returns
    -------
    pandas.DataFrame
        Sweep-table rows with ``energy_source = "codecarbon"``, plus ``on``,
        ``started_at`` (CodeCarbon's ``timestamp``), ``pue``, ``tracking_mode``,
        ``codecarbon_version`` and ``source_file``.

    Raises
    ------
    SchemaError
        Naming the file, line(s) and column: missing columns, non-positive
        duration or energy, a log row without a configuration, a duplicated
        configuration key, a configuration that breaks the schema.

    Examples
    --------
    >>> load_codecarbon("emissions.csv", "runs.csv")  # doctest: +SKIP
    """
    log, src = _table(emissions_csv, "CodeCarbon emissions log")
    missing = [c for c in (on, "duration", "energy_consumed") if c not in log.columns]
    if missing:
        raise SchemaError(
            f"{src}: missing column(s) {', '.join(missing)}; expected CodeCarbon's emissions.csv "
            "(timestamp, project_name, run_id, duration, energy_consumed, ...)"
        )
    if log.empty:
        raise SchemaError(f"{src}: the log has no rows")
    offset = 0 if src.endswith("(DataFrame)") else 2
    where = pd.Series([f"line {i + offset}" if offset else f"row {i}" for i in range(len(log))])
    keys = log[on].astype("string").str.strip()
    empty = keys.isna() | (keys == "")
    if empty.any():
        raise SchemaError(f"{src}: {_where(where[empty])}, column '{on}': expected a key value, got a missing value")
    duration = _numbers(log, "duration", where, src)
    energy_kwh = _numbers(log, "energy_consumed", where, src)
    pue = _numbers(log, "pue", where, src) if "pue" in log.columns else pd.Series(1.0, index=log.index)
    keep = np.ones(len(log), dtype=bool)
    notes = pd.Series([""] * len(log), dtype=object)
    if "run_id" in log.columns:
        rid = log["run_id"].astype(str).str.strip()
        last = duration.groupby(rid).transform("max")
        snap = duration < last
        counts = rid.map(rid.value_counts())
        keep = ~snap.to_numpy()
        # two snapshots of equal length: keep the later line
        longest = ~snap
        dup_last = pd.Series(False, index=log.index)
        dup_last[longest] = rid[longest].duplicated(keep="last")
        keep &= ~dup_last.to_numpy()
        notes[counts > 1] = "kept the last of " + counts[counts > 1].astype(str) + " CodeCarbon snapshots of this run_id"
    pue_note = pue.map(lambda p: "" if p == 1.0 else f"CodeCarbon's PUE {p:g} divided out")
    notes = (notes + "; " + pue_note).str.strip("; ")
    entries = pd.DataFrame({
        on: keys.astype(str),
        "time_s": duration,
        "energy_j": energy_kwh * KWH_TO_J / pue,
        "energy_source": "codecarbon",
        "started_at": log["timestamp"].astype(str) if "timestamp" in log.columns else "",
        "pue": pue,
        "notes": notes,
        "_hardware": _hardware_from_codecarbon(log),
        "_where": where,
    })
    for c in ("tracking_mode", "codecarbon_version", "country_iso_code"):
        if c in log.columns and c != on:
            entries[c] = log[c].to_numpy()
    if on != "run_id" and "run_id" in log.columns:
        entries["run_id"] = log["run_id"].astype(str).to_numpy()
    entries = entries[keep].reset_index(drop=True)
    out = _join(entries, configs, on, src, aggregate)
    out["source_file"] = os.path.basename(src) if not src.endswith("(DataFrame)") else ""
    return out


# --------------------------------------------------------------------------- Zeus
def read_zeus_log(path: str | os.PathLike | pd.DataFrame) -> pd.DataFrame:
    """A Zeus window log, one row per window: ``window_name``, ``started_at``, ``time_s``, ``energy_j``, ``n_gpus_logged``.

    Parameters
    ----------
    path : path or pandas.DataFrame
        The CSV that ``ZeusMonitor(log_file=path)`` writes
        (``start_time,window_name,elapsed_time,gpu<i>_energy...``).

    Raises
    ------
    SchemaError
        Naming the file and line: other columns, no GPU column, a
        non-positive elapsed time, a negative or all-zero energy.
    """
    raw, src = _table(path, "Zeus window log")
    missing = [c for c in ("start_time", "window_name", "elapsed_time") if c not in raw.columns]
    gpu_cols = sorted((c for c in raw.columns if _GPU_COL.match(c)), key=lambda c: int(_GPU_COL.match(c).group(1)))
    if missing:
        raise SchemaError(
            f"{src}: missing column(s) {', '.join(missing)}; expected the CSV that ZeusMonitor(log_file=...) writes: "
            "start_time,window_name,elapsed_time,gpu0_energy,..."
        )
    if not gpu_cols:
        raise SchemaError(f"{src}: no gpu<i>_energy column; Zeus logs GPU energy only, and this log has none")
    if raw.empty:
        raise SchemaError(f"{src}: the log has no windows")
    offset = 0 if src.endswith("(DataFrame)") else 2
    where = pd.Series([f"line {i + offset}" if offset else f"row {i}" for i in range(len(raw))])
    time_s = _numbers(raw, "elapsed_time", where, src)
    start = _numbers(raw, "start_time", where, src)
    energy = sum(_numbers(raw, c, where, src, positive=False) for c in gpu_cols)
    zero = energy <= 0
    if zero.any():
        raise SchemaError(
            f"{src}: {_where(where[zero])}: 0 J on every GPU; the window was shorter than the NVML counter's "
            "update period (Zeus warned). Measure a longer window, or use ZeusMonitor(approx_instant_energy=True)"
        )
    names = raw["window_name"].astype("string").str.strip()
    if (names.isna() | (names == "")).any():
        bad = names.isna() | (names == "")
        raise SchemaError(f"{src}: {_where(where[bad])}, column 'window_name': expected a window name, got a missing value")
    return pd.DataFrame({
        "window_name": names.astype(str),
        "started_at": start.map(_iso),
        "time_s": time_s,
        "energy_j": energy.astype(float),
        "n_gpus_logged": len(gpu_cols),
        "meter_devices": ";".join(c.removesuffix("_energy") for c in gpu_cols),
        "_where": where,
    })


def _from_measurements(windows: Mapping | Iterable) -> pd.DataFrame:
    items = list(windows.items()) if isinstance(windows, Mapping) else list(windows)
    rows = []
    for name, m in items:
        where = f"window {str(name)!r}"
        t = getattr(m, "time", None)
        gpu = dict(getattr(m, "gpu_energy", None) or {})
        cpu = dict(getattr(m, "cpu_energy", None) or {})
        dram = dict(getattr(m, "dram_energy", None) or {})
        if t is None or not isinstance(t, (int, float)) or not math.isfinite(t) or t <= 0:
            raise SchemaError(f"Zeus measurements: {where}: expected a positive 'time' in seconds, got {t!r}")
        parts = gpu if gpu else {**{f"cpu{k}": v for k, v in cpu.items()}, **{f"dram{k}": v for k, v in dram.items()}}
        if not parts:
            raise SchemaError(f"Zeus measurements: {where}: no GPU, CPU or DRAM energy in the measurement")
        energy = float(sum(parts.values()))
        if not math.isfinite(energy) or energy <= 0:
            raise SchemaError(
                f"Zeus measurements: {where}: {energy:g} J; the window was shorter than the counter's update period "
                "or the meter failed"
            )
        rows.append({
            "window_name": str(name).strip(), "started_at": "", "time_s": float(t), "energy_j": energy,
            "n_gpus_logged": len(gpu) if gpu else np.nan,
            "meter_devices": ";".join(f"gpu{k}" for k in gpu) if gpu else ";".join(parts),
            "_where": where,
        })
    if not rows:
        raise SchemaError("Zeus measurements: no window given")
    return pd.DataFrame(rows)


def load_zeus(windows: str | os.PathLike | pd.DataFrame | Mapping | Iterable, configs: str | os.PathLike | pd.DataFrame,
              *, aggregate: bool = True) -> pd.DataFrame:
    """Zeus measurement windows joined to run configurations (on ``window_name``), as a validated sweep table.

    Parameters
    ----------
    windows : path, pandas.DataFrame, mapping or iterable of pairs
        A Zeus log file (:func:`read_zeus_log`), or ``{window_name:
        Measurement}`` / ``[(window_name, Measurement), ...]`` as returned by
        ``ZeusMonitor.end_window``.
    configs : path or pandas.DataFrame
        One configuration per window name, in a ``window_name`` column.
    aggregate : bool, default True
        Average windows with the same run key (e.g. one per epoch) into one
        row with ``repeats``.

    Returns
    -------
    pandas.DataFrame
        Sweep-table rows with ``energy_source = "zeus"``, ``window_name``,
        ``started_at``, ``meter_devices`` and ``source_file``.

    Raises
    ------
    SchemaError
        Naming the file and line (or window): see :func:`read_zeus_log`; a
        window without a configuration; a window that measured another
        number of GPUs than its configuration's ``n_gpus``.
    """
    if isinstance(windows, (str, os.PathLike, pd.DataFrame)):
        entries = read_zeus_log(windows)
        src = "Zeus window log (DataFrame)" if isinstance(windows, pd.DataFrame) else str(windows)
    else:
        entries = _from_measurements(windows)
        src = "Zeus measurements"
    entries["energy_source"] = "zeus"
    entries["meter"] = "zeus"
    out = _join(entries, configs, "window_name", src, aggregate)
    out["source_file"] = os.path.basename(src) if isinstance(windows, (str, os.PathLike)) else ""
    return out
