"""Posterior geometry: leapfrog steps per draw, with the cells' coefficients sampled directly or rotated.

The log proxies are nearly collinear inside a cell, and with slopes per strategy each cell's design
has exact null directions, so NUTS needs many leapfrog steps per draw, most of them in the warm-up.
``config["cell_basis"] = "rotated"`` samples each cell's coefficients on the rotated basis of its
design (:func:`bayes_energy.models.build.cell_rotation`, the right singular vectors of the design on
the prior's scale; the default since 2026-12-07); ``"coef"`` samples them directly. Chains start at the
posterior mode, as every fit's do (:func:`bayes_energy.models.sample.run_nutpie`).
(A whitening, the QR trick with the prior included, was measured here until 2026-12-07 and removed:
docs/speed.md, sections 10 to 12.)

This script fits the hierarchical model on the 629-row reference table with each variant in turn
(same seed, nutpie with the low-rank mass matrix as the fit uses it, 4 chains x (1000 tune + 1000
draws) by default) and reports the warm-up's leapfrog steps (thousands), leapfrog steps per draw,
tree depth, sampling seconds, divergences, max R-hat, min ESS and ESS per sampling second.

    python benchmarks/bench_geometry.py                      # all variants, ~15 min on 2 cores
    python benchmarks/bench_geometry.py --variants second_order second_order_rotated

Writes benchmarks/results/geometry.csv and .md.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _tables import write_table  # noqa: E402

#: variant -> config overrides of the hierarchical default (so each variant has today's other defaults: since
#: 2026-12-06 the slopes per strategy, 29 coefficients per cell instead of 15)
VARIANTS = {
    "first_order": {"second_order": False, "cell_basis": "coef"},
    "second_order": {"second_order": True, "cell_basis": "coef"},
    "second_order_rotated": {"second_order": True, "cell_basis": "rotated"},
}


def run_variant(df, name: str, chains: int, draws: int, tune: int, seed: int) -> dict:
    from bayes_energy.models.cache import compile_nutpie

    from bayes_energy.models import default_config
    from bayes_energy.models.build import build_model
    from bayes_energy.models.diagnostics import diagnose
    from bayes_energy.models.sample import kept_vars, run_nutpie
    from bayes_energy.models.spec import ModelSpec

    t0 = time.perf_counter()
    spec = ModelSpec.from_table(df, "hierarchical", default_config("hierarchical") | VARIANTS[name])
    model = build_model(spec, df)
    compiled = compile_nutpie(model, var_names=kept_vars(model))
    t1 = time.perf_counter()
    idata = run_nutpie(compiled, draws=draws, tune=tune, chains=chains, seed=seed)
    t2 = time.perf_counter()
    d = diagnose(idata)
    st = idata.sample_stats
    return {"variant": name, "n_coef": len(spec.coords["coef"]), "compile_s": t1 - t0, "sample_s": t2 - t1,
            "warmup_leapfrog_k": float(idata.warmup_sample_stats["n_steps"].sum()) / 1e3,
            "leapfrog_per_draw": float(np.mean(st["n_steps"])), "mean_tree_depth": float(np.mean(st["depth"])),
            "divergences": d["divergences"], "max_rhat": d["max_rhat"], "min_ess_bulk": d["min_ess_bulk"],
            "min_ess_tail": d["min_ess_tail"], "ess_bulk_per_s": d["min_ess_bulk"] / (t2 - t1)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    p.add_argument("--data", default=None)
    p.add_argument("--chains", type=int, default=4)
    p.add_argument("--draws", type=int, default=1000)
    p.add_argument("--tune", type=int, default=1000)
    p.add_argument("--seed", type=int, default=2026)
    args = p.parse_args(argv)
    warnings.filterwarnings("ignore")
    import pandas as pd

    from bayes_energy.datasets import load_mayaki2026

    df = load_mayaki2026(args.data)
    rows = []
    for name in args.variants:
        rows.append(run_variant(df, name, args.chains, args.draws, args.tune, args.seed))
        print(rows[-1], flush=True)
    out = pd.DataFrame(rows)
    print(out.to_string(index=False, float_format=lambda v: f"{v:.3g}"))
    path = write_table(out, "geometry", f"Posterior geometry, hierarchical model, reference table (629 rows), nutpie "
                                        f"{args.chains} x ({args.tune} + {args.draws}), seed {args.seed} "
                                        f"(`python benchmarks/bench_geometry.py {' '.join(argv if argv is not None else sys.argv[1:])}`)")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
