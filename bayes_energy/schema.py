"""The sweep table: one tidy schema for measured runs.

Every part of the package speaks this table. The runner writes it, the
dataset loaders map published data onto it and the models read it.

One row is one measured run, or one configuration aggregated over
``repeats`` runs. Units are in the column names.

=================  =======  ====================================================
column             kind     meaning
=================  =======  ====================================================
hardware           str      device model, e.g. ``NVIDIA A100-SXM4-40GB``
family             str      model family, lower case (``bert``, ``gpt``)
num_layers         int      Transformer depth L
hidden_size        int      hidden width d
heads              int      attention heads
ff                 int      feed-forward width
seq_len            int      sequence length S (tokens per example)
batch_size         int      examples per step and process B
grad_accum         int      gradient-accumulation steps
tokens             float    tokens processed in the measured window (a mean
                            when the row aggregates repeats)
strategy           str      ``single``, ``ddp``, ``fsdp`` or ``tp``
n_gpus             int      devices (or processes) used; 1 for ``single``
time_s             float    wall time of the measured window, seconds
energy_j           float    energy of the measured window, joules
energy_source      str      ``nvml``, ``nvml-sampled``, ``rapl``, ``estimate``,
                            ``codecarbon``, ``zeus`` or a published dataset's
                            label (see :data:`ENERGY_SOURCES`)
repeats            int      runs aggregated into the row
=================  =======  ====================================================

Optional columns with a fixed meaning: ``workload`` (extra key that keeps
otherwise equal configurations apart, e.g. a task name), ``group`` (the
configuration-family key used for grouped cross-validation), ``status``
(``ok`` or ``failed``), ``error`` (why a run failed), ``idle_power_w`` (idle
power measured before the sweep, recorded and never subtracted) and
``measured_by`` (``node`` or ``per-rank``: who read the meters under
torchrun). The runner adds provenance columns (host, device names and count,
driver and torch versions, meter, timestamps); see ``docs/runner.md``.

Derived columns (:func:`add_efficiency`): ``speedup`` is the throughput of a
run over the throughput of the matching single-device run, and
``efficiency`` = ``speedup / n_gpus`` (the paper's :math:`\\eta_h`).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pandas as pd

#: Joules per kilowatt-hour: the one unit conversion of the package (tables hold joules and seconds).
KWH_TO_J = 3.6e6

__all__ = [
    "KWH_TO_J",
    "SchemaError",
    "STRATEGIES",
    "REQUIRED",
    "RUN_KEY",
    "validate",
    "validate_configs",
    "add_efficiency",
    "data_notes",
    "LIMITS",
    "CONFIG_COLUMNS",
    "ENERGY_SOURCES",
]

#: Parallel strategies, in the order used for model coordinates.
STRATEGIES: tuple[str, ...] = ("single", "ddp", "fsdp", "tp")

#: Columns every sweep table must have, with their kind.
REQUIRED: dict[str, str] = {
    "hardware": "str", "family": "str",
    "num_layers": "int", "hidden_size": "int", "heads": "int", "ff": "int",
    "seq_len": "int", "batch_size": "int", "grad_accum": "int", "tokens": "float",
    "strategy": "str", "n_gpus": "int",
    "time_s": "float", "energy_j": "float", "energy_source": "str", "repeats": "int",
}

#: Physically plausible ranges (inclusive) of numeric columns. A value outside is a
#: unit or transcription error (1e300 J, 1e-300 J, 10 million layers), never a run.
#: Energy: 1 uJ to 1 PJ (about 280 GWh); time: 1 us to 30 years; tokens: up to 1e15.
LIMITS: dict[str, tuple[float, float]] = {
    "energy_j": (1e-6, 1e15), "time_s": (1e-6, 1e9), "tokens": (1.0, 1e15),
    "num_layers": (1, 10_000), "hidden_size": (1, 1_000_000), "heads": (1, 100_000), "ff": (1, 10_000_000),
    "seq_len": (1, 10_000_000), "batch_size": (1, 10_000_000), "grad_accum": (1, 1_000_000),
    "n_gpus": (1, 1_000_000), "repeats": (1, 1_000_000),
}

#: The ``energy_source`` values the package writes, and which meter each comes from.
#: ``estimate`` is never a measurement; ``codecarbon`` may hold CodeCarbon's own TDP model of the
#: CPU share. The column is not restricted to these.
ENERGY_SOURCES: dict[str, str] = {
    "nvml": "NVML total-energy counter, difference over the window (NVIDIA Volta and newer)",
    "nvml-sampled": "NVML board power sampled by a thread, trapezoid rule (GPUs without the counter)",
    "rapl": "Linux powercap RAPL counters, CPU packages and DRAM",
    "estimate": "no meter: CPU power modelled from a TDP and the measured CPU utilisation",
    "codecarbon": "a CodeCarbon log (CPU + GPU + RAM; its CPU share is RAPL or a TDP model, PUE divided out)",
    "zeus": "a Zeus window log or Measurement (GPU energy, NVML counter or sampled power)",
}

#: Columns that describe a configuration before it runs (``heads`` optional for candidates).
CONFIG_COLUMNS: dict[str, str] = {
    c: REQUIRED[c] for c in ("hardware", "family", "num_layers", "hidden_size", "ff", "seq_len", "batch_size",
                             "grad_accum", "tokens", "strategy", "n_gpus")
}

#: Columns that identify a run; ``workload`` joins them when present.
RUN_KEY: tuple[str, ...] = (
    "hardware", "family", "num_layers", "hidden_size", "heads", "ff",
    "seq_len", "batch_size", "grad_accum", "strategy", "n_gpus",
)

#: Outcome columns, allowed to be empty on failed rows.
OUTCOMES: tuple[str, ...] = ("time_s", "energy_j", "tokens", "energy_source", "repeats")

#: Columns a caller may not supply for pre-run prediction (measured after the run).
POST_RUN: tuple[str, ...] = ("time_s", "energy_j", "speedup", "efficiency")


class SchemaError(ValueError):
    """A sweep table breaks the schema.

    The message names the source (file), the offending row(s), the column and
    what was expected, so the user can go straight to the cell.
    """


def _rows(index: Iterable, limit: int = 5) -> str:
    idx = list(index)
    shown = ", ".join(str(i) for i in idx[:limit])
    more = f" and {len(idx) - limit} more" if len(idx) > limit else ""
    return f"row{'s' if len(idx) > 1 else ''} {shown}{more}"


def run_key(df: pd.DataFrame) -> list[str]:
    """Columns that identify a run in ``df`` (:data:`RUN_KEY` plus ``workload``)."""
    return list(RUN_KEY) + (["workload"] if "workload" in df.columns else [])


def validate(df: pd.DataFrame, source: str = "sweep table", row_offset: int = 2) -> pd.DataFrame:
    """Check a sweep table and return it with canonical dtypes.

    Parameters
    ----------
    df : pandas.DataFrame
        The table, one row per run.
    source : str, default "sweep table"
        Name used in error messages, usually the file path.
    row_offset : int, default 2
        Added to the positional row index in messages. The default makes the
        number match the line in a CSV file with one header line.

    Returns
    -------
    pandas.DataFrame
        A copy with integer, float and string columns cast, ``family`` and
        ``strategy`` lower case. Rows with ``status == "failed"`` are kept
        and exempt from outcome checks.

    Raises
    ------
    SchemaError
        On missing columns, non-numeric or missing values, non-positive
        energy, time or sizes, unknown strategies, ``n_gpus < 1``, ``single``
        runs on more than one device, or duplicated run keys.

    Examples
    --------
    >>> from bayes_energy.simulate import tiny_sweep
    >>> validate(tiny_sweep()).shape[0] > 0
    True
    """
    if not isinstance(df, pd.DataFrame):
        raise SchemaError(f"{source}: expected a pandas DataFrame, got {type(df).__name__}")
    missing = [c for c in REQUIRED if c not in df.columns]
    if missing:
        raise SchemaError(
            f"{source}: missing required column(s) {', '.join(missing)}; "
            f"a sweep table needs {', '.join(REQUIRED)}"
        )
    if len(df) == 0:
        raise SchemaError(f"{source}: the table has no rows")
    out = df.copy().reset_index(drop=True)
    line = pd.RangeIndex(len(out)) + row_offset
    if "status" in out.columns:
        status = out["status"].fillna("ok").astype(str).str.strip().str.lower()
        bad = ~status.isin(["ok", "failed"])
        if bad.any():
            raise SchemaError(
                f"{source}: {_rows(line[bad.to_numpy()])}, column 'status': expected 'ok' or "
                f"'failed', got {out['status'][bad].iloc[0]!r}"
            )
        out["status"] = status
        ok = (status == "ok").to_numpy()
    else:
        ok = np.ones(len(out), dtype=bool)

    for col in REQUIRED:
        _check_column(out, col, REQUIRED[col], ok if col in OUTCOMES else np.ones(len(out), dtype=bool),
                      line, source, nullable_int=bool((~ok).any()))
    _check_levels(out, line, source)
    key = run_key(out)
    dup = out.duplicated(subset=key, keep=False).to_numpy()
    if dup.any():
        raise SchemaError(
            f"{source}: {_rows(line[dup])}, columns {', '.join(key)}: expected one row per run key "
            "(aggregate repeats into one row with 'repeats'), got duplicates"
        )
    for col in ("speedup", "efficiency"):
        if col in out.columns:
            num = pd.to_numeric(out[col], errors="coerce")
            bad = ((num <= 0) | (out[col].notna() & num.isna())).to_numpy() & ok
            if bad.any():
                raise SchemaError(
                    f"{source}: {_rows(line[bad])}, column '{col}': expected a positive number or empty, got {out[col][bad].iloc[0]!r}"
                )
            out[col] = num.astype(float)
    return out


def _check_column(out: pd.DataFrame, col: str, kind: str, checked: np.ndarray, line, source: str,
                  nullable_int: bool = False) -> None:
    """Check one column of ``out`` in place (cast it) for the rows in ``checked``."""
    values = out[col]
    if kind == "str":
        empty = values.isna() | (values.astype(str).str.strip().isin(["", "nan", "None", "<NA>"]))
        bad = empty.to_numpy() & checked
        if bad.any():
            raise SchemaError(
                f"{source}: {_rows(line[bad])}, column '{col}': expected a non-empty text value, got a missing value"
            )
        out[col] = values.astype("string").str.strip().astype(object)
        out.loc[~empty, col] = out.loc[~empty, col].astype(str)
        return
    if values.dtype == bool:
        raise SchemaError(f"{source}: column '{col}': expected numbers, got true/false values")
    num = pd.to_numeric(values, errors="coerce")
    nonnum = (num.isna() & values.notna()).to_numpy() & checked
    if nonnum.any():
        first = values[nonnum].iloc[0]
        raise SchemaError(f"{source}: {_rows(line[nonnum])}, column '{col}': expected a number, got {first!r}")
    nan = num.isna().to_numpy() & checked
    if nan.any():
        raise SchemaError(f"{source}: {_rows(line[nan])}, column '{col}': expected a number, got a missing value (NaN)")
    num = num.astype(float)
    inf = ~np.isfinite(num.fillna(1.0).to_numpy()) & checked
    if inf.any():
        raise SchemaError(f"{source}: {_rows(line[inf])}, column '{col}': expected a finite number, got {num[inf].iloc[0]}")
    if kind == "int":
        frac = (num.notna() & (num != np.round(num))).to_numpy() & checked
        if frac.any():
            raise SchemaError(
                f"{source}: {_rows(line[frac])}, column '{col}': expected a whole number, got {num[frac].iloc[0]}"
            )
        small = (num.notna() & (num < 1)).to_numpy() & checked
        if small.any():
            what = "at least 1 device" if col == "n_gpus" else "a positive whole number"
            raise SchemaError(f"{source}: {_rows(line[small])}, column '{col}': expected {what}, got {num[small].iloc[0]:g}")
    else:
        nonpos = (num.notna() & (num <= 0)).to_numpy() & checked
        if nonpos.any():
            raise SchemaError(
                f"{source}: {_rows(line[nonpos])}, column '{col}': expected a positive value, got {num[nonpos].iloc[0]:g}"
            )
    if col in LIMITS:
        lo, hi = LIMITS[col]
        off = (num.notna() & ((num < lo) | (num > hi))).to_numpy() & checked
        if off.any():
            raise SchemaError(
                f"{source}: {_rows(line[off])}, column '{col}': {num[off].iloc[0]:g} is outside the physically "
                f"plausible range {lo:g} to {hi:g}; check the units"
            )
    if kind == "int":
        out[col] = num.astype("Int64") if nullable_int else num.astype("int64")
    else:
        out[col] = num


def _check_levels(out: pd.DataFrame, line, source: str) -> None:
    """Lower-case family and strategy; known strategies; ``single`` on one device; heads divide the width."""
    out["family"] = out["family"].str.lower()
    out["strategy"] = out["strategy"].str.lower()
    unknown = ~out["strategy"].isin(STRATEGIES)
    if unknown.any():
        raise SchemaError(
            f"{source}: {_rows(line[unknown.to_numpy()])}, column 'strategy': expected one of "
            f"{', '.join(STRATEGIES)}, got {out['strategy'][unknown].iloc[0]!r}"
        )
    single_multi = ((out["strategy"] == "single") & (out["n_gpus"] != 1)).to_numpy()
    if single_multi.any():
        raise SchemaError(
            f"{source}: {_rows(line[single_multi])}, column 'n_gpus': strategy 'single' runs on exactly 1 device, "
            f"got {out['n_gpus'][single_multi].iloc[0]}"
        )
    if "heads" in out.columns and pd.api.types.is_integer_dtype(out["heads"]):
        h, d = out["heads"].to_numpy(), out["hidden_size"].to_numpy()
        known = ~(pd.isna(out["heads"]).to_numpy() | pd.isna(out["hidden_size"]).to_numpy())
        bad = np.zeros(len(out), dtype=bool)
        bad[known] = (d[known].astype("int64") % h[known].astype("int64")) != 0
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise SchemaError(
                f"{source}: {_rows(line[bad])}, columns 'hidden_size', 'heads': expected hidden_size to be a "
                f"multiple of heads, got {d[i]} and {h[i]}"
            )


def validate_configs(df: pd.DataFrame, source: str = "candidates", row_offset: int = 2) -> pd.DataFrame:
    """Check a table of configurations to be run (no outcomes) and return it with canonical types.

    The same rules as :func:`validate` for :data:`CONFIG_COLUMNS` (and
    ``heads`` when present): non-empty names, whole positive sizes within
    :data:`LIMITS`, finite positive tokens, known strategies, ``single`` on
    exactly one device. ``grad_accum`` defaults to 1.

    Raises
    ------
    SchemaError
        Naming the source, row and column.
    """
    if not isinstance(df, pd.DataFrame):
        raise SchemaError(f"{source}: expected a pandas DataFrame, got {type(df).__name__}")
    out = df.copy().reset_index(drop=True)
    if "grad_accum" not in out.columns:
        out["grad_accum"] = 1
    missing = [c for c in CONFIG_COLUMNS if c not in out.columns]
    if missing:
        raise SchemaError(f"{source}: missing column(s) {', '.join(missing)}; "
                          f"candidates need {', '.join(c for c in CONFIG_COLUMNS if c != 'grad_accum')}")
    if out.empty:
        raise SchemaError(f"{source}: no candidate rows")
    line = pd.RangeIndex(len(out)) + row_offset
    checked = np.ones(len(out), dtype=bool)
    for col, kind in CONFIG_COLUMNS.items():
        _check_column(out, col, kind, checked, line, source)
    if "heads" in out.columns:
        if out["heads"].isna().all():
            out = out.drop(columns="heads")
        else:
            _check_column(out, "heads", "int", checked, line, source)
    _check_levels(out, line, source)
    return out


def data_notes(df: pd.DataFrame) -> list[str]:
    """What a training table cannot inform, in plain words (said before a fit samples).

    Raises
    ------
    SchemaError
        When the table has fewer than two runs: nothing can be fitted.
    """
    if len(df) < 2:
        raise SchemaError(f"the training table has {len(df)} run(s); a fit needs at least 2 "
                          "(better: several sizes, and multi-device runs with their single-device partner)")
    notes = []
    strategies = [s for s in STRATEGIES if s in set(df["strategy"])]
    multi = [s for s in strategies if s != "single"]
    eff = df["efficiency"] if "efficiency" in df.columns else pd.Series(np.nan, index=df.index)
    informed = {s: sorted(df.loc[(df["strategy"] == s) & (df["n_gpus"] > 1) & eff.notna(), "n_gpus"].astype(int).unique())
                for s in multi}
    if not multi:
        notes.append("only single-device runs: the speedup curves are not informed, and ddp, fsdp and tp "
                      "cannot be predicted (they are not in the data)")
    else:
        absent = [s for s in STRATEGIES if s not in strategies]
        if absent:
            notes.append(f"no runs of {', '.join(absent)}: the model cannot predict "
                         f"{'it' if len(absent) == 1 else 'them'} (only {', '.join(strategies)})")
        for s in multi:
            if not informed[s]:
                notes.append(f"{s}: no multi-device run with a single-device partner, so its speedup curve "
                             "comes from the prior alone (wide intervals for every multi-device prediction)")
            elif len(informed[s]) == 1:
                notes.append(f"{s}: measured at one device count ({informed[s][0]}) only: the curve's shape at "
                             "other counts comes from the prior")
    if "single" not in strategies:
        notes.append("no single-device runs: efficiencies cannot be measured, so the speedup curves come from the prior")
    return notes


def add_efficiency(df: pd.DataFrame) -> pd.DataFrame:
    """Add ``speedup`` and ``efficiency`` against the matching single-device run.

    The match is the run key without ``strategy`` and ``n_gpus``. Speedup is a
    throughput ratio, ``(tokens / time_s) / (tokens_1 / time_1)``, which is
    :math:`T_1 / T_N` when both runs process the same tokens. Single-device rows
    get 1 by definition; rows without a single-device partner get NaN. Values
    already present (e.g. a published table's own) are kept.

    Parameters
    ----------
    df : pandas.DataFrame
        A validated sweep table.

    Returns
    -------
    pandas.DataFrame
        A copy with ``speedup`` and ``efficiency`` columns.
    """
    out = df.copy()
    match = [c for c in run_key(out) if c not in ("strategy", "n_gpus")]
    ok = out["status"].eq("ok") if "status" in out.columns else pd.Series(True, index=out.index)
    single = out[ok & (out["strategy"] == "single")]
    base = single[match].copy()
    base["_thr1"] = (single["tokens"] / single["time_s"]).to_numpy(dtype=float)
    merged = out[match].merge(base, on=match, how="left")
    thr = (out["tokens"].astype(float) / out["time_s"].astype(float)).to_numpy()
    speedup = thr / merged["_thr1"].to_numpy()
    speedup = np.where(out["strategy"].to_numpy() == "single", 1.0, speedup)
    have_s = out["speedup"].to_numpy(dtype=float) if "speedup" in out.columns else np.full(len(out), np.nan)
    have_e = out["efficiency"].to_numpy(dtype=float) if "efficiency" in out.columns else np.full(len(out), np.nan)
    s = np.where(np.isnan(have_s), speedup, have_s)
    n = out["n_gpus"].to_numpy(dtype=float)
    out["speedup"] = s
    out["efficiency"] = np.where(np.isnan(have_e), s / n, have_e)
    return out
