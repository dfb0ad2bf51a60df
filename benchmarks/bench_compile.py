"""Compile time of the hierarchical model, cold and warm, with and without the compile cache.

Each measurement is a fresh child process that builds the model on the reference table (629 rows)
and compiles it with nutpie (``build_model`` + ``compile_nutpie``, what every fit does
before sampling). ``cold``: an empty PyTensor ``base_compiledir``; ``warm``, ``warm again``: the next two
processes on the same folder. ``wrappers_loaded``: how many of nutpie's two C wrappers came from
the cache (``compile_nutpie``). ``cache off`` sets ``BAYES_ENERGY_NO_COMPILE_CACHE=1`` (see ``bayes_energy/models/cache.py``).

    python benchmarks/bench_compile.py [--data ../shared/datasets/mayaki2026]

Writes benchmarks/results/compile.csv and .md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _tables import write_table  # noqa: E402

CHILD = """
import json, sys, time, warnings
warnings.simplefilter("ignore")
import nutpie  # noqa: F401 (imported before the clock starts, as before)
from bayes_energy.datasets import load_mayaki2026
from bayes_energy.models import default_config
from bayes_energy.models.build import build_model
from bayes_energy.models.cache import compile_nutpie
from bayes_energy.models.sample import kept_vars
from bayes_energy.models.spec import ModelSpec
df = load_mayaki2026(sys.argv[1] or None)
t0, c0 = time.perf_counter(), time.process_time()
model = build_model(ModelSpec.from_table(df, "hierarchical", default_config("hierarchical")), df)
compiled = compile_nutpie(model, var_names=kept_vars(model))
hits = compiled.compiled_logp_func.cache_hits + compiled.compiled_expand_func.cache_hits
print(json.dumps({"compile_s": time.perf_counter() - t0, "compile_cpu_s": time.process_time() - c0,
                  "wrappers_loaded": hits}))
"""


def measure(data: str | None, compiledir: Path, cache: bool) -> dict:
    env = dict(os.environ, PYTENSOR_FLAGS=f"base_compiledir={compiledir}",
               BAYES_ENERGY_NO_COMPILE_CACHE="" if cache else "1")
    out = subprocess.run([sys.executable, "-c", CHILD, data or ""], capture_output=True, text=True, env=env,
                         check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default=None, help="the authors' CSV or its folder (default: see find_mayaki2026)")
    a = p.parse_args(argv)
    rows = []
    for cache in (False, True):
        with tempfile.TemporaryDirectory() as tmp:
            for phase in ("cold", "warm", "warm again"):
                r = measure(a.data, Path(tmp), cache)
                rows.append({"cache": "on" if cache else "off", "phase": phase, **r})
                print(rows[-1], flush=True)
    table = pd.DataFrame(rows)
    print(write_table(table, "compile", title="Build + nutpie compile, hierarchical model, 629 rows "
                      "(one fresh process per row; cold: empty PyTensor base_compiledir, warm: the next processes "
                      "on it; python benchmarks/bench_compile.py)"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
