r"""The energy law and its companions, written once for PyTensor and numpy.

Every function takes a parameter mapping ``P`` and design arrays ``A`` (see
:meth:`bayes_energy.models.spec.ModelSpec.arrays`) plus the math module ``m``
(``numpy`` or ``pytensor.tensor``). In the PyMC model ``P`` holds random
variables; in :mod:`bayes_energy.predict` it holds posterior draws with a
leading sample axis. The ``cell`` axis (hardware x family) is always second
to last and the ``strategy`` and ``group`` axes last, so the same indexing
serves both.

Energy (centred log joules) of run :math:`r` in cell :math:`c`, strategy
:math:`s`, configuration family :math:`g`:

.. math::

    \mu^E_r = \sum_k \beta_{ck}\, x_{rk} + \Psi_s + \Psi^{cell}_{cs} + u_g

where :math:`x_r` holds 1, :math:`\ln C`, :math:`\ln M`, :math:`\ln\eta_h`
(and, in the hierarchical model, :math:`\ln` tokens, sequence length, batch,
devices), all centred. Time uses the same form with its own parameters.
"""

from __future__ import annotations

import numpy as np

from .curves import log_eta as curve_log_eta
from .curves import param_slices
from .spec import LAW_FEATURES

__all__ = ["block_mean", "curve_theta", "curve_log_eta", "log_eta_from_curves", "ETA_COLUMN"]

#: Column of ``log_eta`` in the design matrix ``X`` (after the intercept).
ETA_COLUMN = 1 + LAW_FEATURES.index("log_eta")


def block_mean(P, b, A, log_eta, m):
    """Mean of block ``b`` (``"E"`` energy or ``"T"`` time) for each run.

    Parameters
    ----------
    P : mapping
        ``{b}_beta`` (cell, coef), ``{b}_psi`` (strategy), optionally
        ``{b}_psi_cell`` (cell, strategy) and ``{b}_u`` (group).
    b : str
        Block prefix.
    A : mapping
        Design arrays (``X``, ``cell_onehot``, ``cell_idx``, ``strategy_idx``,
        ``group_idx``).
    log_eta : array
        Log efficiency to use for each run (observed, or drawn from the
        speedup curves before the run).
    m : module
        ``numpy`` or ``pytensor.tensor``.
    """
    beta = P[f"{b}_beta"]
    X = A["X"]
    if m is np and beta.ndim == 3:
        return _block_mean_draws(P, b, A, log_eta)
    onehot = A["cell_onehot"]  # (run, cell)
    # X @ beta^T gives every run's mean under every cell; the one-hot picks its own
    per_cell = m.matmul(X, m.swapaxes(beta, -1, -2))
    mu = m.sum(per_cell * onehot, axis=-1)
    slope_eta = m.matmul(beta[..., ETA_COLUMN], m.swapaxes(onehot, -1, -2))
    mu = mu + slope_eta * (log_eta - X[:, ETA_COLUMN])
    mu = mu + m.take(P[f"{b}_psi"], A["strategy_idx"], axis=-1)
    if f"{b}_psi_cell" in P:
        psi = P[f"{b}_psi_cell"]
        n_strat = psi.shape[-1]
        flat = m.reshape(psi, (-1,)) if psi.ndim == 2 else m.reshape(psi, (psi.shape[0], -1))
        mu = mu + m.take(flat, A["cell_idx"] * n_strat + A["strategy_idx"], axis=-1)
    if f"{b}_u" in P and "group_idx" in A:
        mu = mu + m.take(P[f"{b}_u"], A["group_idx"], axis=-1)
    return mu


def _runs_of(index, value):
    """Positions where ``index == value``: a slice when they are contiguous (sorted input), else an array."""
    rows = np.flatnonzero(index == value)
    if len(rows) and rows[-1] - rows[0] + 1 == len(rows):
        return slice(int(rows[0]), int(rows[-1]) + 1)
    return rows


