"""Posterior-predictive energy and time for runs not yet made.

``predict(idata, configs)`` evaluates the fitted law in numpy over every
posterior draw (the same functions the PyMC model uses, from
:mod:`bayes_energy.models.law`), in chunks of candidates so that memory stays
bounded, and summarises each candidate's predictive distribution.

Pre-run (the default): the efficiency comes from the posterior speedup
curves, with their residual scatter, so device counts never measured are
allowed and carry the curves' uncertainty. Hardware x family cells or
configuration families the model has not seen draw their effects from the
fitted population distribution (with a warning); the pooled model has no
population for new hardware and refuses.

Command line::

    python -m bayes_energy.predict --posterior fits/default/posterior.nc \\
        --configs candidates.csv --out predictions.csv [--prob 0.9]
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from . import DEFAULT_PROB
from .datasets import KWH_TO_J
from .models.law import block_mean, curve_log_eta, curve_theta
from .models.spec import ModelSpec, cell_labels, group_keys
from .schema import POST_RUN, SchemaError, STRATEGIES

__all__ = ["predict", "predict_draws", "PRE_RUN_COLUMNS", "NewLevelWarning"]

#: Columns a candidate needs (``grad_accum`` defaults to 1).
PRE_RUN_COLUMNS = ("hardware", "family", "num_layers", "hidden_size", "ff", "seq_len", "batch_size",
                   "tokens", "strategy", "n_gpus")
_CHUNK_ELEMENTS = 4_000_000
_POOL = 4096


class NewLevelWarning(UserWarning):
    """A candidate's hardware x family cell was not in the training data."""


def _posterior_arrays(idata, n_draws: int | None, rng: np.random.Generator) -> dict[str, np.ndarray]:
    post = idata.posterior
    n = post.sizes["chain"] * post.sizes["draw"]
    take = np.arange(n) if n_draws is None or n_draws >= n else np.sort(rng.choice(n, n_draws, replace=False))
    out = {}
    for name, da in post.data_vars.items():
        if name.endswith(("_z", "_free", "_log__")) or name == "log_eta_curve":
            continue
        arr = da.stack(sample=("chain", "draw")).transpose("sample", ...).to_numpy()
        out[name] = arr[take]
    return out


def check_candidates(configs: pd.DataFrame, source: str = "candidates") -> pd.DataFrame:
    """Validate a candidate table and give it canonical types (pre-run columns only)."""
    missing = [c for c in PRE_RUN_COLUMNS if c not in configs.columns]
    if missing:
        raise SchemaError(f"{source}: missing column(s) {', '.join(missing)}; candidates need {', '.join(PRE_RUN_COLUMNS)}")
    df = configs.drop(columns=[c for c in POST_RUN if c in configs.columns]).reset_index(drop=True).copy()
    if "grad_accum" not in df.columns:
        df["grad_accum"] = 1
    for col in ("num_layers", "hidden_size", "ff", "seq_len", "batch_size", "tokens", "n_gpus", "grad_accum"):
        num = pd.to_numeric(df[col], errors="coerce")
        bad = (num.isna() | (num <= 0)).to_numpy()
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise SchemaError(f"{source}: row {i + 2}, column '{col}': expected a positive number, got {df[col].iloc[i]!r}")
        df[col] = num
    df["family"] = df["family"].astype(str).str.lower()
    df["strategy"] = df["strategy"].astype(str).str.lower()
    bad = ~df["strategy"].isin(STRATEGIES)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise SchemaError(f"{source}: row {i + 2}, column 'strategy': expected one of {', '.join(STRATEGIES)}, got {df['strategy'].iloc[i]!r}")
    return df


def _extend(P: dict, name: str, n_new: int, centre, scale, rng, axis: int) -> None:
    """Append ``n_new`` population draws along ``axis`` of parameter ``name``."""
    if n_new == 0 or name not in P:
        return
    arr = P[name]
    shape = list(arr.shape)
    shape[axis] = n_new
    centre = np.broadcast_to(centre, shape) if centre is not None else 0.0
    new = centre + rng.standard_normal(shape) * np.broadcast_to(scale, shape)
    P[name] = np.concatenate([arr, new], axis=axis)


