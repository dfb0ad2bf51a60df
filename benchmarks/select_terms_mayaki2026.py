"""Which configuration terms does the pre-run energy law miss? Chosen on inner splits only.

For each of the 20 outer grouped splits of ``validate_mayaki2026.py`` (same seed, same
settings), a grouped 70/30 split is drawn *inside* the outer training part
(``validate_mayaki2026.inner_split``); candidate term sets are fitted there by ridge least
squares per hardware x family cell (ln J on the pre-run features: no measured efficiency)
and scored on the inner test part. The outer test parts are never touched. The winning set
becomes the hierarchical model's ``second_order`` terms (``models.spec.SECOND_ORDER_FEATURES``),
whose held-out numbers the harness then reports on the outer splits.

Candidates (all with an intercept and strategy offsets per cell):

* ``linear``: the model's linear features (ln compute, memory, tokens, sequence length,
  batch, devices);
* ``+params``: and ln parameters;
* ``+sq``: and the squares of the standardised features, without ln devices (the chosen set);
* ``+sq_devices``: and the square of ln devices too;
* ``+devices_x``: ``+params`` with every feature times ln devices instead of squares;
* ``+strategy_x``: ``+sq`` with the linear slopes per strategy as well (the model's ``strategy_slopes``);
* ``+strategy_compute``, ``+strategy_size``: ``+sq`` with slopes per strategy on ln compute only, or on
  ln compute, memory and parameters.

Command::

    python benchmarks/select_terms_mayaki2026.py --seeds 2026 7   # ~40 s
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import validate_mayaki2026 as V  # noqa: E402
from _tables import write_table  # noqa: E402

from bayes_energy.datasets import load_mayaki2026  # noqa: E402
from bayes_energy.models.spec import SECOND_ORDER_FEATURES, cell_labels, design_frame  # noqa: E402

LINEAR = ["log_compute", "log_memory", "log_tokens", "log_seq_len", "log_batch", "log_n_gpus"]
SQUARED = list(SECOND_ORDER_FEATURES)
#: name -> (linear features, squared features, products with ln devices, features with slopes per strategy)
CANDIDATES = {
    "linear": (LINEAR, [], [], []),
    "+params": (LINEAR + ["log_params"], [], [], []),
    "+sq": (LINEAR + ["log_params"], SQUARED, [], []),
    "+sq_devices": (LINEAR + ["log_params"], SQUARED + ["log_n_gpus"], [], []),
    "+devices_x": (LINEAR + ["log_params"], [], SQUARED, []),
    "+strategy_x": (LINEAR + ["log_params"], SQUARED, [], LINEAR + ["log_params"]),
    "+strategy_compute": (LINEAR + ["log_params"], SQUARED, [], ["log_compute"]),
    "+strategy_size": (LINEAR + ["log_params"], SQUARED, [], ["log_compute", "log_memory", "log_params"]),
}


def _design(x: pd.DataFrame, strat: np.ndarray, rows, ref, cand) -> np.ndarray:
    lin, sq, by_n, per_strategy = cand
    feats = sorted(set(lin) | set(sq) | set(by_n) | {"log_n_gpus"})
    F = x[feats].to_numpy()
    m, s = F[ref].mean(0), F[ref].std(0) + 1e-9
    z = pd.DataFrame((F[rows] - m) / s, columns=feats)
    strategies = sorted(set(strat[ref]) - {"single"})
    cols = [np.ones(len(rows))] + [z[f] for f in lin] + [(strat[rows] == k).astype(float) for k in strategies]
    cols += [z[f] ** 2 for f in sq] + [z[f] * z["log_n_gpus"] for f in by_n]
    cols += [(strat[rows] == k) * z[f] for k in strategies for f in per_strategy]
    return np.column_stack(cols)


def prepare(tab: pd.DataFrame) -> tuple:
    """What :func:`score` needs of a table, computed once: features, ln J, cell and strategy labels."""
    return (design_frame(tab), np.log(tab["energy_j"].to_numpy(float)), cell_labels(tab).to_numpy(),
            tab["strategy"].astype(str).to_numpy())


def score(prepared: tuple, train: np.ndarray, test: np.ndarray, cand, ridge: float = 1e-3) -> dict:
    """Held-out R² and RMSE (ln J) of per-cell ridge fits on ``train``, scored on ``test``."""
    x, y, cell, strat = prepared
    pred = np.empty(len(test))
    for c in np.unique(cell[test]):
        a, b = train[cell[train] == c], cell[test] == c
        Da, Db = _design(x, strat, a, a, cand), _design(x, strat, test[b], a, cand)
        beta = np.linalg.solve(Da.T @ Da + ridge * np.eye(Da.shape[1]), Da.T @ y[a])
        pred[b] = Db @ beta
    r = y[test] - pred
    return {"r2": 1 - np.sum(r**2) / np.sum((y[test] - y[test].mean()) ** 2), "rmse": float(np.sqrt(np.mean(r**2)))}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[2026, 7])
    p.add_argument("--splits", type=int, default=20)
    p.add_argument("--data", default=None, help="the authors' CSV or its folder")
    args = p.parse_args(argv)
    warnings.filterwarnings("ignore", category=RuntimeWarning)
    df = load_mayaki2026(args.data)
    recs = []
    for seed in args.seeds:
        for setting in V.SETTINGS:
            tab = V.setting_table(df, setting)
            prepared = prepare(tab)
            for k, (otr, _ote) in enumerate(V.grouped_splits(tab, args.splits, seed)):
                tr, te = V.inner_split(tab, otr, seed)  # inside the outer training part only
                for name, cand in CANDIDATES.items():
                    recs.append({"seed": seed, "setting": setting, "split": k, "terms": name, **score(prepared, tr, te, cand)})
    rows = pd.DataFrame(recs)
    out = (rows.groupby(["seed", "setting", "terms"], sort=False)[["r2", "rmse"]].median().reset_index()
           .rename(columns={"r2": "inner_r2_median", "rmse": "inner_rmse_median"}))
    print(out.to_string(index=False))
    path = write_table(out, "select_terms_mayaki2026",
                       "Pre-run terms chosen on inner grouped splits (per-cell ridge, ln J; medians over the "
                       f"{args.splits} outer splits' inner splits; `python benchmarks/select_terms_mayaki2026.py`)")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
