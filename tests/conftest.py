"""Session fixtures: ONE small posterior of the reference dataset, fitted once and reused.

``small_fit`` samples the hierarchical model on the Mayaki (2026) table with
2 chains x 150 draws (200 tuning steps, seed 1): far too few draws to pass
the diagnostics, enough to exercise predict, plan, the report and the
notebooks. ``small_fit_dir`` writes it as ``python -m bayes_energy.fit``
would (``posterior.nc``, ``summary.csv``, ``diagnostics.json``).

The dataset lives outside the repository (``../shared/datasets/mayaki2026``,
or ``$BAYES_ENERGY_DATA``); tests that need it skip locally when it is
absent and fail when ``CI=true``.
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import pytest

from tests._data import mayaki_path

ROOT = Path(__file__).resolve().parents[1]
if os.environ.get("PYTEST_XDIST_WORKER"):
    # two workers share two cores: one thread each for sampling chains and prediction chunks
    # (bayes_energy.threads), in this process and the subprocesses and kernels it starts
    os.environ.setdefault("BAYES_ENERGY_THREADS", "1")
SMALL = {"chains": 2, "draws": 150, "tune": 200, "seed": 1}


#: Slow tests that launch torch processes (the runner): worker 0 runs them after the shared fit's tests.
RUNNER_MODULES = ("test_runner_strategies.py", "test_sweep.py", "test_job_meter.py")
#: Worker 1's first slow tests, in this order (the rest follow in collection order): the compile-cache test and
#: notebooks 01 and 02, then the longest (the harness and notebook 04 after notebooks 01 and 02: see below).
MODEL_ORDER = ("test_a_second_process_loads", "01_quickstart", "02_reproduce_paper", "test_harness_quick_table",
               "04_design_the_next_sweep", "test_sbc_smoke")


def pytest_collection_modifyitems(session, config, items):
    """Order the suite so that the two workers end together.

    ``--dist worksteal`` (pyproject.toml) gives each worker one half of this
    order and lets an idle worker take the other's remaining tests, but not
    the one it is running: a worker left with a two-minute test at the end
    keeps the suite waiting (a run on 2026-12-07: worker 0 idle from 488 s,
    worker 1 busy to 649 s). So each half starts with its slow tests and ends
    with light ones, which the first worker done takes from the other.

    - Worker 0: the tests that need the session's shared fit first (it makes
      the fit, a compile and 2 x 350 draws, ~1 min), then the runner's
      torch launches, then light tests.
    - Worker 1: the slow tests that fit their own models (``MODEL_ORDER``
      first), then light tests. The harness and notebook 04 compile the same
      hierarchical model as the shared fit (and the harness the same pooled
      one as notebook 02), so they come after notebooks 01 and 02: by then
      the compile cache (models/cache.py) holds those graphs, even on a
      machine that starts with an empty cache.
    """
    def needs_fit(item):  # notebook 03 asks for the fit through request.getfixturevalue
        return "small_fit" in getattr(item, "fixturenames", ()) or "03_planning" in item.nodeid

    def slow(item):
        return item.get_closest_marker("slow") is not None

    def order(item):
        return next((i for i, key in enumerate(MODEL_ORDER) if key in item.nodeid), len(MODEL_ORDER))

    shared = [it for it in items if needs_fit(it)]
    heavy = [it for it in items if not needs_fit(it) and slow(it)]
    runner = [it for it in heavy if it.path.name in RUNNER_MODULES]
    models = sorted((it for it in heavy if it.path.name not in RUNNER_MODULES), key=order)
    light = [it for it in items if not needs_fit(it) and not slow(it)]
    half = (len(items) + 1) // 2
    fill = max(0, half - len(shared) - len(runner))  # light tests that pad the first half to its length
    items[:] = shared + runner + light[:fill] + models + light[fill:]


@pytest.fixture(scope="session")
def mayaki_table():
    """The reference dataset as a validated sweep table."""
    from bayes_energy.datasets import load_mayaki2026

    return load_mayaki2026(mayaki_path())


@pytest.fixture(scope="session")
def small_fit(mayaki_table, tmp_path_factory, worker_id):
    """(idata, table): the hierarchical model fitted once per session on the reference dataset.

    The suite runs on two xdist workers (``addopts`` in pyproject.toml; model compiles are
    single-threaded, so two side by side use both cores). The first worker that needs this fit
    makes it and saves it in the session's shared temporary folder; the other waits on a lock
    and loads the file, so the fit is made once per session, not once per worker.
    """
    import fcntl

    from bayes_energy.models.io import load, save
    from bayes_energy.models.sample import fit

    def make():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return fit(mayaki_table, model="hierarchical", progress=False, **SMALL)

    if worker_id == "master":  # no xdist: nothing to share
        return make(), mayaki_table
    shared = tmp_path_factory.getbasetemp().parent  # one per session, seen by every worker
    path = shared / "small_fit.nc"
    with open(shared / "small_fit.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not path.exists():
            save(make(), path)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            idata = load(path)
    return idata, mayaki_table


@pytest.fixture(scope="session")
def small_fit_dir(small_fit, tmp_path_factory) -> Path:
    """A fit folder like ``python -m bayes_energy.fit --out`` writes, holding ``small_fit``."""
    from bayes_energy.models.diagnostics import diagnose, summarize
    from bayes_energy.models.io import save

    idata, _ = small_fit
    out = tmp_path_factory.mktemp("small_fit")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        save(idata, out / "posterior.nc")
        summary = summarize(idata)
        summary.to_csv(out / "summary.csv")
        diag = diagnose(idata, summary=summary) | {"model": "hierarchical", "sampler": "nutpie"}
    (out / "diagnostics.json").write_text(json.dumps(diag, indent=2))
    return out


@pytest.fixture(scope="session")
def isolated_env(tmp_path_factory) -> dict:
    """Environment for subprocesses and kernels: Jupyter/IPython state in a temporary folder."""
    home = tmp_path_factory.mktemp("jupyter")
    env = dict(os.environ)
    env.update({
        "JUPYTER_CONFIG_DIR": str(home / "config"), "JUPYTER_DATA_DIR": str(home / "data"),
        "JUPYTER_RUNTIME_DIR": str(home / "runtime"), "IPYTHONDIR": str(home / "ipython"),
        "MPLBACKEND": "Agg", "PYTHONWARNINGS": "ignore::FutureWarning",
    })
    return env
