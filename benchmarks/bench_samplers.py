"""Samplers side by side on the hierarchical model and the 629-row reference table.

Every sampler fits the same model (``build_model`` of the hierarchical spec
on ``load_mayaki2026()``) with the same settings (4 chains x (1000 tune +
1000 draws), target acceptance that of ``bayes_energy.models.sample``), each
in a fresh child process so that "cold" and "warm" mean what a user sees:

* ``cold``: the first process on a machine, with empty compile caches
  (PyTensor's ``base_compiledir``, which holds its C and numba caches, and
  JAX's persistent compilation cache all point into a new folder);
* ``warm``: the next process(es), with the caches the cold one left.

Samplers (``--samplers``):

* ``nutpie``: nutpie's numba backend, as ``python -m bayes_energy.fit`` runs
  it, with the compile cache that ``build_model`` enables
  (:func:`bayes_energy.models.cache.enable_compile_cache`);
* ``nutpie-nocache``: the same with ``BAYES_ENERGY_NO_COMPILE_CACHE=1`` (the fit path before);
* ``nutpie-jax``: nutpie with ``backend="jax"`` (XLA compiles on the first
  logp call, so inside ``sample_s``; JAX's persistent cache is on);
* ``numpyro``: ``pm.sample(nuts_sampler="numpyro")``;
* ``pymc``: ``pm.sample()``, PyMC's own NUTS on the C backend.

A sampler whose library is missing gets a row saying "not installed" (JAX
and NumPyro are not in the project's dependencies; run this script with a
Python that has them, e.g. a venv with ``pip install -e .[jax]``).

Columns: wall seconds of the child process (imports included), of the
compile (build + compile, where separate) and of sampling; divergences, max
R-hat, min bulk/tail ESS, min ESS_bulk per second of sampling and per second
of the whole process, mean leapfrog steps per draw (post-warm-up), and CPU
seconds of the compile and of the whole process (all threads and child
processes; steadier than wall seconds on a shared machine).

    python benchmarks/bench_samplers.py                          # all samplers, cold + 1 warm run each
    python benchmarks/bench_samplers.py --samplers nutpie --phases cold warm warm
    python benchmarks/bench_samplers.py --samplers pymc --cache-root /tmp/bench-cache --phases warm --append

Writes benchmarks/results/samplers.csv and .md (with ``--append``, rows of
the same sampler and phase are replaced and the others kept).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SAMPLERS = ("nutpie", "nutpie-nocache", "nutpie-jax", "numpyro", "pymc")
NEEDS = {"nutpie": ["nutpie", "numba"], "nutpie-nocache": ["nutpie", "numba"], "nutpie-jax": ["nutpie", "jax"],
         "numpyro": ["jax", "numpyro"], "pymc": ["pymc"]}
COLUMNS = ["sampler", "phase", "status", "process_s", "compile_s", "sample_s", "divergences", "max_rhat",
           "min_ess_bulk", "min_ess_tail", "ess_per_s_sampling", "ess_per_s_process", "leapfrog_per_draw",
           "mean_tree_depth", "compile_cpu_s", "process_cpu_s", "lowest_ess"]


# --------------------------------------------------------------------------- child: one fit, one process

def _child(args) -> dict:
    t_proc = time.perf_counter()
    import warnings

    warnings.filterwarnings("ignore")
    if args.child != "nutpie":  # build_model enables the compile cache; only the "nutpie" row measures it
        os.environ["BAYES_ENERGY_NO_COMPILE_CACHE"] = "1"
    if args.child in ("nutpie-jax", "numpyro"):
        import jax

        jax.config.update("jax_compilation_cache_dir", str(Path(args.cache_root) / "jax"))
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    import numpy as np
    import pymc as pm

    from bayes_energy.datasets import load_mayaki2026
    from bayes_energy.models import default_config
    from bayes_energy.models.build import build_model
    from bayes_energy.models.diagnostics import diagnose
    from bayes_energy.models.sample import TARGET_ACCEPT, kept_vars, nuts_settings
    from bayes_energy.models.spec import ModelSpec

    df = load_mayaki2026(args.data)
    t0, c0 = time.perf_counter(), time.process_time()
    spec = ModelSpec.from_table(df, args.model, default_config(args.model))
    model = build_model(spec, df)
    names = kept_vars(model)
    draws, tune, chains, seed = args.draws, args.tune, args.chains, args.seed
    if args.child.startswith("nutpie"):
        import nutpie
        from bayes_energy.models.cache import compile_nutpie

        kw = {"backend": "jax"} if args.child == "nutpie-jax" else {}  # nutpie's default: PyTensor's gradient
        compiled = compile_nutpie(model, var_names=names, **kw)
        t1, c1 = time.perf_counter(), time.process_time()
        idata = nutpie.sample(compiled, draws=draws, tune=tune, chains=chains, seed=seed, cores=min(chains, 2),
                              progress_bar=False, **nuts_settings())
    else:
        with model:
            if args.child == "numpyro":
                t1, c1 = time.perf_counter(), time.process_time()  # PyMC converts and JAX compiles inside pm.sample
                idata = pm.sample(draws=draws, tune=tune, chains=chains, random_seed=seed, progressbar=False,
                                  var_names=names, target_accept=TARGET_ACCEPT, nuts_sampler="numpyro",
                                  nuts_sampler_kwargs={"chain_method": args.numpyro_chain_method})
            else:
                # PyMC compiles inside pm.sample: a 1-draw run first separates compile from sampling
                pm.sample(draws=1, tune=1, chains=1, progressbar=False, random_seed=seed,
                          compute_convergence_checks=False)
                t1, c1 = time.perf_counter(), time.process_time()
                idata = pm.sample(draws=draws, tune=tune, chains=chains, cores=min(chains, 2), progressbar=False,
                                  random_seed=seed, var_names=names, target_accept=TARGET_ACCEPT)
    t2 = time.perf_counter()
    d = diagnose(idata)
    import arviz as az

    from bayes_energy.models.diagnostics import summary_vars

    summ = az.summary(idata, var_names=summary_vars(idata, include_z=True), kind="diagnostics")
    summ = summ[np.isfinite(summ["r_hat"])]
    worst = ", ".join(summ["ess_bulk"].nsmallest(3).index)
    st = idata.sample_stats
    steps = next((st[k] for k in ("n_steps", "tree_size") if k in st), None)
    depth = next((st[k] for k in ("depth", "tree_depth") if k in st), None)
    process_s = time.perf_counter() - t_proc
    cpu = resource.getrusage(resource.RUSAGE_SELF)
    cpu_children = resource.getrusage(resource.RUSAGE_CHILDREN)  # PyMC's chain processes
    process_cpu_s = cpu.ru_utime + cpu.ru_stime + cpu_children.ru_utime + cpu_children.ru_stime
    return {
        "sampler": args.child, "phase": args.phase, "status": "ok", "process_s": process_s,
        "compile_s": (t1 - t0) if args.child != "numpyro" else float("nan"), "sample_s": t2 - t1,
        "divergences": d["divergences"], "max_rhat": d["max_rhat"], "min_ess_bulk": d["min_ess_bulk"],
        "min_ess_tail": d["min_ess_tail"], "ess_per_s_sampling": d["min_ess_bulk"] / (t2 - t1),
        "ess_per_s_process": d["min_ess_bulk"] / process_s,
        "compile_cpu_s": (c1 - c0) if args.child != "numpyro" else float("nan"), "process_cpu_s": process_cpu_s,
        "leapfrog_per_draw": float(np.mean(steps)) if steps is not None else float("nan"),
        "mean_tree_depth": float(np.mean(depth)) if depth is not None else float("nan"),
        "lowest_ess": worst,
    }


# --------------------------------------------------------------------------- parent: processes and the table

def _missing(sampler: str, python: str) -> list[str]:
    if python == sys.executable:
        return [m for m in NEEDS[sampler] if importlib.util.find_spec(m) is None]
    code = "import importlib.util,sys; print(' '.join(m for m in sys.argv[1:] if importlib.util.find_spec(m) is None))"
    out = subprocess.run([python, "-c", code, *NEEDS[sampler]], capture_output=True, text=True, check=False)
    return out.stdout.split()


def _run_child(sampler: str, phase: str, args, cache_root: Path) -> dict:
    env = dict(os.environ)
    flags = [f for f in env.get("PYTENSOR_FLAGS", "").split(",") if f and not f.startswith("base_compiledir=")]
    env["PYTENSOR_FLAGS"] = ",".join([*flags, f"base_compiledir={cache_root / 'pytensor'}"])
    if sampler == "numpyro" and args.numpyro_chain_method == "parallel":
        env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={args.chains}"
    cmd = [args.python, str(Path(__file__).resolve()), "--child", sampler, "--phase", phase, "--cache-root",
           str(cache_root), "--model", args.model, "--chains", str(args.chains), "--draws", str(args.draws),
           "--tune", str(args.tune), "--seed", str(args.seed), "--numpyro-chain-method", args.numpyro_chain_method]
    if args.data:
        cmd += ["--data", args.data]
    t0 = time.perf_counter()
    # own process group: on a timeout PyMC's chain processes are stopped with the child
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=args.timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return {"sampler": sampler, "phase": phase, "status": f"timed out after {args.timeout} s",
                "process_s": time.perf_counter() - t0}
    lines = [ln for ln in stdout.splitlines() if ln.startswith("{")]
    if proc.returncode < 0:
        return {"sampler": sampler, "phase": phase, "status": f"stopped (signal {-proc.returncode})",
                "process_s": time.perf_counter() - t0}
    if proc.returncode != 0 or not lines:
        tail = (stderr or stdout).strip().splitlines()[-1:] or ["no output"]
        return {"sampler": sampler, "phase": phase, "status": f"failed: {tail[0][:120]}",
                "process_s": time.perf_counter() - t0}
    return json.loads(lines[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default=None, help="reference dataset path (default: the usual lookup)")
    p.add_argument("--model", default="hierarchical")
    p.add_argument("--chains", type=int, default=4)
    p.add_argument("--draws", type=int, default=1000)
    p.add_argument("--tune", type=int, default=1000)
    p.add_argument("--seed", type=int, default=2026)
    p.add_argument("--samplers", nargs="+", default=list(SAMPLERS), choices=SAMPLERS)
    p.add_argument("--phases", nargs="+", default=["cold", "warm"], choices=["cold", "warm"],
                   help="in order; 'cold' empties this run's cache folder first (default: cold warm)")
    p.add_argument("--cache-root", default=None,
                   help="compile caches of the child processes (default: a new temporary folder per sampler)")
    p.add_argument("--python", default=sys.executable, help="interpreter for the child processes")
    p.add_argument("--numpyro-chain-method", default="parallel", choices=["parallel", "vectorized", "sequential"])
    p.add_argument("--timeout", type=int, default=1800, help="seconds per child process (then it and its workers are killed)")
    p.add_argument("--append", action="store_true", help="merge into the existing results table")
    p.add_argument("--note", default="", help="a line written under the table (e.g. the machine's load)")
    p.add_argument("--child", choices=SAMPLERS, help=argparse.SUPPRESS)
    p.add_argument("--phase", default="cold", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(_child(args)), flush=True)
        return

    import shutil

    import pandas as pd

    sys.path.insert(0, str(HERE))
    from _tables import RESULTS, markdown  # noqa: E402

    csv = RESULTS / "samplers.csv"
    old = pd.read_csv(csv) if args.append and csv.exists() else pd.DataFrame(columns=COLUMNS)
    if "phase" not in old.columns:  # a table from before this script had phases
        old = pd.DataFrame(columns=COLUMNS)
    rows = []
    for sampler in args.samplers:
        missing = _missing(sampler, args.python)
        if missing:
            rows.append({"sampler": sampler, "phase": "-", "status": f"not installed ({', '.join(missing)})"})
            print(f"{sampler}: not installed ({', '.join(missing)})", flush=True)
            continue
        root = Path(args.cache_root) / sampler if args.cache_root else Path(tempfile.mkdtemp(prefix=f"bench-{sampler}-"))
        n_warm = 0
        for phase in args.phases:
            if phase == "cold" and root.exists():
                shutil.rmtree(root)
            root.mkdir(parents=True, exist_ok=True)
            label = phase
            if phase == "warm":
                n_warm += 1
                label = "warm" if n_warm == 1 else f"warm{n_warm}"
            row = _run_child(sampler, label, args, root)
            rows.append(row)
            print(json.dumps(row), flush=True)
        if not args.cache_root:
            shutil.rmtree(root, ignore_errors=True)
    new = pd.DataFrame(rows).reindex(columns=COLUMNS)
    if len(old):
        # replace the rows (sampler, phase) this run measured, and a sampler's "not installed" row; keep the others
        measured = set(zip(new["sampler"], new["phase"]))
        drop = [(s, ph) in measured or (s in set(new["sampler"]) and (ph == "-" or "-" in set(new.loc[new["sampler"] == s, "phase"])))
                for s, ph in zip(old["sampler"], old["phase"])]
        new = pd.concat([old[[not d for d in drop]], new], ignore_index=True)
        order = {s: i for i, s in enumerate(SAMPLERS)}
        new = new.sort_values(["sampler", "phase"], key=lambda c: c.map(order) if c.name == "sampler" else c,
                              kind="stable", ignore_index=True)
    new = new.reindex(columns=COLUMNS)
    RESULTS.mkdir(parents=True, exist_ok=True)
    new.to_csv(csv, index=False)
    title = (f"# Samplers: {args.model} model, reference table, {args.chains} chains x "
             f"({args.tune} tune + {args.draws} draws)\n\n")
    notes = ["", "cold: first process with empty compile caches; warm: a later process with the caches it left. "
             "Seconds are wall seconds; `process_s` includes imports. See docs/speed.md."]
    if args.note:
        notes.append(args.note)
    cells = new.astype(object).where(new.notna(), "").map(lambda v: v.replace("|", "\\|") if isinstance(v, str) else v)
    (RESULTS / "samplers.md").write_text(title + markdown(cells) + "\n".join(notes) + "\n")
    print(new.to_string(index=False, float_format=lambda v: f"{v:.3g}"))
    print(f"\nwrote {csv}")


if __name__ == "__main__":
    main()
