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
cache.

3. nutpie wraps that function in two C-callable ``numba.cfunc`` wrappers
   (log-density + gradient; the deterministics), and numba links the
   callee's LLVM IR into each and optimises and emits the linked module
   again: most of a warm compile (reference table: 26.9 s warm without this,
   3.9 s with it; ``benchmarks/results/compile.md``). numba
   can cache a cfunc, but keys a closure by pickling its cells, and a numba
   dispatcher's pickle holds a per-process id, so the next process never
   found the entry. :func:`compile_nutpie` gives each wrapper a key that
   is the same in every process: a SHA-256 over the wrapper's bytecode and
   everything its closure reaches (nutpie's extraction function, the
   placeholder arrays and record layout of the ``pm.Data`` values, numba
   and LLVM types by name, and each PyTensor function by the cache key
   PyTensor itself compiled it under),
   numba's and nutpie's versions and numba's target (CPU) tuple. Anything the
   walk does not know (a PyTensor function without a key, an object of an
   unknown type) leaves that wrapper uncached. The entries live beside
   PyTensor's, in ``<base_compiledir>/nutpie_cfunc``, and are shared by every
   install on the machine: the index carries no stamp of nutpie's source file
   (a new virtual environment would make it stale), since the key already
   holds the wrapper's code and the versions.

A constant array in the graph must be contiguous: numba passes a
non-contiguous one (``np.swapaxes`` of a matrix, say) as a pointer into the
process's memory and will not cache the function that holds it (it then
compiles again in every process; docs/speed.md, section 12). Pass such
arrays as ``pm.Data`` or make them contiguous.

What is still done in every process: PyTensor's graph rewrites (most of
the 3.9 s left). A warm process draws exactly what a fresh compile of the
wrappers draws (tests/test_compile_cache.py). See docs/speed.md for the
numbers.

Call it once per process **before the model is built** (PyMC calls
``broadcast_shape_iter`` while building random variables)::

    from bayes_energy.models.cache import enable_compile_cache
    enable_compile_cache()

and compile for nutpie through :func:`compile_nutpie` (every fit, refit and
benchmark does).

It is idempotent and cheap. ``BAYES_ENERGY_NO_COMPILE_CACHE=1`` leaves
PyTensor untouched (the compile is then as slow as before).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import math
import os
import types

__all__ = ["cache_dir", "compile_nutpie", "digamma", "enable_compile_cache"]

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


def compile_nutpie(model, var_names=None, **kwargs):
    """``nutpie.compile_pymc_model`` with its two C wrappers cached between processes (module doc, 3.).

    Parameters
    ----------
    model : pymc.Model
    var_names : list of str, optional
        Variables to keep in the trace (default: nutpie's).
    **kwargs
        Passed to ``nutpie.compile_pymc_model`` (e.g. ``backend="jax"``, which
        this cache does not touch).

    Returns
    -------
    nutpie compiled model
        Same as ``nutpie.compile_pymc_model``; the draws from a cached wrapper
        are those of a freshly compiled one (same machine code once the cache
        is warm).
    """
    import nutpie

    if not _ENABLED or kwargs.get("backend", "numba") != "numba":
        return nutpie.compile_pymc_model(model, var_names=var_names, **kwargs)
    _record_pytensor_keys()
    with _stable_cfunc_keys(wrapper_cache_dir()):
        return nutpie.compile_pymc_model(model, var_names=var_names, cache=True, **kwargs)


def wrapper_cache_dir() -> str:
    """Where :func:`compile_nutpie` keeps nutpie's compiled C wrappers on this machine."""
    import pytensor

    return str(pytensor.config.base_compiledir / "nutpie_cfunc")


class _Unkeyable(Exception):
    """The closure holds something :func:`_closure_key` cannot key: compile that wrapper uncached."""


def _record_pytensor_keys() -> None:
    """Tag each numba function PyTensor compiles with the cache key it compiled it under."""
    from pytensor.link.numba.linker import NumbaLinker

    original = getattr(NumbaLinker, "jit_compile", None)
    if original is None or getattr(original, "_bayes_energy", False):
        return  # another PyTensor (no key recorded: the wrappers stay uncached) or already done

    def jit_compile(self, fn_and_cache):
        fn = original(self, fn_and_cache)
        key = fn_and_cache[1] if isinstance(fn_and_cache, tuple) and len(fn_and_cache) == 2 else None
        if key is not None:
            fn._bayes_energy_cache_key = key
        return fn

    jit_compile._bayes_energy = True
    NumbaLinker.jit_compile = jit_compile


_PLAIN = (bool, int, float, complex, str, bytes)


@functools.cache
def _kinds():
    """The library classes :func:`_walk` tells apart (imported once, on first use)."""
    import numpy as np
    from llvmlite import ir as llvm_ir
    from numba.core import types as numba_types
    from numba.core.dispatcher import Dispatcher
    from numba.core.extending import _Intrinsic

    return types.SimpleNamespace(
        np=np, llvm_type=llvm_ir.Type, numba_type=numba_types.Type, Dispatcher=Dispatcher, Intrinsic=_Intrinsic
    )


