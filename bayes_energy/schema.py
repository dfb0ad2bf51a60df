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
energy_source      str      ``nvml``, ``nvml-sampled``, ``rapl``, ``estimate``
                            or a published dataset's label
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

__all__ = [
    "SchemaError",
    "STRATEGIES",
    "REQUIRED",
    "RUN_KEY",
    "validate",
    "add_efficiency",
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
        checked = ok if col in OUTCOMES else np.ones(len(out), dtype=bool)
        values = out[col]
        if REQUIRED[col] == "str":
            empty = values.isna() | (values.astype(str).str.strip() == "")
            bad = empty.to_numpy() & checked
            if bad.any():
                raise SchemaError(
                    f"{source}: {_rows(line[bad])}, column '{col}': expected a non-empty text value, got a missing value"
                )
            out[col] = values.astype("string").str.strip().astype(object)
            out.loc[~empty, col] = out.loc[~empty, col].astype(str)
            continue
        num = pd.to_numeric(values, errors="coerce")
        nonnum = (num.isna() & values.notna()).to_numpy() & checked
        if nonnum.any():
            first = values[nonnum].iloc[0]
            raise SchemaError(
                f"{source}: {_rows(line[nonnum])}, column '{col}': expected a number, got {first!r}"
            )
        nan = num.isna().to_numpy() & checked
        if nan.any():
            raise SchemaError(f"{source}: {_rows(line[nan])}, column '{col}': expected a number, got a missing value (NaN)")
        inf = ~np.isfinite(num.fillna(1.0).to_numpy()) & checked
        if inf.any():
            raise SchemaError(f"{source}: {_rows(line[inf])}, column '{col}': expected a finite number, got {num[inf].iloc[0]}")
        if REQUIRED[col] == "int":
            frac = (num.notna() & (num != np.round(num))).to_numpy() & checked
            if frac.any():
                raise SchemaError(
                    f"{source}: {_rows(line[frac])}, column '{col}': expected a whole number, got {num[frac].iloc[0]}"
                )
            low = 1
            small = (num.notna() & (num < low)).to_numpy() & checked
            if small.any():
                what = "at least 1 device" if col == "n_gpus" else "a positive whole number"
                raise SchemaError(
                    f"{source}: {_rows(line[small])}, column '{col}': expected {what}, got {num[small].iloc[0]:g}"
                )
            out[col] = num.astype("Int64") if (~ok).any() else num.astype("int64")
        else:
            nonpos = (num.notna() & (num <= 0)).to_numpy() & checked
            if nonpos.any():
                raise SchemaError(
                    f"{source}: {_rows(line[nonpos])}, column '{col}': expected a positive value, got {num[nonpos].iloc[0]:g}"
                )
            out[col] = num.astype(float)

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
