"""Simulated sweep tables from known parameters or prior draws.

The simulator uses the model's own predictive
(:mod:`bayes_energy.models.predictive`, on the law of
:mod:`bayes_energy.models.law`), the one :mod:`bayes_energy.predict` draws
from. One replication:

1. the log efficiency of every multi-device row is drawn from its speedup
   curve plus the model's Normal scatter (single-device rows: 0);
2. ln energy = :math:`\\mu^E` (with that efficiency) + Student-t noise,
   around a fixed centre ``energy_centre_j``;
3. ln time = :math:`\\mu^T` + ``T_on_E_resid`` x the energy noise + Student-t
   noise, around ``time_centre_s``.

Functions
---------
simulated_design
    A small grid of configurations (no outcomes) on made-up hardware.
simulate_from_params
    Pure numpy: a design, a spec and a full parameter dict -> a sweep table.
simulate_sweep
    Parameters drawn from the model's prior (PyMC), optionally with some fixed
    (``pm.do``), then :func:`simulate_from_params`.
tiny_sweep
    A small fixed simulated table for doctests and unit tests (no PyMC).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .models import default_config
from .models.curves import CURVES
from .models.predictive import energy_time_draws, log_eta_draws, rng_noise
from .models.spec import ModelSpec
from .schema import validate

__all__ = ["placeholder_table", "simulated_design", "simulate_from_params", "simulate_sweep", "tiny_sweep", "design_spec",
           "SIM_ENERGY_CENTRE_J", "SIM_TIME_CENTRE_S"]

#: Centre of simulated ln energy (J) and ln time (s).
SIM_ENERGY_CENTRE_J = 1.0e5
SIM_TIME_CENTRE_S = 100.0


def simulated_design(n_configs: int = 6, hardware: tuple[str, ...] = ("sim-gpu-a", "sim-gpu-b"),
                     family: str = "gpt", strategy: str = "fsdp", n_gpus: tuple[int, ...] = (2, 4),
                     seed: int | None = 0) -> pd.DataFrame:
    """A grid of configurations without outcomes.

    Each of ``n_configs`` configurations (depth, width, sequence length, batch
    drawn from small sets) runs on every hardware type on one device
    (``single``) and on each of ``n_gpus`` with ``strategy``. A configuration
    on one hardware type is one configuration family (``group``).

    Returns
    -------
    pandas.DataFrame
        Pre-run columns plus ``group`` and ``workload``.
    """
    rng = np.random.default_rng(seed)
    rows = []
    seen = set()
    while len(seen) < n_configs:
        cfg = (int(rng.choice([4, 6, 8, 12])), int(rng.choice([256, 384, 512, 768])),
               int(rng.choice([64, 128, 256])), int(rng.choice([4, 8, 16])))
        seen.add(cfg)
    for h, hw in enumerate(hardware):
        for k, (L, d, S, B) in enumerate(sorted(seen)):
            steps = 200
            for strat, n in [("single", 1)] + [(strategy, int(g)) for g in n_gpus]:
                rows.append({"hardware": hw, "family": family, "num_layers": L, "hidden_size": d,
                             "heads": max(d // 64, 1), "ff": 4 * d, "seq_len": S, "batch_size": B, "grad_accum": 1,
                             "tokens": float(B * S * steps), "strategy": strat, "n_gpus": n,
                             "group": f"sim{h}-{k:03d}", "workload": "simulated"})
    return pd.DataFrame(rows)


def placeholder_table(design: pd.DataFrame) -> pd.DataFrame:
    """The design with unit outcomes, so a spec and a model can be built on it."""
    df = design.copy()
    for col in ("time_s", "energy_j", "efficiency", "speedup"):
        df[col] = 1.0
    df["efficiency"] = 1.0
    df["speedup"] = df["n_gpus"].astype(float)
    return df


def design_spec(design: pd.DataFrame, model: str = "pooled", config: dict | None = None,
                energy_centre_j: float = SIM_ENERGY_CENTRE_J, time_centre_s: float = SIM_TIME_CENTRE_S) -> ModelSpec:
    """The model spec of a design, with the simulation's outcome centres.

    Fitting a simulated table with this spec (``model_data(spec, table)``)
    keeps the intercepts on the scale they were simulated on.
    """
    spec = ModelSpec.from_table(placeholder_table(design), model, default_config(model, config))
    spec.config["centre"]["log_energy"] = float(np.log(energy_centre_j))
    spec.config["centre"]["log_time"] = float(np.log(time_centre_s))
    return spec


def simulate_from_params(design: pd.DataFrame, spec: ModelSpec, params: dict, seed: int | None = None,
                         energy_source: str = "simulated") -> pd.DataFrame:
    """Simulate outcomes for a design from one full set of parameter values.

    Parameters
    ----------
    design : pandas.DataFrame
        Pre-run columns (see :func:`simulated_design`).
    spec : ModelSpec
        From :func:`design_spec` (its centres place the outcomes).
    params : dict
        Arrays without a sample axis, as the model names them: ``E_beta``
        (cell, coef), ``E_psi`` (strategy), optionally ``E_psi_cell`` and
        ``E_u``; the same for ``T_``; ``curve_cell`` (cell, curve_param),
        optionally ``curve_beta``; ``eta_sigma`` (strategy_multi), ``eta_nu`` (optional: Student-t scatter, else normal);
        ``E_sigma``, ``T_sigma`` (scalar or per strategy); ``E_nu``, ``T_nu``;
        ``T_on_E_resid``.
    seed : int, optional

    Returns
    -------
    pandas.DataFrame
        A validated sweep table with ``speedup``, ``efficiency``, ``group``.
    """
    rng = np.random.default_rng(seed)
    P = {k: np.asarray(v, dtype=float)[None] for k, v in params.items()}  # a sample axis of one
    A = spec.arrays(design)
    if "group_idx" in A:
        A["group_idx"] = spec.index_of("group", design["group"], allow_new=False)
    noise = rng_noise(P, rng)
    log_eta = log_eta_draws(P, A, noise)
    log_e, log_t = energy_time_draws(P, A, log_eta, spec.config["centre"], noise)
    log_eta, log_e, log_t = log_eta[0], log_e[0], log_t[0]
    out = design.copy().reset_index(drop=True)
    out["energy_j"] = np.exp(log_e)
    out["time_s"] = np.exp(log_t)
    out["energy_source"] = energy_source
    out["repeats"] = 1
    table = validate(out, source="simulated sweep")
    table["efficiency"] = np.exp(log_eta)
    table["speedup"] = table["efficiency"] * table["n_gpus"]
    return table


#: Variables a simulation needs from a prior draw.
_NEEDED = ("E_beta", "E_psi", "E_psi_cell", "E_u", "T_beta", "T_psi", "T_psi_cell", "curve_cell", "curve_beta",
           "eta_sigma", "eta_nu", "E_sigma", "E_nu", "T_sigma", "T_nu", "T_on_E_resid", "E_mu", "T_mu", "curve_mu")


def prior_draws(design: pd.DataFrame, spec: ModelSpec, draws: int = 1, fixed: dict | None = None,
                seed: int | None = None):
    """Prior draws (``arviz`` ``prior`` group) of the model built on ``design``.

    ``fixed`` maps free variables to values (``pm.do``); deterministics follow.
    """
    import warnings

    import pymc as pm

    from .models.build import build_model

    model = build_model(spec, placeholder_table(design))
    if fixed:
        model = pm.do(model, {k: np.asarray(v, dtype=float) for k, v in fixed.items()})
    names = [v for v in _NEEDED if v in model.named_vars]
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        idata = pm.sample_prior_predictive(draws=draws, var_names=names, random_seed=seed)
    return idata.prior


def simulate_sweep(design: pd.DataFrame | None = None, model: str = "pooled", config: dict | None = None,
                   fixed: dict | None = None, seed: int | None = 0, return_params: bool = False):
    """Simulate a sweep table from the model's prior, optionally with fixed parameters.

    Parameters
    ----------
    design : pandas.DataFrame, optional
        Default :func:`simulated_design` (``seed``).
    model : {"pooled", "hierarchical"}
    config : dict, optional
        Config overrides (see :func:`bayes_energy.models.default_config`).
    fixed : dict, optional
        Known values of free parameters, e.g. ``{"E_mu": [0, 0.1, 0.45, -0.9],
        "E_psi_free": [-0.3], "curve_mu": [-2, -1, 0, 0]}`` (curve
        parameters in the order of ``models.curves.CURVE_PARAMS``); the rest is drawn
        from the prior.
    seed : int, optional
    return_params : bool
        Also return the parameter dict used.

    Examples
    --------
    >>> table = simulate_sweep(seed=1)  # doctest: +SKIP
    """
    design = simulated_design(seed=seed) if design is None else design
    spec = design_spec(design, model, config)
    prior = prior_draws(design, spec, 1, fixed, seed)
    params = {k: prior[k].values[0, 0] for k in prior.data_vars}
    table = simulate_from_params(design, spec, params, seed=None if seed is None else seed + 1)
    return (table, params) if return_params else table


#: The curves' default prior means, in the order of ``curve_param``.
CURVE_PRIOR_MU = tuple(m for c in CURVES.values() for m in c.prior_mu)


def tiny_sweep(seed: int = 0) -> pd.DataFrame:
    """A small fixed simulated sweep (12 rows, 2 hardware types, pooled-model parameters).

    Needs no PyMC: the parameter values are fixed here.

    Examples
    --------
    >>> tiny_sweep().shape[0]
    12
    """
    design = simulated_design(n_configs=2, seed=3)
    spec = design_spec(design, "pooled")
    P = {
        "E_beta": [[0.0, 0.1, 0.45, -0.9], [0.4, 0.1, 0.45, -0.9]],
        "E_psi": [0.0, -0.3],
        "T_beta": [[0.0, 0.1, 0.4, -1.0], [0.3, 0.1, 0.4, -1.0]],
        "T_psi": [0.0, -0.2],
        "curve_cell": [list(CURVE_PRIOR_MU)] * 2,
        "eta_sigma": [0.05],
        "E_sigma": 0.05, "E_nu": 10.0, "T_sigma": 0.05, "T_nu": 10.0, "T_on_E_resid": 0.5,
    }
    return simulate_from_params(design, spec, P, seed=seed)