def _block_mean_draws(P, b, A, log_eta):
    """:func:`block_mean` for posterior draws (sample, ...) in numpy, one pass per cell.

    Each cell's runs get one BLAS product (sample, coef) @ (coef, run) with
    the efficiency column replaced by ``log_eta``, plus the strategy offsets
    of that cell. Keeps the dtype of the draws (float32 in predictions).
    """
    beta = P[f"{b}_beta"]
    X = A["X"].astype(beta.dtype, copy=True)
    X[:, ETA_COLUMN] = 0.0  # the law's efficiency term comes from log_eta below
    psi = P[f"{b}_psi"][:, None, :]
    offset = psi + P[f"{b}_psi_cell"] if f"{b}_psi_cell" in P else np.broadcast_to(psi, beta.shape[:2] + psi.shape[-1:])
    cells, strat = A["cell_idx"], A["strategy_idx"]
    mu = np.empty(beta.shape[:1] + X.shape[:1], dtype=beta.dtype)
    for c in np.unique(cells):
        rows = _runs_of(cells, c)
        mu[:, rows] = beta[:, c, :] @ X[rows].T
        mu[:, rows] += beta[:, c, ETA_COLUMN][:, None] * log_eta[:, rows]
        mu[:, rows] += offset[:, c, :][:, strat[rows]]
    if f"{b}_u" in P and "group_idx" in A:
        mu += np.take(P[f"{b}_u"], A["group_idx"], axis=-1)
    return mu


def log_eta_from_curves(P, A, m):
    """Log efficiency of each run from its strategy's speedup curve.

    The same as ``curve_log_eta(A["n_gpus"], A["curve"], curve_theta(P, A, m), m)``;
    with numpy it forms each curve's parameters only on that curve's runs,
    one (sample, run) slab each, instead of all of them on every run.
    """
    if m is not np:
        return curve_log_eta(A["n_gpus"], A["curve"], curve_theta(P, A, m), m)
    cell = P["curve_cell"]  # (..., cell, param)
    beta = P.get("curve_beta")  # (..., curve_coef, param), or (..., cell, curve_coef, param)
    n, curve, cells = A["n_gpus"], A["curve"], A["cell_idx"]
    out = np.zeros(cell.shape[:-2] + n.shape, dtype=cell.dtype)
    for kind, c, sl in param_slices():
        rows = _runs_of(curve, kind)
        params = range(sl.start, sl.stop)
        if isinstance(rows, np.ndarray) and not rows.size:
            continue
        rcells = cells[rows]
        zt = A["Z"][rows].T.astype(cell.dtype) if beta is not None else None  # (curve_coef, run)
        by_cell = [(k, _runs_of(rcells, k)) for k in np.unique(rcells)] if beta is not None and beta.ndim > cell.ndim else []
        theta = []
        for p in params:
            t = cell[..., rcells, p]
            if by_cell:  # slopes per cell: one product per cell
                for k, sub in by_cell:
                    t[..., sub] += beta[..., k, :, p] @ zt[:, sub]
            elif beta is not None:
                t = t + beta[..., :, p] @ zt
            theta.append(t)
        out[..., rows] = c.fn(n[rows].astype(cell.dtype), *theta, np)
    return out


def curve_theta(P, A, m):
    """Row-wise speedup-curve parameters, shape (..., run, curve_param).

    :math:`\\theta_{rp} = \\theta^{cell}_{cp} + z_r^\\top \\beta_p` with
    :math:`z_r` the standardised curve covariates.
    """
    theta = m.matmul(A["cell_onehot"], P["curve_cell"])
    if "curve_beta" in P:
        beta = P["curve_beta"]
        if beta.ndim > P["curve_cell"].ndim:  # per cell (..., cell, curve_coef, param)
            # z_r (x) onehot_r: (run, cell * curve_coef), so that a row picks its own cell's slopes in one
            # matrix product (gathering a (coef, param) block per row cost ~40 % of a gradient evaluation)
            zc = A["Z"][:, None, :] * A["cell_onehot"][:, :, None]
            zc = m.reshape(zc, (zc.shape[0], -1))
            flat = m.reshape(beta, (*beta.shape[:-3], -1, beta.shape[-1]))
            theta = theta + m.matmul(zc, flat)
        else:
            theta = theta + m.matmul(A["Z"], beta)
    return theta
