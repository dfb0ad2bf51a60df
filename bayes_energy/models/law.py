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
from .spec import LAW_FEATURES

__all__ = ["block_mean", "curve_theta", "curve_log_eta", "ETA_COLUMN"]

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
    onehot = A["cell_onehot"]  # (run, cell)
    if m is np and beta.ndim == 3:
        # posterior draws: one BLAS product per cell, (sample, coef) @ (coef, run_in_cell)
        mu = np.empty(beta.shape[:1] + X.shape[:1])
        slope_eta = np.empty_like(mu)
        cells = A["cell_idx"]
        for c in np.unique(cells):
            rows = np.flatnonzero(cells == c)
            mu[:, rows] = beta[:, c, :] @ X[rows].T
            slope_eta[:, rows] = beta[:, c, ETA_COLUMN][:, None]
    else:
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


def curve_theta(P, A, m):
    """Row-wise speedup-curve parameters, shape (..., run, 4).

    :math:`\\theta_{rp} = \\theta^{cell}_{cp} + z_r^\\top \\beta_p` with
    :math:`z_r` the standardised curve covariates.
    """
    theta = m.matmul(A["cell_onehot"], P["curve_cell"])
    if "curve_beta" in P:
        theta = theta + m.matmul(A["Z"], P["curve_beta"])
    return theta
