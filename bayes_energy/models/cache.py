"""Compile once per machine: let PyTensor's numba cache keep our models' log-density.

nutpie compiles a PyMC model through PyTensor's numba backend. PyTensor 2.38
caches numba functions on disk (``pytensor.config.numba__cache``, True by
default) under ``<base_compiledir>/numba`` (``~/.pytensor/numba`` unless
``PYTENSOR_FLAGS=base_compiledir=...`` moves it), the whole graph's function
only when every Op in it has a cache key and the key is the same in the next
process. For our models neither held, so the log-density-and-gradient
function, the bulk of the compile, was compiled again in every process:

1. ``Psi`` (digamma, from the gradient of the Student-t log-density in its
   degrees of freedom) has no key: PyTensor calls
   ``scipy.special.cython_special.psi`` through a raw function pointer, which
   numba will not cache. :func:`enable_compile_cache` registers a pure-numba
   digamma (Cephes' algorithm; within 5e-15 absolute of ``scipy.special.psi``
   for x > 0.1, same inf/nan at 0 and the poles) with a key.
2. PyTensor builds its runtime broadcast checks from a ``set`` of Variables
   (``pytensor.tensor.extra_ops.broadcast_shape_iter``), whose order follows
   memory addresses, so the graph, and its key, changed from one process to
   the next. It is replaced by the same function with an insertion-ordered
   set (applied only when its source is the one this was written for).

With both, a second process that builds the same model (same graph and
constants; ``pm.Data`` values may differ) loads the log-density from the
cache. What is still done in every process: PyTensor's graph rewrites
(about 5 s CPU here) and nutpie's C-callable wrapper around the cached
function. That wrapper cannot be cached (numba keys a closure by pickling it,
and the pickle of a numba dispatcher holds a per-process id), and numba links
the callee's LLVM IR into it and optimises and emits the linked module
again: about 20 s CPU of the warm compile on the reference table. See
docs/speed.md for the numbers.

Call it once per process **before the model is built** (PyMC calls
``broadcast_shape_iter`` while building random variables)::

    from bayes_energy.models.cache import enable_compile_cache
    enable_compile_cache()

It is idempotent and cheap. ``BAYES_ENERGY_NO_COMPILE_CACHE=1`` leaves
PyTensor untouched (the compile is then as slow as before).
"""

from __future__ import annotations

import math
import os

__all__ = ["enable_compile_cache", "cache_dir", "digamma"]

_ENABLED = False
#: Bump when the digamma implementation below changes: it is part of the cache key.
_PSI_VERSION = 1

# Cephes psi(): asymptotic series coefficients (Bernoulli numbers B_2k / 2k), highest power first
_A = (8.33333333333333333333e-2, -2.10927960927960927961e-2, 7.57575757575757575758e-3,
      -4.16666666666666666667e-3, 3.96825396825396825397e-3, -8.33333333333333333333e-3,
      8.33333333333333333333e-2)
_EULER = 0.57721566490153286061


def _digamma_py(x: float) -> float:
    """Digamma of a float (Cephes ``psi``); -inf at 0, nan at negative integers, as SciPy."""
    if math.isnan(x):
        return math.nan
    if x == math.inf:
        return math.inf
    negative = False
    nz = 0.0
    if x <= 0.0:
        if x == 0.0:
            return -math.inf  # scipy.special.psi(0.0) == -inf
        p = math.floor(x)
        if p == x:
            return math.nan  # a pole
        negative = True
        nz = x - p
        if nz != 0.5:
            if nz > 0.5:
                p += 1.0
                nz = x - p
            nz = math.pi / math.tan(math.pi * nz)
        else:
            nz = 0.0
        x = 1.0 - x
    if x <= 10.0 and x == math.floor(x):
        y = 0.0
        n = int(x)
        for i in range(1, n):
            y += 1.0 / i
        y -= _EULER
    else:
        s = x
        w = 0.0
        while s < 10.0:
            w += 1.0 / s
            s += 1.0
        if s < 1.0e17:
            z = 1.0 / (s * s)
            poly = _A[0]
            for a in _A[1:]:
                poly = poly * z + a
            y = z * poly
        else:
            y = 0.0
        y = math.log(s) - 0.5 / s - y - w
    if negative:
        y -= nz
    return y


