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
