"""Where a fit's time goes: NUTS warm-up against draws, for several sampler settings.

Compiles the hierarchical model once per table (nutpie, the package's compile cache), then samples
it with each setting in turn and records wall seconds, leapfrog steps in warm-up and in the draws,
the mean steps per draw, divergences, max R-hat and min ESS_bulk:

* ``before``: the package's defaults until 2026-12-05 (4 x (1000 tune + 1000 draws), target
  acceptance 0.95, nutpie's tree depth 10);
* ``tune300``: the same with 300 tuning steps;
* ``depth8_ta0.8``: 300 tuning steps, target 0.8, trees capped at depth 8;
* ``default``: today's defaults (``bayes_energy.models.DRAWS/TUNE`` and
  :func:`bayes_energy.models.sample.nuts_settings`), at two seeds.

Early warm-up, before the low-rank mass matrix has adapted, runs trees near the depth limit
(~1000 leapfrog steps at depth 10); how long that phase lasts grows with ``tune``. That is what
the ``warmup_steps`` column shows.

    python benchmarks/bench_warmup.py --data ../shared/datasets/mayaki2026     # ~8 min on 2 cores

Writes ``benchmarks/results/warmup.csv`` and ``.md``.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _tables import RESULTS, markdown  # noqa: E402


def settings() -> list[tuple[str, int, dict]]:
    """(label, seed, nutpie.sample keyword arguments)."""
    from bayes_energy.models import DRAWS, TUNE
    from bayes_energy.models.sample import nuts_settings

    old = {"draws": 1000, "tune": 1000, "low_rank_modified_mass_matrix": True, "target_accept": 0.95, "maxdepth": 10}
    now = {"draws": DRAWS, "tune": TUNE, **nuts_settings()}
    return [("before", 2026, old), ("tune300", 2026, old | {"tune": 300}),
            ("depth8_ta0.8", 2026, old | {"tune": 300, "target_accept": 0.8, "maxdepth": 8}),
            ("default", 2026, now), ("default", 7, now)]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default=None, help="the authors' CSV or its folder (default: see find_mayaki2026)")
    p.add_argument("--tables", nargs="+", default=["reference", "cpu"], choices=["reference", "cpu"])
    p.add_argument("--out", default=None, help="output folder (default benchmarks/results)")
    a = p.parse_args(argv)
    warnings.filterwarnings("ignore")
    import nutpie
    from bayes_energy.models.cache import compile_nutpie
    import pandas as pd

    from bayes_energy.datasets import DEFAULT_DATA, load_mayaki2026, load_sweep
    from bayes_energy.models import default_config
    from bayes_energy.models.build import build_model
    from bayes_energy.models.diagnostics import diagnose
    from bayes_energy.models.sample import kept_vars
    from bayes_energy.models.spec import ModelSpec

    rows = []
    for table in a.tables:
        df = load_mayaki2026(a.data) if table == "reference" else load_sweep(list(DEFAULT_DATA))
        t0 = time.perf_counter()
        model = build_model(ModelSpec.from_table(df, "hierarchical", default_config("hierarchical")), df)
        compiled = compile_nutpie(model, var_names=kept_vars(model))
        compile_s = time.perf_counter() - t0
        for label, seed, kw in settings():
            if table == "cpu" and label in ("tune300", "depth8_ta0.8"):
                continue
            t0 = time.perf_counter()
            idata = nutpie.sample(compiled, chains=4, cores=2, seed=seed, progress_bar=False, **kw)
            wall = time.perf_counter() - t0
            st = idata.sample_stats
            d = diagnose(idata)
            rec = {"table": f"{table} ({len(df)} rows)", "setting": label, "seed": seed,
                   "chains_x_tune_draws": f"4 x ({kw['tune']} + {kw['draws']})", "target_accept": kw["target_accept"],
                   "maxdepth": kw["maxdepth"], "compile_s": round(compile_s, 1), "sample_s": round(wall, 1),
                   "warmup_steps": int(idata.warmup_sample_stats["n_steps"].sum()),
                   "draw_steps": int(st["n_steps"].sum()), "steps_per_draw": round(float(st["n_steps"].mean()), 1),
                   "divergences": d["divergences"], "max_rhat": round(d["max_rhat"], 3),
                   "min_ess_bulk": round(d["min_ess_bulk"])}
            rows.append(rec)
            print(rec, flush=True)
    res = pd.DataFrame(rows)
    out = Path(a.out) if a.out else RESULTS
    out.mkdir(parents=True, exist_ok=True)
    res.to_csv(out / "warmup.csv", index=False)
    title = ("# NUTS warm-up against draws, hierarchical model, nutpie, 4 chains on 2 cores "
             "(`python benchmarks/bench_warmup.py`)")
    (out / "warmup.md").write_text(title + "\n\n" + markdown(res) + "\n")
    print(markdown(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
