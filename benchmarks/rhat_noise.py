"""How often a fit's max R-hat exceeds 1.01 from sampling noise alone, given its draws and its slowest parameters.

The harness (``validate_mayaki2026.py``) takes the max of ArviZ's rank-normalised split R-hat over every scalar of a
fit: 536 of them for a hierarchical split fit. Even chains that all sample the same distribution give R-hat above
1 by chance, and the max over hundreds of scalars is driven by the few that mix slowest. This script simulates
chains that sample exactly the target (standard normal): ``slow`` scalars are AR(1) chains whose total ESS is
``ess``, the rest independent draws; it reports the share of ``reps`` simulated fits whose max R-hat is above 1.01.

    python benchmarks/rhat_noise.py            # ~6 min on 2 cores (2026-12-07, beside another job)

Writes benchmarks/results/rhat_noise.csv and .md.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _tables import write_table  # noqa: E402

from bayes_energy.models.diagnostics import max_rhat  # noqa: E402

#: scalars with an R-hat in a hierarchical split fit of the harness (seed 2026, pooled setting)
SCALARS = 536


def share_above(chains: int, draws: int, slow: int, ess: float, reps: int, rng: np.random.Generator,
                scalars: int = SCALARS, threshold: float = 1.01) -> float:
    """Share of ``reps`` simulated fits whose max R-hat over ``scalars`` exceeds ``threshold``."""
    import arviz as az
    import xarray as xr
    from scipy.signal import lfilter

    f = ess / (chains * draws)  # ESS per draw of an AR(1) chain: (1 - rho) / (1 + rho)
    rho = (1 - f) / (1 + f)
    above = 0
    for rep in range(reps):
        x = rng.standard_normal((chains, draws, scalars))
        if slow:
            x[:, :, :slow] = lfilter([1.0], [1.0, -rho], x[:, :, :slow] * np.sqrt(1 - rho**2), axis=1)
        m = max_rhat(x)
        if rep == 0:  # the vectorised formula is ArviZ's
            ref = float(az.rhat(xr.Dataset({"x": (("chain", "draw", "k"), x)}))["x"].max())
            assert abs(m - ref) < 1e-9, (m, ref)
        above += bool(m > threshold)
    return above / reps


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=40)
    p.add_argument("--seed", type=int, default=2026)
    args = p.parse_args(argv)
    warnings.filterwarnings("ignore")
    import pandas as pd

    rng = np.random.default_rng(args.seed)
    rows = []
    # the harness's 2 x 1000 draws, then twice the draws for ten slow scalars
    grid = [(2, 1000, slow, ess) for slow in (1, 10, 30) for ess in (150, 300, 600, 1200)]
    grid += [(2, 2000, 10, ess) for ess in (300, 600, 1200)]
    for chains, draws, slow, ess in grid:
        rows.append({"chains": chains, "draws": draws, "slow_scalars": slow, "their_ess": ess,
                     "p_max_rhat_above_1.01": share_above(chains, draws, slow, ess, args.reps, rng)})
        print(rows[-1], flush=True)
    out = pd.DataFrame(rows)
    print(out.to_string(index=False))
    path = write_table(out, "rhat_noise", f"Share of simulated fits (chains that all sample the target; {SCALARS} "
                                          f"scalars, the slowest AR(1) at the given total ESS) whose max R-hat "
                                          f"exceeds 1.01; {args.reps} fits per row "
                                          f"(`python benchmarks/rhat_noise.py`)")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
