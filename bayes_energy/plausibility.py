r"""Physical plausibility checks of a posterior's predictions (and of the prior's).

A model that fits its data can still predict nonsense where it has none: a
strategy never measured on a cell, a device count beyond the sweep, a GPU
known only by its specifications. These checks encode what physics allows
and are run on the posterior predictive by the tests (and by anyone with
:func:`check_plausibility`):

``energy_floor``
    Spreading a job over :math:`N` devices does not make it take less than
    half the single-device energy: the devices still do at least the same
    arithmetic, plus communication. For a cell x strategy with no
    measurements the median :math:`N`-device energy must stay above
    :math:`0.5\times` the single-device median. Where the cell has data for
    the strategy, the data decide (the check reports them but does not
    apply).
``speedup_ceiling``
    :math:`S(N) = T_1/T_N \le N\,e^{m}`, where :math:`m` is the measured
    super-linear margin: the largest :math:`\ln\eta` in the training table
    (0 when no run was super-linear).
``power_ceiling``
    The average power per device, :math:`E / (T N)`, stays below
    :math:`1.2\times` the device's TDP from ``data/gpu_specs.csv`` where the
    hardware is known there (other hardware: not applied).

Each check is evaluated on medians of the joint pre-run predictive draws
(energy and time of one draw come from the same parameters) for a
representative workload of every cell: the cell's single-device run closest
to its median log compute.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd

from .models.spec import cell_labels

__all__ = ["check_plausibility", "representative_configs", "ENERGY_FLOOR", "POWER_TOLERANCE"]

#: Lowest plausible ratio of N-device to single-device median energy where no data say otherwise.
ENERGY_FLOOR = 0.5
#: Tolerance on the device's TDP for the average power per device.
POWER_TOLERANCE = 1.2


def representative_configs(table: pd.DataFrame) -> pd.DataFrame:
    """One workload per hardware x family cell: its single-device run nearest the cell's median ln compute."""
    from .proxies import add_proxies

    out = []
    p = add_proxies(table)
    lc = np.log(p["compute"].to_numpy(float))
    cells = cell_labels(table)
    for cell in sorted(cells.unique()):
        rows = np.flatnonzero((cells == cell).to_numpy())
        single = [r for r in rows if table["strategy"].iloc[r] == "single"] or list(rows)
        med = np.median(lc[single])
        out.append(table.iloc[[min(single, key=lambda r: abs(lc[r] - med))]])
    keep = [c for c in ("hardware", "family", "num_layers", "hidden_size", "heads", "ff", "seq_len", "batch_size",
                        "grad_accum", "tokens", "workload") if c in table.columns]
    return pd.concat(out, ignore_index=True)[keep]


def _tdp(hardware: str) -> float:
    from .hardware import load_gpu_specs, match_gpu

    key = match_gpu(hardware)
    return float(load_gpu_specs().loc[key, "tdp_w"]) if key is not None else np.nan


def check_plausibility(idata, n_gpus=(2, 4, 8), configs: pd.DataFrame | None = None, seed: int = 0,
                       n_draws: int | None = 1000) -> pd.DataFrame:
    """Evaluate the physics checks on a fitted posterior.

    Parameters
    ----------
    idata : arviz.InferenceData or bayes_energy.models.io.Posterior
        A fit from :func:`bayes_energy.models.sample.fit` (it carries its training table).
    n_gpus : sequence of int
        Device counts to check for every multi-device strategy of the model.
    configs : pandas.DataFrame, optional
        Workloads to check (one per row, without ``strategy`` / ``n_gpus``);
        default :func:`representative_configs` of the training table.
    seed, n_draws
        Passed to :func:`bayes_energy.predict.predict_draws`.

    Returns
    -------
    pandas.DataFrame
        One row per (workload, strategy, device count): ``hardware``,
        ``family``, ``strategy``, ``n_gpus``, ``measured`` (the cell has runs
        of this strategy), ``energy_ratio`` (median E_N / median E_1),
        ``speedup`` (median T_1 / T_N from joint draws), ``power_w_per_device``,
        ``tdp_w``, ``speedup_limit`` and the booleans ``energy_floor_ok``,
        ``speedup_ok``, ``power_ok`` (True where a check does not apply).
    """
    from .models.io import PosteriorFileError, posterior_of
    from .predict import NewLevelWarning, predict_draws

    post = posterior_of(idata)
    spec, train = post.spec, post.table
    if train is None:
        raise PosteriorFileError("the posterior has no training_table group: the checks compare with the measured runs")
    eff = train.loc[train["n_gpus"] > 1, "efficiency"].to_numpy(float)
    eff = eff[np.isfinite(eff) & (eff > 0)]
    margin = max(0.0, float(np.log(eff).max())) if eff.size else 0.0
    work = representative_configs(train) if configs is None else configs.reset_index(drop=True)
    measured = set(zip(cell_labels(train), train["strategy"]))
    multi = [s for s in spec.strategies if s != "single"]
    cands = []
    for i, w in work.iterrows():
        for s, n in [("single", 1)] + [(s, int(n)) for s in multi for n in n_gpus]:
            cands.append(w.to_dict() | {"strategy": s, "n_gpus": n, "_workload": i})
    cands = pd.DataFrame(cands)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NewLevelWarning)
        draws = predict_draws(idata, cands.drop(columns="_workload"), mode="pre", seed=seed, n_draws=n_draws)
    e, t = np.exp(draws["log_energy_j"]), np.exp(draws["log_time_s"])
    rows = []
    for i, grp in cands.groupby("_workload"):
        j1 = int(grp.index[grp["strategy"] == "single"][0])
        e1 = np.median(e[:, j1])
        tdp = _tdp(str(grp["hardware"].iloc[0]))
        cell = cell_labels(grp.iloc[[0]]).iloc[0]
        for j in grp.index[grp["strategy"] != "single"]:
            s, n = cands.at[j, "strategy"], int(cands.at[j, "n_gpus"])
            ratio = float(np.median(e[:, j]) / e1)
            speedup = float(np.median(t[:, j1] / t[:, j]))
            power = float(np.median(e[:, j] / (t[:, j] * n)))
            seen = (cell, s) in measured
            rows.append({"hardware": grp["hardware"].iloc[0], "family": grp["family"].iloc[0], "strategy": s,
                         "n_gpus": n, "measured": seen, "energy_ratio": ratio, "speedup": speedup,
                         "speedup_limit": n * float(np.exp(margin)), "power_w_per_device": power, "tdp_w": tdp,
                         "energy_floor_ok": seen or ratio >= ENERGY_FLOOR,
                         "speedup_ok": speedup <= n * np.exp(margin),
                         "power_ok": not np.isfinite(tdp) or power <= POWER_TOLERANCE * tdp})
    return pd.DataFrame(rows)