def _walk(obj, h, seen: set, depth: int = 0) -> None:
    """Feed ``obj`` (a closure cell's content) into the hash ``h``; raise _Unkeyable on the unknown."""
    k = _kinds()
    np, Dispatcher, _Intrinsic = k.np, k.Dispatcher, k.Intrinsic

    if depth > 40:
        raise _Unkeyable("closure nested too deep")
    if obj is None or obj is Ellipsis or isinstance(obj, _PLAIN + (np.generic,)):
        h.update(repr((type(obj).__name__, obj)).encode())
    elif isinstance(obj, frozenset):  # iteration order follows string hashing, which differs per process
        items = []
        for item in obj:
            sub = hashlib.sha256()
            _walk(item, sub, set(seen), depth + 1)
            items.append(sub.digest())
        h.update(f"frozenset[{len(obj)}](".encode() + b"".join(sorted(items)) + b")")
    elif isinstance(obj, types.ModuleType):
        h.update(f"module {obj.__name__} {getattr(obj, '__version__', '')}".encode())
    elif isinstance(obj, (tuple, list)):
        h.update(f"{type(obj).__name__}[{len(obj)}](".encode())
        for item in obj:
            _walk(item, h, seen, depth + 1)
        h.update(b")")
    elif isinstance(obj, np.dtype):
        h.update(repr(obj).encode())
    elif isinstance(obj, k.numba_type):  # numba's types are canonical: the name says it all
        h.update(f"numba type {type(obj).__name__} {obj.name}".encode())
    elif isinstance(obj, k.llvm_type):  # an LLVM type (nutpie's wrappers use i32 etc.): its IR text
        h.update(f"llvm type {type(obj).__name__} {obj}".encode())
    elif isinstance(obj, np.ndarray):  # baked into the wrapper as a constant: key its values too
        h.update(repr((obj.dtype.str, obj.shape, obj.flags.c_contiguous)).encode())
        h.update(hashlib.sha256(np.ascontiguousarray(obj).tobytes()).digest())
    elif id(obj) in seen:
        h.update(b"<again>")
    elif isinstance(obj, Dispatcher):
        seen.add(id(obj))
        key = getattr(obj, "_bayes_energy_cache_key", None)
        if key is not None:  # a PyTensor graph function: PyTensor's own key names it
            h.update(f"pytensor {key}".encode())
        elif obj.py_func.__module__.startswith("nutpie."):
            h.update(repr(sorted(obj.targetoptions.items())).encode())
            _walk(obj.py_func, h, seen, depth + 1)
        else:
            raise _Unkeyable(f"numba function {obj.py_func.__qualname__} has no cache key")
    elif isinstance(obj, _Intrinsic):
        seen.add(id(obj))
        _walk(obj._defn, h, seen, depth + 1)
    elif isinstance(obj, types.CodeType):
        h.update(obj.co_code + repr(obj.co_names).encode())
        for const in obj.co_consts:
            _walk(const, h, seen, depth + 1)
    elif isinstance(obj, types.FunctionType):
        seen.add(id(obj))
        h.update(f"{obj.__module__}.{obj.__qualname__}".encode())
        _walk(obj.__code__, h, seen, depth + 1)
        _walk(obj.__defaults__, h, seen, depth + 1)
        for name in obj.__code__.co_names:  # the globals it reads (modules, nutpie's intrinsics)
            if name in obj.__globals__:
                h.update(name.encode())
                _walk(obj.__globals__[name], h, seen, depth + 1)
        for cell in obj.__closure__ or ():
            _walk(cell.cell_contents, h, seen, depth + 1)
    else:
        raise _Unkeyable(f"cannot key a {type(obj).__name__}")


def _closure_key(func) -> str:
    """A key for a nutpie wrapper that is the same in every process that builds the same model."""
    import numba
    import nutpie

    h = hashlib.sha256(f"numba {numba.__version__} nutpie {nutpie.__version__}".encode())
    _walk(func, h, set())
    return h.hexdigest()


@contextlib.contextmanager
def _stable_cfunc_keys(path: str):
    """While active, ``numba.cfunc(..., cache=True)`` keys a wrapper by :func:`_closure_key`, under ``path``."""
    from numba.core import caching
    from numba.core.ccallback import CFunc

    class Locator(caching._SourceFileBackedLocatorMixin, caching._CacheLocator):
        def __init__(self, py_func, py_file):
            self._py_file = py_file
            self._lineno = py_func.__code__.co_firstlineno

        def get_cache_path(self):
            return path

        def get_source_stamp(self):
            # numba's stamp is nutpie's source file's modification time, which every new install (a fresh
            # virtual environment, CI) changes: each install then found the other's index stale, compiled the
            # wrappers again and overwrote it. The entries' key (_closure_key) already holds the wrapper's code
            # and the numba and nutpie versions, so the index needs no stamp of its own.
            return "bayes_energy: keyed by the wrapper's closure"

        @classmethod
        def from_function(cls, py_func, py_file):
            return cls(py_func, py_file)

    class Impl(caching.CompileResultCacheImpl):
        _locator_classes = (Locator,)

    class Cache(caching.FunctionCache):
        _impl_class = Impl

        def __init__(self, py_func, key):
            self._key = key
            super().__init__(py_func)

        def _index_key(self, sig, codegen):
            return (sig, codegen.magic_tuple(), ("bayes_energy", self._key))

    def enable_caching(cfunc):
        try:
            key = _closure_key(cfunc._pyfunc)
        except _Unkeyable:
            return  # compiled as before, not cached
        cfunc._cache = Cache(cfunc._pyfunc, key)

    original = CFunc.enable_caching
    CFunc.enable_caching = enable_caching
    try:
        yield
    finally:
        CFunc.enable_caching = original
