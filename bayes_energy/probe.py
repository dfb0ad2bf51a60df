r"""Probe, then predict: a short measured start of the real job sharpens the forecast of the whole job.

Run the job for a few minutes (a *probe*: one or more measured windows of the
job itself, rows of a sweep table), then :func:`probe_update` combines the
population law of a fitted posterior with what the probe showed.

The model
---------
The posterior's law predicts a configuration family's runs with residuals
that are correlated within the family: a workload that runs 20 % hotter than
the law on one device also does on four. Write the residual of run :math:`r`
of the job as a job-level offset plus the rest,

.. math::

    \ln E_r = \mu_r + u + e_r, \qquad u \sim \mathrm{StudentT}(3, 0, \tau), \qquad
    e_r \sim \mathrm{StudentT}\big(\nu, 0, \sigma_{s[r]}\sqrt{1-\rho_{s[r]}}\big),

with :math:`\mu_r` the law (the posterior draw's coefficients, the job's own
token count, strategy and device count; before a run the efficiency comes
from the speedup curves with their scatter), :math:`\sigma_s, \nu` the
model's residual scale and degrees of freedom and
:math:`\rho_s = \tau^2 / \operatorname{Var}(\text{residual} \mid s)` the share of
the residual variance that is shared by the family. Without a probe,
:math:`u + e_r` is the model's own residual (the "before" columns are the
ordinary pre-run prediction). A probe window :math:`p` gives
:math:`\ln E_p - \mu_p = u + e_p`; for each posterior draw the offset's
posterior given the probe windows is sampled exactly for this model by a
short Gibbs run (Student-t noise and Student-t prior as normal scale
mixtures, so each step is conjugate), and the job's other runs are predicted with
:math:`u` from it and their own :math:`e_r`. The same is done for ln time
with its own offset. This is an update of the saved draws: no refit, a few
milliseconds. The prior's heavy tails (3 degrees of freedom, fixed, not
tuned) let a probe far from the law move the job: with a normal prior
and Student-t noise such a probe was put down to noise (a probe 1.5x hot
taught a factor of 1.011); now it teaches 1.48, and the after interval
may then be wider than the before one, which was too sure of this job.
A probe that agrees with the law narrows it.

:math:`\tau` (the spread of configuration-family effects) is estimated per
posterior draw from the training table stored in the posterior: the mean
product of post-run residuals of distinct runs of the same family,
:math:`\hat\tau^2 = \sum_g \sum_{i \ne j \in g} r_i r_j / \sum_g n_g(n_g - 1)`
(a moment estimate of the within-family covariance, clipped at 0), and
:math:`\operatorname{Var}(\text{residual} \mid s)` as the mean squared
residual of strategy :math:`s`. A posterior fitted with the optional
configuration-family effect (``group_effects``) has its own scale
``E_u_tau``: that is used for energy, with the model's noise as the
within-family noise (:math:`\rho = 0`). ``benchmarks/probe_mayaki2026.py``
checks the update against held-out families and, on one case, against a
refit with the probe rows added.

Windows and full runs
---------------------
The probe enters only through its residual against the law *at the probe's
own configuration* (its tokens, strategy, device count), and the job is
predicted through the law at the job's token count: tokens scale through the
law's compute, memory and token terms, never by energy-per-token times
tokens. Measure probe windows after warm-up (the runner excludes warm-up
steps). Fixed start-up energy or time that a window does include (model
build, first-step compilation) goes in optional ``startup_j`` /
``startup_s`` columns: it is subtracted from the window before the law sees
it, and added once, unscaled, to the full job's prediction.

Command line: ``python -m bayes_energy.plan ... --probe PROBE.csv`` (see
:mod:`bayes_energy.plan`).
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from . import DEFAULT_PROB
from .schema import KWH_TO_J
from .schema import STRATEGIES, SchemaError

__all__ = ["probe_update", "read_probe", "job_scales", "ProbeResult", "JOB_KEY"]

#: Columns that make a probe a window of *this* job: the configuration family (workload on a device).
JOB_KEY = ("hardware", "family", "num_layers", "hidden_size", "ff", "seq_len", "batch_size", "grad_accum")
#: Columns a probe window needs.
PROBE_COLUMNS = ("hardware", "family", "num_layers", "hidden_size", "ff", "seq_len", "batch_size", "tokens",
                 "strategy", "n_gpus", "time_s", "energy_j")
_NUMERIC = ("num_layers", "hidden_size", "ff", "seq_len", "batch_size", "grad_accum", "tokens", "n_gpus")
#: Gibbs sweeps per posterior draw (the chain for one scalar mixes in a few).
_GIBBS_SWEEPS = 25
#: Largest share of the residual variance given to the family offset.
_RHO_MAX = 0.95
#: Degrees of freedom of the family offsets' Student-t prior. Fixed before measuring, not tuned: with a normal
#: prior and Student-t noise a probe far from the law is put down to the heavier-tailed noise, so a job that
#: really runs 50 % hot (4 family scales out) taught the offset almost nothing (factor 1.011 learned from a
#: probe 1.5x hot, CI of 2026-12-04). With tails at least as heavy as the noise's, the data decide.
_OFFSET_NU = 3.0


# ---------------------------------------------------------------- input
def _truthy(values: pd.Series) -> np.ndarray:
    text = values.astype(str).str.strip().str.lower()
    return text.isin(["1", "true", "yes", "y", "probe", "1.0"]).to_numpy()


def read_probe(probe, source: str | None = None) -> pd.DataFrame:
    """Read and check probe windows: a sweep-table CSV path or a DataFrame.

    Rows are probe windows of one job. A ``probe`` column, where present,
    marks which rows are probes (``1``/``true``/``yes``); the other rows are
    ignored. ``grad_accum`` defaults to 1. Optional ``startup_j`` and
    ``startup_s``: fixed start-up energy and time inside the window (see the
    module docs). ``efficiency`` is taken from the table, 1 for single-device
    windows, or computed against a single-device window of the same job.

    Raises
    ------
    SchemaError
        Naming the file, row (the CSV line) and column: missing columns, no
        probe rows, a zero-length or zero-energy window, non-numeric sizes.
    """
    if isinstance(probe, (str, os.PathLike)):
        path = Path(probe)
        source = source or str(path)
        if not path.is_file():
            raise SchemaError(f"{source}: no such probe file")
        try:
            df = pd.read_csv(path)
        except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as err:
            raise SchemaError(f"{source}: not a readable CSV ({err})") from None
    elif isinstance(probe, pd.DataFrame):
        df = probe
        source = source or "probe"
    else:
        raise SchemaError(f"probe: expected a CSV path or a pandas DataFrame, got {type(probe).__name__}")
    df = df.reset_index(drop=True)
    line = np.arange(len(df)) + 2  # CSV line numbers (one header line)
    marked = "probe" in df.columns
    if marked:
        keep = _truthy(df["probe"])
        df, line = df[keep].reset_index(drop=True), line[keep]
    if df.empty:
        raise SchemaError(f"{source}: no probe rows" + (" (no row has probe = 1 in column 'probe')" if marked else ""))
    missing = [c for c in PROBE_COLUMNS if c not in df.columns]
    if missing:
        raise SchemaError(f"{source}: missing column(s) {', '.join(missing)}; a probe window needs {', '.join(PROBE_COLUMNS)}")
    df = df.copy()
    if "grad_accum" not in df.columns:
        df["grad_accum"] = 1
    for col, what in (("time_s", "a measured window of positive duration"), ("tokens", "a window that processed tokens"),
                      ("energy_j", "a positive measured energy")):
        num = pd.to_numeric(df[col], errors="coerce")
        bad = (num.isna() | ~np.isfinite(num.fillna(0.0)) | (num <= 0)).to_numpy()
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise SchemaError(f"{source}: row {line[i]}, column '{col}': expected {what} (> 0), got {df[col].iloc[i]!r}"
                              + ("; a zero-length window carries no information" if col in ("time_s", "tokens") else ""))
        df[col] = num.astype(float)
    for col in _NUMERIC:
        num = pd.to_numeric(df[col], errors="coerce")
        bad = (num.isna() | (num <= 0)).to_numpy()
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise SchemaError(f"{source}: row {line[i]}, column '{col}': expected a positive number, got {df[col].iloc[i]!r}")
        df[col] = num
    for col, total in (("startup_j", "energy_j"), ("startup_s", "time_s")):
        if col in df.columns:
            num = pd.to_numeric(df[col], errors="coerce").fillna(0.0)
            bad = ((num < 0) | (num >= df[total])).to_numpy()
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                raise SchemaError(f"{source}: row {line[i]}, column '{col}': expected a start-up part in [0, {total}), "
                                  f"got {df[col].iloc[i]!r}")
            df[col] = num.astype(float)
    df["family"] = df["family"].astype(str).str.lower()
    df["strategy"] = df["strategy"].astype(str).str.lower()
    df["hardware"] = df["hardware"].astype(str)
    bad = ~df["strategy"].isin(STRATEGIES)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise SchemaError(f"{source}: row {line[i]}, column 'strategy': expected one of {', '.join(STRATEGIES)}, "
                          f"got {df['strategy'].iloc[i]!r}")
    df["_line"] = line
    df.attrs["source"] = source
    return _probe_efficiency(df)


def _probe_efficiency(df: pd.DataFrame) -> pd.DataFrame:
    """Efficiency of each window: given, 1 on one device, or against a single-device window of the job."""
    eff = pd.to_numeric(df["efficiency"], errors="coerce").to_numpy(float) if "efficiency" in df.columns \
        else np.full(len(df), np.nan)
    single = (df["strategy"] == "single").to_numpy()
    eff = np.where(single, 1.0, eff)
    if single.any():
        net_t = df["time_s"].to_numpy(float) - (df["startup_s"].to_numpy(float) if "startup_s" in df.columns else 0.0)
        thr = df["tokens"].to_numpy(float) / net_t
        thr1 = float(np.mean(thr[single]))
        eff = np.where(np.isnan(eff), thr / thr1 / df["n_gpus"].to_numpy(float), eff)
    df["efficiency"] = eff
    return df


def _norm(v):
    try:
        return float(v)
    except (TypeError, ValueError):
        return str(v).strip().lower()


def check_job(probe: pd.DataFrame, job: pd.DataFrame, known_hardware: list[str]) -> None:
    """Refuse a probe from hardware the posterior has not seen, or of another job than ``job``."""
    source = probe.attrs.get("source", "probe")
    for i, hw in enumerate(probe["hardware"]):
        if hw not in known_hardware:
            raise SchemaError(f"{source}: row {probe['_line'].iloc[i]}, column 'hardware': {hw!r} is not hardware this "
                              f"posterior was fitted on (it knows {', '.join(known_hardware)}); a probe is read against "
                              "the law of measured hardware: fit a sweep that includes it")
    if job.empty:
        raise ValueError("the job has no rows to predict")
    j = job.reset_index(drop=True)
    key = list(JOB_KEY)
    if "group" in probe.columns and "group" in j.columns:
        # the table names its families (e.g. dynamic padding: the mean sequence length varies between runs of one family)
        key = [c for c in key if c != "seq_len"] + ["group"]
    ref = {c: _norm(j[c].iloc[0]) if c in j.columns else (1.0 if c == "grad_accum" else None) for c in key}
    for c in key:
        if c not in j.columns:
            if c == "grad_accum":
                continue
            raise ValueError(f"the job lacks column '{c}'")
        vals = j[c].map(_norm)
        if (vals != ref[c]).any():
            k = int(np.flatnonzero((vals != ref[c]).to_numpy())[0])
            raise ValueError(f"job row {k + 1}, column '{c}': {j[c].iloc[k]!r} differs from {j[c].iloc[0]!r}; a probe "
                             "informs one job (one configuration family): call probe_update once per job")
    for i in range(len(probe)):
        for c in key:
            v = _norm(probe[c].iloc[i])
            if ref[c] is not None and v != ref[c]:
                raise SchemaError(f"{source}: row {probe['_line'].iloc[i]}, column '{c}': the probe ran {v!r} "
                                  f"but the job has {ref[c]!r}; a probe must be a window of "
                                  f"the job itself (same {', '.join(JOB_KEY)}; tokens, strategy and device count may differ)")


# ---------------------------------------------------------------- the law on every draw
def _law(idata, rows: pd.DataFrame, n_draws: int | None, rng: np.random.Generator) -> dict:
    """Per-draw means of ln E and ln T (uncentred) of ``rows``, noise scales and the efficiency scatter.

    ``rows`` has an ``efficiency`` column, NaN where unknown: there the law
    takes the speedup curve's efficiency, and ``eta_sd`` (sample, row) is the
    curves' scatter on ln efficiency (0 elsewhere); ``slope_e``/``slope_t``
    carry it to ln energy and ln time (the law is linear in ln efficiency).
    """
    from .models.law import ETA_COLUMN
    from .models.predictive import energy_time_draws, eta_scale, log_eta_draws, noise_scale, scatter_rows
    from .predict import NewLevelWarning, design_and_posterior

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NewLevelWarning)
        spec, A, P = design_and_posterior(idata, rows, n_draws, rng)
    group_tau = P.pop("E_u_tau", None)
    P.pop("E_u", None)  # the job's own family offset is what the probe informs
    S = P["E_sigma"].shape[0]
    n = len(rows)
    eff = rows["efficiency"].to_numpy(float)
    log_eta = log_eta_draws(P, A, efficiency=eff)
    curve_row = np.zeros(n, dtype=bool)  # efficiency from the curves: multi-device and not measured
    curve_row[scatter_rows(A)] = True
    curve_row &= ~np.isfinite(eff)
    sd = np.zeros((S, n))
    sd[:, curve_row] = eta_scale(P, A, curve_row)
    mu_e, mu_t = energy_time_draws(P, A, log_eta, spec.config["centre"])
    return {
        "mu_e": mu_e, "mu_t": mu_t,
        "eta_sd": sd, "slope_e": P["E_beta"][:, A["cell_idx"], ETA_COLUMN],
        "slope_t": P["T_beta"][:, A["cell_idx"], ETA_COLUMN],
        "sig_e": np.broadcast_to(noise_scale(P, "E_sigma", A), (S, n)),
        "sig_t": np.broadcast_to(noise_scale(P, "T_sigma", A), (S, n)), "lam": P["T_on_E_resid"][:, None],
        "nu": {k: P[k] for k in ("E_nu", "T_nu", "eta_nu") if k in P},  # the noise families (standard_variates)
        "strategy_idx": A["strategy_idx"], "S": S,
        "kind": curve_row.astype(int),  # 1: efficiency from the curves (multi-device, unmeasured)
        "group_tau": group_tau,
    }


def _pair_sum(ra: np.ndarray, rb: np.ndarray, ga: np.ndarray, gb: np.ndarray, same: np.ndarray | None,
              ngroup: int) -> tuple[np.ndarray, float]:
    """Sum over same-family pairs of distinct runs of ``ra_i * rb_j`` per draw, and the number of pairs.

    ``same[i]``: the position in ``rb`` of run ``i`` of ``ra`` (-1 if absent), so a run is not paired with itself.
    """
    Ga = np.zeros((len(ga), ngroup))
    Ga[np.arange(len(ga)), ga] = 1.0
    Gb = np.zeros((len(gb), ngroup))
    Gb[np.arange(len(gb)), gb] = 1.0
    total = np.sum((ra @ Ga) * (rb @ Gb), axis=1)
    npairs = float(np.sum(Ga.sum(0) * Gb.sum(0)))
    if same is not None:
        m = same >= 0
        total = total - np.sum(ra[:, m] * rb[:, same[m]], axis=1)
        npairs -= float(m.sum())
    return total, npairs


def _block_scales(r_post: np.ndarray, r_pre: np.ndarray, g_post, g_pre, same, strat_post, strat_pre,
                  n_strat: int) -> dict:
    r"""Family scales of one outcome from training residuals (sample, run).

    Residual = :math:`u + [\text{curve}]\,v + e`: :math:`u` shared by every
    run of a family (its energy level against the law), :math:`v` shared by
    its multi-device runs whose efficiency comes from the curves (the
    curves' error for that family). Moment estimates per draw:
    :math:`\tau_u^2` = mean product over same-family pairs (post-run x
    post-run and post-run x pre-run), :math:`\tau_u^2 + \tau_v^2` = over
    pre-run x pre-run pairs.
    """
    codes, uniq = pd.factorize(np.concatenate([g_post, g_pre]))
    cp, cq = codes[: len(g_post)], codes[len(g_post):]
    k = len(uniq)
    s00, n00 = _pair_sum(r_post, r_post, cp, cp, np.arange(len(cp)), k)
    if r_pre.shape[1]:
        s01, n01 = _pair_sum(r_post, r_pre, cp, cq, same, k)
        s11, n11 = _pair_sum(r_pre, r_pre, cq, cq, np.arange(len(cq)), k)
    else:
        s01 = s11 = np.zeros(r_post.shape[0])
        n01 = n11 = 0.0
    tau_u2 = np.clip((s00 + s01) / max(n00 + n01, 1.0), 0.0, None)
    tau_v2 = np.clip(s11 / n11 - tau_u2, 0.0, None) if n11 > 0 else np.zeros_like(tau_u2)
    return {"tau_u2": tau_u2, "tau_v2": tau_v2}


def job_scales(idata, n_draws: int | None = None, seed: int | None = 0) -> pd.DataFrame:
    """The configuration-family scales of a posterior, for ln energy and ln time.

    Returns the posterior median and 90 % interval over draws of
    ``tau_energy`` (the family's level against the law), ``tau_curve_energy``
    (the family's efficiency-curve error, multi-device runs before they
    run) and the same for time, in ln units. See the module docs.
    """
    rng = np.random.default_rng(seed)
    tr = _training_rows(idata)
    rows, ipost, ipre = _training_design(tr)
    law = _law(idata, rows, n_draws, rng)
    sc = _scales(law, tr, ipost, ipre)
    out = {}
    for b, name in (("e", "energy"), ("t", "time")):
        out[f"tau_{name}"] = np.sqrt(sc[b]["tau_u2"])
        out[f"tau_curve_{name}"] = np.sqrt(sc[b]["tau_v2"])
    return pd.DataFrame({k: {"median": np.median(v), "lo": np.quantile(v, 0.05), "hi": np.quantile(v, 0.95)}
                         for k, v in out.items()}).T


_COLS = ["hardware", "family", "num_layers", "hidden_size", "ff", "seq_len", "batch_size", "grad_accum", "tokens",
         "strategy", "n_gpus"]


def _training_rows(idata) -> pd.DataFrame:
    from .models.io import PosteriorFileError, posterior_of
    from .schema import add_efficiency

    tr = posterior_of(idata).table
    if tr is None:
        raise PosteriorFileError("the posterior has no training_table group; was it written by bayes_energy?")
    if "status" in tr.columns:
        tr = tr[tr["status"].astype(str).str.lower().isin(["ok", "nan", ""])]
    if "efficiency" not in tr.columns:
        tr = add_efficiency(tr)
    tr = tr[np.isfinite(pd.to_numeric(tr["efficiency"], errors="coerce"))].reset_index(drop=True)
    tr["efficiency"] = tr["efficiency"].astype(float)
    return tr


def _training_design(tr: pd.DataFrame) -> tuple[pd.DataFrame, np.ndarray, np.ndarray]:
    """Training rows twice: post-run (measured efficiency) and, for multi-device rows, pre-run (curves)."""
    from .models.spec import CURVE_OF

    multi = ((tr["n_gpus"].to_numpy(float) > 1) & tr["strategy"].map(CURVE_OF).to_numpy(int).astype(bool))
    post = tr[_COLS].assign(efficiency=tr["efficiency"].to_numpy(float))
    pre = tr.loc[multi, _COLS].assign(efficiency=np.nan)
    rows = pd.concat([post, pre], ignore_index=True)
    return rows, np.arange(len(post)), np.arange(len(post), len(rows))


#: Families with two or more runs that a hardware x family cell needs for its own scales (else: all cells pooled).
MIN_CELL_FAMILIES = 8


def _scales(law: dict, tr: pd.DataFrame, ipost: np.ndarray, ipre: np.ndarray, cell: str | None = None) -> dict:
    """Family scales of energy and time per draw from the training rows of ``law`` (see :func:`_block_scales`).

    With ``cell`` (``"hardware|family"``) the scales come from that cell's
    families when it has at least :data:`MIN_CELL_FAMILIES` of them with two
    runs or more: how strongly a family's runs share their residual differs
    between cells (on the reference table the within-family correlation of
    pre-run FSDP residuals is 0.99 on one cell and 0.55 on another).
    """
    from .models.spec import CURVE_OF, cell_labels, group_keys

    if cell is not None:
        mine = (cell_labels(tr) == cell).to_numpy()
        fams = group_keys(tr[mine]).value_counts()
        if int((fams >= 2).sum()) >= MIN_CELL_FAMILIES:
            multi_all = (tr["n_gpus"].to_numpy(float) > 1) & tr["strategy"].map(CURVE_OF).to_numpy(int).astype(bool)
            pre_pos = np.full(len(tr), -1)
            pre_pos[multi_all] = np.arange(int(multi_all.sum()))
            keep_pre = pre_pos[mine & multi_all]
            return _scales(law, tr[mine].reset_index(drop=True), ipost[mine], ipre[keep_pre])
    groups = group_keys(tr.reset_index(drop=True)).to_numpy()
    multi = np.flatnonzero((tr["n_gpus"].to_numpy(float) > 1) & tr["strategy"].map(CURVE_OF).to_numpy(int).astype(bool))
    same = np.full(len(ipost), -1)
    same[multi] = np.arange(len(multi))
    n_strat = int(max(law["strategy_idx"].max() + 1, 4))
    st = law["strategy_idx"]
    out = {}
    for b, col in (("e", "energy_j"), ("t", "time_s")):
        y = np.log(tr[col].to_numpy(float))
        r_post = y[None, :] - law[f"mu_{b}"][:, ipost]
        r_pre = y[multi][None, :] - law[f"mu_{b}"][:, ipre]
        out[b] = _block_scales(r_post, r_pre, groups, groups[multi], same, st[ipost], st[ipre], n_strat)
    if law["group_tau"] is not None:
        # the model's own family effect on energy: its noise is already within-family, its scale is E_u_tau
        out["e"] = {"tau_u2": law["group_tau"] ** 2, "tau_v2": np.zeros_like(law["group_tau"]), "no_shrink": True}
    return out


def _rho(sc: dict, kind: np.ndarray, scale2: np.ndarray) -> np.ndarray:
    """Share of each row's residual that the family shares: (tau_u² + kind tau_v²) / the model's residual scale², capped."""
    if sc.get("no_shrink"):
        return np.zeros_like(scale2)
    shared = sc["tau_u2"][:, None] + kind[None, :] * sc["tau_v2"][:, None]
    return np.clip(shared / scale2, 0.0, _RHO_MAX)


# ---------------------------------------------------------------- the update
def _offset_posterior(r: np.ndarray, kind: np.ndarray, scale: np.ndarray, extra_var: np.ndarray, nu: np.ndarray,
                      tau_u2: np.ndarray, tau_v2: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    r"""One draw of the job offsets (u, v) per posterior draw, given probe residuals ``r`` (sample, probe).

    Model: :math:`r_i = u + k_i v + e_i`, :math:`u \sim t_{\nu_u}(0, \tau_u)`,
    :math:`v \sim t_{\nu_u}(0, \tau_v)` (:data:`_OFFSET_NU`),
    :math:`e_i \sim t_\nu(0, \text{scale}_i)`
    plus a normal part of variance ``extra_var`` (the efficiency scatter of
    a multi-device window of unmeasured efficiency). Gibbs on the normal
    scale mixtures :math:`e_i | w_i \sim N(0, \text{scale}_i^2 / w_i)`,
    :math:`w_i \sim \Gamma(\nu/2, \nu/2)`, and likewise for u and v: each step is conjugate.
    """
    S = r.shape[0]
    k = kind[None, :].astype(float)
    w = np.ones_like(r)
    tu2, tv2 = np.maximum(tau_u2, 1e-12), np.maximum(tau_v2, 1e-12)
    iu, iv = 1.0 / tu2, 1.0 / tv2
    half = np.broadcast_to((nu[:, None] + 1.0) / 2.0, r.shape)
    u = v = np.zeros(S)
    for _ in range(_GIBBS_SWEEPS):
        p = 1.0 / (scale**2 / w + extra_var)
        a, b, d = iu + p.sum(1), (p * k).sum(1), iv + (p * k).sum(1)  # precision [[a, b], [b, d]]
        bu, bv = (p * r).sum(1), (p * k * r).sum(1)
        det = a * d - b * b
        mu_u, mu_v = (d * bu - b * bv) / det, (a * bv - b * bu) / det
        # draw from N(mean, precision^-1) via the Cholesky factor of the precision
        l11 = np.sqrt(a)
        l21 = b / l11
        l22 = np.sqrt(np.maximum(d - l21**2, 1e-300))
        z1, z2 = rng.standard_normal(S), rng.standard_normal(S)
        v = mu_v + z2 / l22
        u = mu_u + (z1 - l21 * (v - mu_v)) / l11
        resid2 = (r - u[:, None] - k * v[:, None]) ** 2 / (scale**2 + extra_var)
        w = rng.gamma(half, 2.0 / (nu[:, None] + resid2))
        # the offsets' own scale mixtures (Student-t priors with _OFFSET_NU degrees of freedom)
        iu = rng.gamma((_OFFSET_NU + 1.0) / 2.0, 2.0 / (_OFFSET_NU + u**2 / tu2)) / tu2
        iv = rng.gamma((_OFFSET_NU + 1.0) / 2.0, 2.0 / (_OFFSET_NU + v**2 / tv2)) / tv2
    return u, v


def _width(d: np.ndarray, prob: float) -> np.ndarray:
    lo, hi = np.quantile(d, [(1 - prob) / 2, (1 + prob) / 2], axis=0)
    return hi - lo


@dataclass
class ProbeResult:
    """The job's prediction before and after the probe.

    Attributes
    ----------
    table : pandas.DataFrame
        The job rows with ``energy_kwh_{median,lo,hi}_{before,after}``,
        ``time_s_{median,lo,hi}_{before,after}``, ``width_ratio`` (after / before,
        of the ln-energy interval), ``noise_share`` (the part of the after-probe
        ln-energy interval that is residual scatter between runs of the same job:
        squared width of that scatter alone over the squared full width) and ``prob``.
    offset : dict
        Posterior median and 90 % interval of the job's energy and time
        factors :math:`e^u` learned from the probe, the probe windows' raw
        ratio to the law's median at their own configuration
        (``energy_ratio``, ``time_ratio``: what the factors would be if the
        whole difference were the job's), and the scales used.
    draws : dict
        ``log_energy_j`` / ``log_time_s`` ``_before`` / ``_after``, (sample, job row).
    """

    table: pd.DataFrame
    offset: dict
    draws: dict = field(repr=False)
    probe: pd.DataFrame = field(repr=False, default=None)

    def to_text(self) -> str:
        t = self.table
        o = self.offset
        lines = [f"probe: {o['n_windows']} window(s) at x{o['energy_ratio']:.3g} the law's energy and "
                 f"x{o['time_ratio']:.3g} its time",
                 f"learned: the job runs x{o['energy_factor']:.3g} "
                 f"[{o['energy_factor_lo']:.3g}, {o['energy_factor_hi']:.3g}] the law's energy and "
                 f"x{o['time_factor']:.3g} [{o['time_factor_lo']:.3g}, {o['time_factor_hi']:.3g}] its time "
                 f"(family scale tau {o['tau_energy']:.2f} on ln energy)"]
        p = int(round(100 * float(t["prob"].iloc[0])))
        head = f"{'candidate':<26} {f'energy kWh before ({p}%)':>30} {'after':>30} {'noise':>6}"
        lines.append(head)
        for _, r in t.iterrows():
            name = f"{r['strategy']} x{int(r['n_gpus'])}"
            b = f"{r['energy_kwh_median_before']:.3g} [{r['energy_kwh_lo_before']:.3g}, {r['energy_kwh_hi_before']:.3g}]"
            a = f"{r['energy_kwh_median_after']:.3g} [{r['energy_kwh_lo_after']:.3g}, {r['energy_kwh_hi_after']:.3g}]"
            lines.append(f"{name:<26} {b:>30} {a:>30} {r['noise_share']:>6.0%}")
        lines.append("noise: share of the after-probe interval that is scatter between runs of the same job "
                     "(more probing cannot remove it)")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.to_text()


def probe_update(idata, probe, job: pd.DataFrame, prob: float = DEFAULT_PROB, n_draws: int | None = None,
                 seed: int | None = None, source: str | None = None) -> ProbeResult:
    """Update the prediction of a job with measured probe windows of it.

    Parameters
    ----------
    idata : arviz.InferenceData or bayes_energy.models.io.Posterior
        A fitted posterior (:func:`bayes_energy.models.io.load`).
    probe : path or pandas.DataFrame
        Probe windows of the job, sweep-table rows (see :func:`read_probe`).
    job : pandas.DataFrame
        The full runs to predict (:data:`bayes_energy.predict.PRE_RUN_COLUMNS`):
        the job at its own token count, on any strategies and device counts.
        All rows share the probe's :data:`JOB_KEY`.
    prob : float, default 0.9
        Central interval probability.
    n_draws : int, optional
        Thin the posterior.
    seed : int, optional
    source : str, optional
        Name of the probe in error messages (default: its path).

    Returns
    -------
    ProbeResult

    Raises
    ------
    SchemaError
        A bad probe window (file, row, column named), a probe from hardware
        the posterior has not seen, or a probe of another configuration than the job.

    Examples
    --------
    >>> res = probe_update(idata, "probe.csv", job)  # doctest: +SKIP
    >>> print(res)  # doctest: +SKIP
    """
    from .models.io import posterior_of
    from .models.predictive import standard_variates
    from .predict import check_candidates

    if not 0 < prob < 1:
        raise ValueError(f"prob must lie in (0, 1), got {prob}")
    spec = posterior_of(idata).spec
    pr = read_probe(probe, source)
    groups = job["group"].to_numpy() if "group" in job.columns else None
    job = check_candidates(job, "job")
    if groups is not None:
        job["group"] = groups
    check_job(pr, job, list(spec.config["levels"]["hardware"]))
    rng = np.random.default_rng(seed)
    tr = _training_rows(idata)
    start_j = pr["startup_j"].to_numpy(float) if "startup_j" in pr.columns else np.zeros(len(pr))
    start_s = pr["startup_s"].to_numpy(float) if "startup_s" in pr.columns else np.zeros(len(pr))
    t_rows, ipost, ipre = _training_design(tr)
    p_rows = pr[_COLS].assign(efficiency=pr["efficiency"].to_numpy(float))
    j_rows = job[_COLS].assign(efficiency=np.nan)
    allrows = pd.concat([p_rows, j_rows, t_rows], ignore_index=True)
    n_p, n_j = len(p_rows), len(j_rows)
    ip, ij = np.arange(n_p), np.arange(n_p, n_p + n_j)
    law = _law(idata, allrows, n_draws, rng)  # one thinning of the posterior for probe, job and training rows
    from .models.spec import cell_labels

    sc = _scales(law, tr, ipost + n_p + n_j, ipre + n_p + n_j, cell=str(cell_labels(job).iloc[0]))
    S = law["S"]
    kp, kj = law["kind"][ip], law["kind"][ij]
    lam = law["lam"]

    # the probe's residuals against the law at its own configuration (start-up removed)
    y_e = np.log(pr["energy_j"].to_numpy(float) - start_j)[None, :]
    y_t = np.log(pr["time_s"].to_numpy(float) - start_s)[None, :]
    offsets = {}
    for b, y, sig, nu, slope in (("e", y_e, law["sig_e"][:, ip], law["nu"]["E_nu"], law["slope_e"][:, ip]),
                                 ("t", y_t, np.sqrt(law["sig_t"][:, ip] ** 2 + (lam * law["sig_e"][:, ip]) ** 2),
                                  law["nu"]["T_nu"], law["slope_t"][:, ip])):
        ev = (slope * law["eta_sd"][:, ip]) ** 2
        keep = 1.0 - _rho(sc[b], kp, sig**2 + ev)  # (sample, probe): the within-family share
        resid = y - law[f"mu_{b}"][:, ip]
        offsets[b] = _offset_posterior(resid, kp, sig * np.sqrt(keep), ev * keep, nu,
                                       sc[b]["tau_u2"], sc[b]["tau_v2"], rng)
        offsets[f"{b}_ratio"] = float(np.exp(np.median(resid.mean(1))))  # the windows against the law, raw

    # the job: the same law draws and the same noise variates before and after the probe
    z = standard_variates(law["nu"], "eta", rng, n_j) * law["eta_sd"][:, ij]  # efficiency scatter (ln), curve rows only
    eps_e = standard_variates(law["nu"], "E", rng, n_j) * law["sig_e"][:, ij]
    eps_t = standard_variates(law["nu"], "T", rng, n_j) * law["sig_t"][:, ij] + lam * eps_e
    noise_e = law["slope_e"][:, ij] * z + eps_e
    noise_t = law["slope_t"][:, ij] * z + eps_t
    mu_e, mu_t = law["mu_e"][:, ij], law["mu_t"][:, ij]
    sig_tj = np.sqrt(law["sig_t"][:, ij] ** 2 + (lam * law["sig_e"][:, ij]) ** 2)
    shrink_e = np.sqrt(1.0 - _rho(sc["e"], kj, law["sig_e"][:, ij] ** 2 + (law["slope_e"][:, ij] * law["eta_sd"][:, ij]) ** 2))
    shrink_t = np.sqrt(1.0 - _rho(sc["t"], kj, sig_tj**2 + (law["slope_t"][:, ij] * law["eta_sd"][:, ij]) ** 2))
    mu_e_before = mu_e
    if law["group_tau"] is not None:  # the model's family effect: before = law + a population draw of it
        mu_e_before = mu_e + law["group_tau"][:, None] * rng.standard_normal((S, n_j))

    def shift(b):
        u, v = offsets[b]
        return u[:, None] + kj[None, :] * v[:, None]

    draws = {
        "log_energy_j_before": mu_e_before + noise_e,
        "log_time_s_before": mu_t + noise_t,
        "log_energy_j_after": mu_e + shift("e") + shrink_e * noise_e,
        "log_time_s_after": mu_t + shift("t") + shrink_t * noise_t,
    }
    startup_j, startup_s = float(np.mean(start_j)), float(np.mean(start_s))
    table = job.copy()
    for q, key, add, scale in (("energy_kwh", "log_energy_j", startup_j, 1 / KWH_TO_J), ("time_s", "log_time_s", startup_s, 1.0)):
        for when in ("before", "after"):
            d = draws[f"{key}_{when}"]
            lo, med, hi = np.quantile(d, [(1 - prob) / 2, 0.5, (1 + prob) / 2], axis=0)
            for name, v in (("median", med), ("lo", lo), ("hi", hi)):
                table[f"{q}_{name}_{when}"] = (np.exp(v) + add) * scale
    w_before = _width(draws["log_energy_j_before"], prob)
    w_after = _width(draws["log_energy_j_after"], prob)
    table["width_ratio"] = w_after / w_before
    table["noise_share"] = np.clip((_width(shrink_e * noise_e, prob) / w_after) ** 2, 0.0, 1.0)
    table["prob"] = prob

    def q(x):
        return np.quantile(np.exp(x), [0.5, 0.05, 0.95])

    fe, ft = q(offsets["e"][0]), q(offsets["t"][0])
    offset = {"n_windows": n_p, "energy_ratio": offsets["e_ratio"], "time_ratio": offsets["t_ratio"],
              "energy_factor": fe[0], "energy_factor_lo": fe[1], "energy_factor_hi": fe[2],
              "time_factor": ft[0], "time_factor_lo": ft[1], "time_factor_hi": ft[2],
              "tau_energy": float(np.median(np.sqrt(sc["e"]["tau_u2"]))),
              "tau_curve_energy": float(np.median(np.sqrt(sc["e"]["tau_v2"]))),
              "tau_time": float(np.median(np.sqrt(sc["t"]["tau_u2"]))),
              "startup_j": startup_j, "startup_s": startup_s}
    return ProbeResult(table=table, offset=offset, draws=draws, probe=pr)