def _add_new_levels(P: dict, spec: ModelSpec, A: dict, configs: pd.DataFrame, rng) -> None:
    ncell = len(spec.coords["cell"])
    n_new_cells = int(max(A["cell_idx"].max() + 1 - ncell, 0))
    if n_new_cells:
        new = sorted(set(cell_labels(configs)[A["cell_idx"] >= ncell]))
        if spec.config["pooling"] != "partial":
            raise ValueError(
                f"the {spec.name} model has no population distribution for unseen hardware x family cells "
                f"({', '.join(new)}); fit the hierarchical model to predict them"
            )
        warnings.warn(
            f"hardware x family {', '.join(new)} not in the training data: predicted from the population "
            "distribution of cells (wider intervals)", NewLevelWarning, stacklevel=3)
        pri = spec.config["priors"]
        ncoef = P["E_mu"].shape[-1]
        for b in ("E", "T"):
            tau = np.asarray(pri["tau_coef"])[:ncoef]
            _extend(P, f"{b}_beta", n_new_cells, P[f"{b}_mu"][:, None, :], tau, rng, axis=1)
            if f"{b}_psi_cell" in P:
                _extend(P, f"{b}_psi_cell", n_new_cells, None, pri["tau_psi"], rng, axis=1)
                P[f"{b}_psi_cell"][:, ncell:, 0] = 0.0  # single stays the reference
        _extend(P, "curve_cell", n_new_cells, P["curve_mu"][:, None, :], pri["tau_curve"], rng, axis=1)
    if "group_idx" in A and "E_u" in P:
        ngroup = P["E_u"].shape[1]
        n_new = int(max(A["group_idx"].max() + 1 - ngroup, 0))
        _extend(P, "E_u", n_new, None, P["E_u_tau"][:, None], rng, axis=1)


def _group_codes(spec: ModelSpec, configs: pd.DataFrame) -> np.ndarray | None:
    """Group codes; unseen configuration families get new codes, one per family."""
    if not spec.config.get("group_effects"):
        return None
    known = {g: i for i, g in enumerate(spec.config["levels"]["group"])}
    codes, uniques = pd.factorize(group_keys(configs))
    lookup = np.array([known.get(u, -1) for u in uniques])
    new_rank = np.cumsum(lookup < 0) - 1
    mapped = np.where(lookup >= 0, lookup, len(known) + new_rank)
    return mapped[codes].astype("int64")


