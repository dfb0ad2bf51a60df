"""A GPU node installs the runner without the modelling stack; the modelling side says what it lacks."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEAVY = {"pymc", "arviz", "nutpie", "pytensor", "matplotlib", "numba", "xarray"}


def _names(reqs):
    return {re.split(r"[<>=!~\[ ;]", r, maxsplit=1)[0].lower() for r in reqs}


def test_core_and_runner_extra_do_not_pull_the_modelling_stack():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    assert not (_names(project["dependencies"]) | _names(extras["runner"])) & HEAVY
    assert {"pymc", "arviz", "nutpie", "matplotlib"} <= _names(extras["model"])
    from bayes_energy.models import MODEL_EXTRA

    assert set(MODEL_EXTRA) <= _names(extras["model"])  # what the import check asks for is in the extra


def test_without_pymc_the_runner_imports_and_the_model_side_names_the_extra():
    code = (
        "import sys\n"
        "sys.modules['pymc'] = None  # as on a node without the model extra\n"
        "import bayes_energy, bayes_energy.runner.sweep, bayes_energy.schema, bayes_energy.datasets\n"
        "import bayes_energy.runner.plan, bayes_energy.runner.meters, bayes_energy.runner.importers\n"
        "try:\n"
        "    import bayes_energy.predict\n"
        "except ImportError as err:\n"
        "    print(err)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    assert 'pip install "bayes_energy[model]"' in out.stdout and "pymc" in out.stdout
