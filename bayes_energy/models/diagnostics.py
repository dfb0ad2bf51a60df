"""Convergence and predictive diagnostics of a fit, by ArviZ.

Thresholds: R-hat <= 1.01, bulk and tail ESS >= 400, no divergences, BFMI >= 0.3.
"""

from __future__ import annotations

import warnings

import arviz as az
import numpy as np
import pandas as pd

from .. import DEFAULT_PROB

__all__ = ["THRESHOLDS", "diagnose", "summarize", "summary_vars"]

THRESHOLDS = {"max_rhat": 1.01, "min_ess_bulk": 400, "min_ess_tail": 400, "divergences": 0, "min_bfmi": 0.3}


def summary_vars(idata: az.InferenceData, include_z: bool = False) -> list[str]:
    """Posterior variables worth a summary row (non-centred z's only on request)."""
    names = [v for v in idata.posterior.data_vars if v not in ("log_eta_curve",)]
    return names if include_z else [v for v in names if not v.endswith("_z")]


def summarize(idata: az.InferenceData, prob: float = DEFAULT_PROB) -> pd.DataFrame:
    """``az.summary`` of the interpretable parameters, one row per parameter.

    Intervals are highest-density intervals of probability ``prob`` (the
    package default, 0.9: columns ``hdi_5%`` and ``hdi_95%``).
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        s = az.summary(idata, var_names=summary_vars(idata), hdi_prob=prob)
    return s.rename_axis("parameter")


def diagnose(idata: az.InferenceData, loo_var: str = "log_energy") -> dict:
    """Diagnostics as a flat dict (written to ``diagnostics.json``).

    Keys: ``divergences``, ``max_rhat``, ``min_ess_bulk``, ``min_ess_tail``,
    ``min_bfmi``, ``elpd_loo``, ``elpd_loo_se``, ``p_loo``, ``max_pareto_k``,
    ``n_pareto_k_gt_0_7``, ``passed``, ``failed`` (the failing checks) and
    ``thresholds``.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        s = az.summary(idata, var_names=summary_vars(idata, include_z=True), kind="diagnostics")
        s = s[np.isfinite(s["r_hat"])]  # constants (reference levels) have no R-hat
        bfmi = az.bfmi(idata)
    out = {
        "divergences": int(idata.sample_stats["diverging"].sum()),
        "max_rhat": float(s["r_hat"].max()),
        "min_ess_bulk": float(s["ess_bulk"].min()),
        "min_ess_tail": float(s["ess_tail"].min()),
        "min_bfmi": float(np.min(bfmi)),
        "n_draws": int(idata.posterior.sizes["draw"]),
        "n_chains": int(idata.posterior.sizes["chain"]),
    }
    if "log_likelihood" in idata.groups() and loo_var in idata.log_likelihood:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            loo = az.loo(idata, var_name=loo_var, pointwise=True)
        k = np.asarray(loo.pareto_k)
        out.update({
            "elpd_loo": float(loo.elpd_loo), "elpd_loo_se": float(loo.se), "p_loo": float(loo.p_loo),
            "max_pareto_k": float(np.max(k)), "n_pareto_k_gt_0_7": int(np.sum(k > 0.7)),
        })
    t = THRESHOLDS
    failed = []
    if out["divergences"] > t["divergences"]:
        failed.append(f"{out['divergences']} divergences (want 0)")
    if out["max_rhat"] > t["max_rhat"]:
        failed.append(f"max R-hat {out['max_rhat']:.3f} > {t['max_rhat']}")
    if out["min_ess_bulk"] < t["min_ess_bulk"]:
        failed.append(f"min bulk ESS {out['min_ess_bulk']:.0f} < {t['min_ess_bulk']}")
    if out["min_ess_tail"] < t["min_ess_tail"]:
        failed.append(f"min tail ESS {out['min_ess_tail']:.0f} < {t['min_ess_tail']}")
    if out["min_bfmi"] < t["min_bfmi"]:
        failed.append(f"min BFMI {out['min_bfmi']:.2f} < {t['min_bfmi']}")
    out["passed"] = not failed
    out["failed"] = failed
    out["thresholds"] = dict(t)
    return out