def digamma(x):
    """Digamma of a scalar, compiled by numba on first use (what PyTensor's ``Psi`` runs once enabled)."""
    return _digamma_numba()(x)


_DIGAMMA = None


def _digamma_numba():
    global _DIGAMMA
    if _DIGAMMA is None:
        import numba

        _DIGAMMA = numba.njit(fastmath=False, cache=False)(_digamma_py)
    return _DIGAMMA


def cache_dir() -> str:
    """Where PyTensor (and so nutpie's numba backend) keeps its compile cache on this machine."""
    import pytensor

    return str(pytensor.config.base_compiledir / "numba")


def enable_compile_cache() -> bool:
    """Let PyTensor's numba cache hold our models' whole log-density (see the module doc).

    Returns
    -------
    bool
        True when the cacheable digamma is registered and the broadcast checks
        made deterministic (now or before); False when disabled by
        ``BAYES_ENERGY_NO_COMPILE_CACHE=1``, when ``pytensor.config.numba__cache``
        is off, or when this PyTensor's internals are not the ones this module
        knows (then nothing is changed).
    """
    global _ENABLED
    if _ENABLED:
        return True
    if os.environ.get("BAYES_ENERGY_NO_COMPILE_CACHE", "").strip() not in ("", "0"):
        return False
    import pytensor

    if not pytensor.config.numba__cache:
        return False
    from pytensor.link.numba.dispatch import basic as numba_basic
    from pytensor.link.numba.dispatch.scalar import scalar_op_cache_key
    from pytensor.scalar.math import Psi

    if not all(hasattr(numba_basic, name) for name in _PYTENSOR_HOOKS):
        return False  # a PyTensor whose numba dispatch this module does not know: leave it alone
    if not _install_deterministic_broadcast_checks():
        return False  # without it the keys change per process: registering digamma alone buys nothing
    impl = _digamma_numba()

    @numba_basic.register_funcify_and_cache_key(Psi)
    def _numba_funcify_Psi(op, node=None, **kwargs):  # noqa: ARG001 (PyTensor's dispatch signature)
        return impl, scalar_op_cache_key(op, impl="bayes_energy.models.cache.digamma", version=_PSI_VERSION)

    _ENABLED = True
    return True


#: The PyTensor (2.38) numba-dispatch names this module relies on.
_PYTENSOR_HOOKS = ("register_funcify_and_cache_key",)


class _OrderedSet(dict):
    """The bit of ``set`` that ``broadcast_shape_iter`` uses, iterated in insertion order."""

    def add(self, item) -> None:
        self[item] = None


def _install_deterministic_broadcast_checks() -> bool:
    """Build PyTensor's broadcast checks in the same order in every process.

    ``pytensor.tensor.extra_ops.broadcast_shape_iter`` (PyTensor 2.38) collects
    the possibly-unequal lengths of a dimension in a ``set`` of Variables,
    whose order follows their memory addresses, and makes the first one the
    result and asserts the others equal to it. So the graph, and so its cache
    key, changed from process to process. The same function with an
    insertion-ordered set builds the same checks every time. Applied only
    when the source is the one this was written for; returns whether it was.
    """
    import inspect
    import textwrap

    from pytensor.tensor import extra_ops

    fn = extra_ops.broadcast_shape_iter
    if getattr(fn, "_bayes_energy_ordered", False):
        return True
    try:
        src = textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError):
        return False
    marks = ("nonconst_nb_shapes: set[int] = set()", "const_nb_shapes: set[Variable] = set()")
    if not all(src.count(m) == 1 for m in marks) or src.count("set()") != 2:
        return False
    for m in marks:
        src = src.replace(m, m.replace("= set()", "= _OrderedSet()"))
    env = dict(vars(extra_ops))
    env["_OrderedSet"] = _OrderedSet
    exec(compile(src, inspect.getsourcefile(fn) or "<broadcast_shape_iter>", "exec"), env)  # noqa: S102
    new = env["broadcast_shape_iter"]
    new._bayes_energy_ordered = True
    new.__doc__ = fn.__doc__
    extra_ops.broadcast_shape_iter = new
    return True
