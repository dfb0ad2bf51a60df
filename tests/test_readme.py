"""The README's two set-up commands stay what CI runs."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_ci_runs_the_readme_test_command_verbatim():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1]
    assert ci.startswith("python3 -m venv .venv") and "pytest" in ci
    assert f"\n{ci}\n" in readme


def test_quickstart_has_exactly_two_setup_commands():
    readme = (ROOT / "README.md").read_text()
    quick = readme.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    setup = [ln for ln in quick.splitlines() if ln.startswith("python3 -m venv")]
    assert len(setup) == 2
    assert any("bayes_energy.fit" in ln for ln in setup) and any("pytest" in ln for ln in setup)


def _python_snippet() -> str:
    readme = (ROOT / "README.md").read_text()
    block = readme.split("In Python:\n\n```python\n", 1)[1].split("```", 1)[0]
    assert "be.predict(" in block and "be.plan(" in block
    return block


def test_readme_python_snippet_runs_as_written_twice(small_fit, tmp_path, monkeypatch, capsys):
    """The documented calls work every time, also after the submodules were imported (issue 13)."""
    import warnings

    import bayes_energy.plan  # noqa: F401 - imports the submodules first: they must not shadow be.predict / be.plan
    import bayes_energy.predict  # noqa: F401
    from tests._data import mayaki_path

    idata, _ = small_fit
    code = _python_snippet()
    fit_line = next(ln for ln in code.splitlines() if ln.startswith("idata = fit("))
    code = code.replace(fit_line, "idata = SESSION_FIT").replace('"../shared/datasets/mayaki2026"', repr(str(mayaki_path())))
    monkeypatch.chdir(tmp_path)
    for _ in range(2):
        ns = {"SESSION_FIT": idata}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            exec(compile(code, "README.md", "exec"), ns)
        pred = ns["pred"]
        assert len(pred) == 3 and (pred["energy_kwh_lo"] < pred["energy_kwh_median"]).all()
        assert (pred["energy_kwh_median"] < pred["energy_kwh_hi"]).all()
        assert "recommend" in capsys.readouterr().out.lower()
