"""Sampler choices side by side on the hierarchical model and the 629-row reference table.

For each sampler (nutpie, PyMC's default NUTS on the C backend, PyMC's NUTS on
numba) it times compilation and sampling separately, then reports divergences,
max R-hat, min bulk/tail ESS and ESS per second with and without compilation.
The winner by min-ESS_bulk per second *including* compilation is the default
of ``python -m bayes_energy.fit``.

    python benchmarks/bench_samplers.py [--chains 4 --draws 1000 --tune 1000] [--samplers nutpie pymc numba]

Writes benchmarks/results/samplers.csv and .md.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import pandas as pd
import pymc as pm

from bayes_energy.datasets import load_mayaki2026
from bayes_energy.models import default_config
from bayes_energy.models.build import build_model
from bayes_energy.models.diagnostics import diagnose
from bayes_energy.models.sample import _kept_vars
from bayes_energy.models.spec import ModelSpec

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _tables import write_table  # noqa: E402


def run(sampler: str, model: pm.Model, chains: int, draws: int, tune: int, seed: int) -> dict:
    t0 = time.perf_counter()
    if sampler == "nutpie":
        import nutpie

        compiled = nutpie.compile_pymc_model(model, var_names=_kept_vars(model))
        t1 = time.perf_counter()
        idata = nutpie.sample(compiled, draws=draws, tune=tune, chains=chains, seed=seed, cores=2,
                              progress_bar=False, low_rank_modified_mass_matrix=True)
        t2 = time.perf_counter()
    else:
        kwargs = {"compile_kwargs": {"mode": "NUMBA"}} if sampler == "numba" else {}
        with model:
            # PyMC compiles inside pm.sample; time a 1-draw run to separate compile from sampling
            pm.sample(draws=1, tune=1, chains=1, progressbar=False, random_seed=seed, compute_convergence_checks=False, **kwargs)
            t1 = time.perf_counter()
            idata = pm.sample(draws=draws, tune=tune, chains=chains, cores=2, progressbar=False, random_seed=seed,
                              var_names=_kept_vars(model), **kwargs)
            t2 = time.perf_counter()
    d = diagnose(idata)
    return {
        "sampler": sampler, "compile_s": t1 - t0, "sample_s": t2 - t1, "total_s": t2 - t0,
        "divergences": d["divergences"], "max_rhat": d["max_rhat"], "min_ess_bulk": d["min_ess_bulk"],
        "min_ess_tail": d["min_ess_tail"], "ess_per_s_sampling": d["min_ess_bulk"] / (t2 - t1),
        "ess_per_s_total": d["min_ess_bulk"] / (t2 - t0),
        "mean_tree_depth": float(idata.sample_stats["depth"].mean()) if "depth" in idata.sample_stats else float("nan"),
    }


def main() -> None:
    warnings.filterwarnings("ignore")
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default=None, help="reference dataset path (default: the usual lookup)")
    p.add_argument("--model", default="hierarchical")
    p.add_argument("--chains", type=int, default=4)
    p.add_argument("--draws", type=int, default=1000)
    p.add_argument("--tune", type=int, default=1000)
    p.add_argument("--seed", type=int, default=2026)
    p.add_argument("--samplers", nargs="+", default=["nutpie", "pymc", "numba"])
    args = p.parse_args()
    df = load_mayaki2026(args.data)
    rows = []
    for sampler in args.samplers:
        spec = ModelSpec.from_table(df, args.model, default_config(args.model))
        model = build_model(spec, df)
        rows.append(run(sampler, model, args.chains, args.draws, args.tune, args.seed))
        print(pd.DataFrame(rows).to_string(index=False, float_format=lambda v: f"{v:.3g}"), flush=True)
        csv = write_table(pd.DataFrame(rows), "samplers",  # after each sampler: a slow one may be stopped
                          f"Samplers: {args.model} model, {len(df)} rows, {args.chains} chains x ({args.tune} tune + {args.draws} draws)")
    print(f"\nwrote {csv}")


if __name__ == "__main__":
    main()