def predict_draws(idata, configs: pd.DataFrame, mode: str = "pre", n_draws: int | None = None,
                  seed: int | None = None, residual: bool = True) -> dict[str, np.ndarray]:
    """Posterior-predictive draws of log energy, log time and log efficiency.

    Parameters
    ----------
    idata : arviz.InferenceData
        A posterior written by :func:`bayes_energy.models.sample.fit`.
    configs : pandas.DataFrame
        Candidate runs with :data:`PRE_RUN_COLUMNS` (extra columns ignored).
    mode : {"pre", "post"}
        ``pre`` draws the efficiency from the speedup curves; ``post`` uses
        a measured ``efficiency`` column where one is given.
    n_draws : int, optional
        Thin the posterior to this many draws.
    seed : int, optional
    residual : bool, default True
        Add the residual noise and the efficiency scatter (posterior-predictive
        draws). False gives draws of the expected outcome (the posterior of the
        mean), whose spread is the model's uncertainty alone.

    Returns
    -------
    dict
        ``log_energy_j``, ``log_time_s`` and ``log_eta``, each (sample, candidate).
    """
    from .models.io import load_spec

    if mode not in ("pre", "post"):
        raise ValueError(f"mode must be 'pre' or 'post', got {mode!r}")
    rng = np.random.default_rng(seed)
    spec = load_spec(idata)
    eff = configs["efficiency"].to_numpy(float) if (mode == "post" and "efficiency" in configs.columns) else None
    cands = check_candidates(configs)
    if "group" in configs.columns:
        cands["group"] = configs["group"].to_numpy()
    A = spec.arrays(cands, allow_new=True)
    groups = _group_codes(spec, cands)
    if groups is not None:
        A["group_idx"] = groups
    P = _posterior_arrays(idata, n_draws, rng)
    _add_new_levels(P, spec, A, cands, rng)
    S, n = P["E_sigma"].shape[0], len(cands)
    c = spec.config["centre"]
    # candidates x samples, so each candidate's draws are contiguous for the summaries
    out = {k: np.empty((n, S)) for k in ("log_energy_j", "log_time_s", "log_eta")}
    chunk = max(1, _CHUNK_ELEMENTS // (S * 8))
    strat_multi = np.maximum(A["strategy_idx"] - 1, 0)
    # Residual noise: each draw s gets a pool of _POOL iid variates from its own
    # distribution (Student-t with nu_s, or standard normal) and every candidate
    # takes one pool column. Each candidate's predictive draws are exactly
    # distributed; drawing pools instead of S x n Student-t variates is ~10x faster.
    pools = {  # (pool, sample): a candidate's column is one contiguous row
        "E": rng.standard_t(np.broadcast_to(P["E_nu"][None, :], (_POOL, S))),
        "T": rng.standard_t(np.broadcast_to(P["T_nu"][None, :], (_POOL, S))),
        "eta": rng.standard_normal((_POOL, S)),
    }

    def noise(kind, width):
        # distinct pool columns for the candidates of a chunk: column j holds S independent
        # draws (one per posterior draw), so each candidate's noise is exactly distributed
        return pools[kind][rng.choice(_POOL, size=width, replace=False)].T

    for lo in range(0, n, chunk):
        sl = slice(lo, min(lo + chunk, n))
        a = {k: (v[sl] if isinstance(v, np.ndarray) and v.shape[:1] == (n,) else v) for k, v in A.items()}
        width = sl.stop - sl.start
        theta = curve_theta(P, a, np)
        log_eta = curve_log_eta(a["n_gpus"], a["curve"], theta, np)
        scatter = (a["curve"] > 0) & (a["n_gpus"] > 1)
        if scatter.any() and residual:
            log_eta = log_eta + np.where(scatter, P["eta_sigma"][:, strat_multi[sl]] * noise("eta", width), 0.0)
        if eff is not None:
            known = np.isfinite(eff[sl])
            log_eta = np.where(known, np.log(np.where(known, eff[sl], 1.0)), log_eta)
        mu_E = block_mean(P, "E", a, log_eta, np)
        sig_E = P["E_sigma"][:, a["strategy_idx"]] if P["E_sigma"].ndim == 2 else P["E_sigma"][:, None]
        eps_E = noise("E", width) * sig_E if residual else np.zeros((S, width))
        mu_T = block_mean(P, "T", a, log_eta, np) + P["T_on_E_resid"][:, None] * eps_E
        sig_T = P["T_sigma"][:, a["strategy_idx"]] if P["T_sigma"].ndim == 2 else P["T_sigma"][:, None]
        out["log_energy_j"][sl] = (mu_E + eps_E + c["log_energy"]).T
        eps_T = noise("T", width) * sig_T if residual else 0.0
        out["log_time_s"][sl] = (mu_T + eps_T + c["log_time"]).T
        out["log_eta"][sl] = log_eta.T
    return {k: v.T for k, v in out.items()}


def summarize_draws(draws: np.ndarray, prob: float, prefix: str, log: bool = False, scale: float = 1.0) -> pd.DataFrame:
    """Mean, median and central ``prob`` interval of each column of ``draws``.

    With ``log=True`` the draws are logarithms: order statistics are taken on
    the log scale (exactly those of the exponentiated draws) and only the mean
    needs the exponential. ``scale`` multiplies the result (e.g. J -> kWh).
    """
    rows = np.ascontiguousarray(draws.T)  # one candidate per row: contiguous partitions
    S = rows.shape[1]
    k = [int(np.floor((1 - prob) / 2 * (S - 1))), (S - 1) // 2, int(np.ceil((1 + prob) / 2 * (S - 1)))]
    part = np.partition(rows, sorted(set(k)), axis=1)
    lo, med, hi = part[:, k[0]], part[:, k[1]], part[:, k[2]]
    mean = np.exp(rows).mean(axis=1) if log else rows.mean(axis=1)
    if log:
        lo, med, hi = np.exp(lo), np.exp(med), np.exp(hi)
    return pd.DataFrame({f"{prefix}_mean": mean * scale, f"{prefix}_median": med * scale,
                         f"{prefix}_lo": lo * scale, f"{prefix}_hi": hi * scale})


def predict(idata, configs: pd.DataFrame, prob: float = DEFAULT_PROB, mode: str = "pre",
            n_draws: int | None = None, seed: int | None = None, return_draws: bool = False):
    """Predictive distribution of energy (J and kWh) and time for candidate runs.

    Parameters
    ----------
    idata : arviz.InferenceData
        A fitted posterior (``posterior.nc``).
    configs : pandas.DataFrame
        Candidates: :data:`PRE_RUN_COLUMNS`; extra columns are kept in the
        output but not used; post-run columns (``time_s``, ``energy_j``,
        ``speedup``, ``efficiency``) are ignored before the run.
    prob : float, default 0.9
        Central interval probability.
    mode : {"pre", "post"}
    n_draws, seed
        See :func:`predict_draws`.
    return_draws : bool
        Also return the draws dict.

    Returns
    -------
    pandas.DataFrame
        The candidates with ``energy_j_*``, ``energy_kwh_*`` and ``time_s_*``
        columns (``mean``, ``median``, ``lo``, ``hi``) and ``prob``. ``_mean``
        is the Monte Carlo mean over the draws. The Student-t residual on the
        log scale gives the energy itself no finite expectation, so the mean
        is sensitive to a few extreme draws: prefer the median and the
        interval, as :func:`bayes_energy.plan.plan` does.

    Examples
    --------
    >>> import bayes_energy as be  # doctest: +SKIP
    >>> be.predict(idata, candidates, prob=0.9)[["energy_kwh_lo", "energy_kwh_hi"]]  # doctest: +SKIP
    """
    if not 0 < prob < 1:
        raise ValueError(f"prob must lie in (0, 1), got {prob}")
    draws = predict_draws(idata, configs, mode=mode, n_draws=n_draws, seed=seed)
    energy = summarize_draws(draws["log_energy_j"], prob, "energy_j", log=True)
    kwh = energy.rename(columns=lambda col: col.replace("energy_j", "energy_kwh")) / KWH_TO_J
    parts = [configs.reset_index(drop=True), energy, kwh,
             summarize_draws(draws["log_time_s"], prob, "time_s", log=True)]
    out = pd.concat(parts, axis=1)
    out["prob"] = prob
    return (out, draws) if return_draws else out


def main(argv: list[str] | None = None) -> int:
    """``python -m bayes_energy.predict``."""
    parser = argparse.ArgumentParser(prog="python -m bayes_energy.predict", description=__doc__.split("\n\n")[0])
    parser.add_argument("--posterior", required=True, help="posterior.nc written by bayes_energy.fit")
    parser.add_argument("--configs", required=True, help="CSV of candidate runs")
    parser.add_argument("--out", required=True, help="CSV to write")
    parser.add_argument("--prob", type=float, default=DEFAULT_PROB, help="central interval probability (default %(default)s)")
    parser.add_argument("--mode", choices=("pre", "post"), default="pre")
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args(argv)
    from .models.io import PosteriorFileError, load

    try:
        idata = load(args.posterior)
        configs = pd.read_csv(args.configs)
        with warnings.catch_warnings():
            warnings.simplefilter("always", NewLevelWarning)
            table = predict(idata, configs, prob=args.prob, mode=args.mode, seed=args.seed)
    except (SchemaError, PosteriorFileError, ValueError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(out.suffix + ".tmp")
    table.to_csv(tmp, index=False)
    tmp.replace(out)
    print(f"wrote {len(table)} predictions to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
