"""Choose the speedup curves' scatter distribution (``eta_noise``) by PSIS-LOO on the reference table.

The hierarchical model is fitted twice on the authors' whole table (no held-out
part is looked at): with normal and with Student-t scatter of the measured ln
efficiency about the curves. ArviZ compares the expected log pointwise predictive
density of the ``log_eta`` observations (and of ``log_energy``/``log_time``, to see that
the energy law does not lose), with Pareto k. The in-sample shape of the
standardised ln-efficiency residuals (share within the normal's 50/80/95 %
bands, excess kurtosis) is printed too. Writes ``results/eta_noise_loo.md``.

Command::

    .venv/bin/python benchmarks/eta_noise_loo.py            # 2 chains x (500 + 500) per variant
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _tables import RESULTS, markdown  # noqa: E402


def residual_shape(idata) -> dict:
    """Standardised in-sample ln-efficiency residuals (posterior median per row), over multi-device rows."""
    from scipy.stats import kurtosis

    from bayes_energy.models.io import training_table
    from bayes_energy.models.predictive import eta_scale, log_eta_draws, scatter_rows
    from bayes_energy.predict import design_and_posterior

    tt = training_table(idata)
    _, A, P = design_and_posterior(idata, tt, None, np.random.default_rng(0))
    rows = scatter_rows(A)
    obs = np.log(tt["efficiency"].to_numpy(float))[rows]
    z = np.median((obs[None] - log_eta_draws(P, A)[:, rows]) / eta_scale(P, A, rows), axis=0)
    return {"in50": np.mean(np.abs(z) < 0.674), "in80": np.mean(np.abs(z) < 1.2816),
            "in95": np.mean(np.abs(z) < 1.96), "excess_kurtosis": float(kurtosis(z))}


def main(argv=None) -> int:
    import arviz as az

    from bayes_energy.datasets import load_mayaki2026
    from bayes_energy.models.diagnostics import diagnose
    from bayes_energy.models.sample import fit

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--draws", type=int, default=500)
    p.add_argument("--tune", type=int, default=500)
    p.add_argument("--chains", type=int, default=2)
    p.add_argument("--seed", type=int, default=2026)
    p.add_argument("--data", default=None)
    a = p.parse_args(argv)
    df = load_mayaki2026(a.data)
    fits, recs = {}, []
    for label in ("normal", "student_t"):
        t0 = time.perf_counter()
        idata = fit(df, "hierarchical", {"eta_noise": label}, draws=a.draws, tune=a.tune, chains=a.chains,
                    seed=a.seed, progress=False)
        wall = time.perf_counter() - t0
        fits[label] = idata
        rec = {"eta_noise": label, "wall_s": wall}
        for var in ("log_eta", "log_energy", "log_time"):
            d = diagnose(idata, loo_var=var)
            rec.update({k: d[k] for k in ("divergences", "max_rhat", "min_ess_bulk")})
            rec.update({f"elpd_{var}": d["elpd_loo"], f"se_{var}": d["elpd_loo_se"],
                        f"k_gt_0.7_{var}": d["n_pareto_k_gt_0_7"]})
        rec.update(residual_shape(idata))
        if "eta_nu" in idata.posterior:
            rec["eta_nu_median"] = float(idata.posterior["eta_nu"].median())
        recs.append(rec)
        print(rec, flush=True)
    tab = pd.DataFrame(recs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cmp = az.compare(fits, var_name="log_eta")
    out = RESULTS / "eta_noise_loo.md"
    out.write_text(
        f"# Speedup-curve scatter: normal vs Student-t, PSIS-LOO on the reference table (629 rows), "
        f"{a.chains} chains x ({a.tune} + {a.draws}), seed {a.seed}\n\n"
        "`python benchmarks/eta_noise_loo.py`. `in50/in80/in95`: share of the standardised in-sample ln-efficiency "
        "residuals inside the normal's 50/80/95 % bands (0.50/0.80/0.95 if the scatter were normal).\n\n"
        + markdown(tab.round(4)) + "\n\n`az.compare` on `log_eta`:\n\n"
        + markdown(cmp.reset_index().rename(columns={"index": "eta_noise"}).round(3)) + "\n")
    tab.to_csv(RESULTS / "eta_noise_loo.csv", index=False, float_format="%.5g")
    print(out.read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
