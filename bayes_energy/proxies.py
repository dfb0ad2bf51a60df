"""Workload proxies from the architecture (Mayaki 2026, roofline view).

Pure functions of the architecture and the run's size. They accept scalars
or arrays (numpy broadcasting) and return floats, so that products of large
integers never overflow.

Examples
--------
>>> from bayes_energy.proxies import n_params, compute_per_token
>>> n_params(12, 768, 3072)
84934656.0
>>> compute_per_token(12, 768, 128)
88473600.0
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

__all__ = ["n_params", "compute_per_token", "total_compute", "memory_proxy", "add_proxies"]


def _f(x: ArrayLike) -> np.ndarray:
    return np.asarray(x, dtype=float)


def n_params(num_layers: ArrayLike, hidden_size: ArrayLike, ff: ArrayLike) -> np.ndarray:
    r"""Parameter count of the Transformer blocks, :math:`N = L(12d^2 + 2d\,ff)`.

    Parameters
    ----------
    num_layers : array_like
        Depth :math:`L`.
    hidden_size : array_like
        Width :math:`d`.
    ff : array_like
        Feed-forward width.

    Returns
    -------
    numpy.ndarray or float
        The parameter proxy (embeddings excluded, as in the paper).

    See Also
    --------
    total_compute : N times the tokens processed.
    """
    L, d, f = _f(num_layers), _f(hidden_size), _f(ff)
    return L * (12.0 * d**2 + 2.0 * d * f)


def compute_per_token(num_layers: ArrayLike, hidden_size: ArrayLike, seq_len: ArrayLike) -> np.ndarray:
    r"""Compute per token, :math:`C_{tok} = 12Ld^2 + 3LSd`.

    Parameters
    ----------
    num_layers, hidden_size : array_like
        Depth :math:`L` and width :math:`d`.
    seq_len : array_like
        Sequence length :math:`S`.

    Returns
    -------
    numpy.ndarray or float
        FLOP-like units per token (the authors' ``flops_per_token_proxy``).
    """
    L, d, S = _f(num_layers), _f(hidden_size), _f(seq_len)
    return 12.0 * L * d**2 + 3.0 * L * S * d


def total_compute(num_layers: ArrayLike, hidden_size: ArrayLike, ff: ArrayLike, tokens: ArrayLike) -> np.ndarray:
    r"""Total compute :math:`C = N \times \text{tokens}`, as the authors' ``compute`` column.

    Parameters
    ----------
    num_layers, hidden_size, ff : array_like
        Architecture, see :func:`n_params`.
    tokens : array_like
        Tokens processed by the run.

    Returns
    -------
    numpy.ndarray or float
    """
    return n_params(num_layers, hidden_size, ff) * _f(tokens)


def memory_proxy(batch_size: ArrayLike, seq_len: ArrayLike, hidden_size: ArrayLike, num_layers: ArrayLike) -> np.ndarray:
    r"""Activation-traffic proxy :math:`M = B\,S\,d\,L` (the authors' ``M_proxy``).

    Parameters
    ----------
    batch_size : array_like
        Examples per step and process :math:`B`.
    seq_len : array_like
        Sequence length :math:`S`.
    hidden_size, num_layers : array_like
        Width :math:`d` and depth :math:`L`.

    Returns
    -------
    numpy.ndarray or float
    """
    return _f(batch_size) * _f(seq_len) * _f(hidden_size) * _f(num_layers)


def add_proxies(df):
    """Return a copy of a sweep table with the proxy columns added.

    Adds ``params`` (N), ``compute_per_token`` (C_tok), ``compute`` (C) and
    ``memory`` (M).

    Parameters
    ----------
    df : pandas.DataFrame
        A sweep table (or a candidate table without outcomes).

    Returns
    -------
    pandas.DataFrame
    """
    out = df.copy()
    out["params"] = n_params(df["num_layers"], df["hidden_size"], df["ff"])
    out["compute_per_token"] = compute_per_token(df["num_layers"], df["hidden_size"], df["seq_len"])
    out["compute"] = total_compute(df["num_layers"], df["hidden_size"], df["ff"], df["tokens"])
    out["memory"] = memory_proxy(df["batch_size"], df["seq_len"], df["hidden_size"], df["num_layers"])
    return out
