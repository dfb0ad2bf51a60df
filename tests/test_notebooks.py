"""The notebooks: committed with outputs, free of model code, and executed here with small draw counts.

Execution costs one model compile per notebook that samples (about 45 s each on two cores):
01 fits the shipped CPU sweep, 02 the pooled law on the reference dataset; 03 reuses the session's
``small_fit`` through ``BAYES_ENERGY_POSTERIOR`` instead of sampling the same model again.
"""

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
EXPECTED = ("01_quickstart.ipynb", "02_reproduce_paper.ipynb", "03_planning_under_uncertainty.ipynb",
            "04_design_the_next_sweep.ipynb")
#: Small runs for CI: 2 chains x 100 draws (100 tuning steps).
CI_DRAWS = {"BAYES_ENERGY_DRAWS": "100", "BAYES_ENERGY_CHAINS": "2"}


def _cells(path):
    return json.loads(path.read_text())["cells"]


def test_the_notebooks_are_there():
    assert tuple(p.name for p in NOTEBOOKS) == EXPECTED


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_committed_with_outputs_and_holds_no_model_code(path):
    cells = _cells(path)
    code = [c for c in cells if c["cell_type"] == "code"]
    assert code and all(c.get("execution_count") for c in code), "commit the notebook executed, in order"
    assert all(not any(o.get("output_type") == "error" for o in c.get("outputs", [])) for c in code)
    source = "\n".join("".join(c["source"]) for c in code)
    assert "BAYES_ENERGY_DRAWS" in source
    for forbidden in ("import pymc", "pm.Model", "pm.sample", "import pytensor"):
        assert forbidden not in source, f"{path.name}: model code belongs in the package ({forbidden})"
    assert "import bayes_energy" in source or "from bayes_energy" in source
    if "plt." in source:  # figures are saved in the notebook (not lost to a non-inline backend)
        assert any("image/png" in o.get("data", {}) for c in code for o in c.get("outputs", [])), \
            f"{path.name}: no figure in the committed outputs; execute it with the inline backend"


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_executes(path, request, isolated_env, monkeypatch, tmp_path):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    env = dict(isolated_env) | CI_DRAWS
    if path.name.startswith("03"):
        env["BAYES_ENERGY_POSTERIOR"] = str(request.getfixturevalue("small_fit_dir") / "posterior.nc")
    if path.name.startswith(("02", "03", "04")):
        request.getfixturevalue("mayaki_table")  # skip locally / fail in CI without the reference dataset
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(nb, kernel_name="python3", timeout=600,
                                     resources={"metadata": {"path": str(path.parent)}})
    try:
        client.execute()
    finally:
        nbformat.write(nb, tmp_path / path.name)  # the executed copy, for a look when it fails
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors
