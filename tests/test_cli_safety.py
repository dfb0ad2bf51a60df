"""Issue 18: no command destroys what it did not write; bad input is one line (exit 2), never a traceback.

Every ``--out`` misuse runs against a folder holding a sentinel file that must
survive. Commands run in-process (their ``main``) where the path under test
returns before any sampling, so these tests take seconds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pandas as pd
import pytest

from bayes_energy import cli
from bayes_energy.schema import SchemaError, data_notes, validate
from tests.test_schema import good_table

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data" / "cpu_sweep.csv"
PLAN = ROOT / "data" / "plans" / "cpu_sweep.toml"


@pytest.fixture
def precious(tmp_path):
    """A user's folder holding a sentinel file that no command may touch."""
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "thesis.tex").write_text("years of work")
    return folder


def _survives(folder: Path) -> bool:
    return (folder / "thesis.tex").read_text() == "years of work" and sorted(p.name for p in folder.iterdir()) == ["thesis.tex"]


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert "Traceback" not in err
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


def fit_main(*args):
    from bayes_energy.fit import main

    return main([str(a) for a in args])


# --------------------------------------------------------------------------- fit --out: data loss
def test_fit_out_current_folder_is_refused_and_nothing_deleted(precious, monkeypatch, capsys):
    monkeypatch.chdir(precious)
    assert fit_main("--data", DATA, "--model", "ols", "--out", ".") == 2
    assert "current folder" in _one_error_line(capsys)
    assert _survives(precious)


def test_fit_out_a_users_folder_is_refused_even_with_overwrite(precious, capsys):
    for extra in ([], ["--overwrite"]):
        assert fit_main("--data", DATA, "--model", "ols", "--out", precious, *extra) == 2
        assert "not a bayes_energy fit folder" in _one_error_line(capsys)
        assert _survives(precious)


def test_fit_out_a_file_or_below_a_file_is_refused(precious, capsys):
    target = precious / "thesis.tex"
    assert fit_main("--data", DATA, "--model", "ols", "--out", target) == 2
    assert "is a file" in _one_error_line(capsys)
    assert fit_main("--data", DATA, "--model", "ols", "--out", target / "fit") == 2
    assert "is a file, not a folder" in _one_error_line(capsys)
    assert _survives(precious)


def test_fit_replaces_its_own_fit_only_with_overwrite(tmp_path, capsys):
    out = tmp_path / "fit"
    assert fit_main("--data", DATA, "--model", "ols", "--out", out) == 0
    assert cli.is_fit_dir(out) and json.loads((out / cli.FIT_MARKER).read_text())["model"] == "ols"
    (out / "mine.txt").write_text("a note the user left in the fit folder")
    capsys.readouterr()
    assert fit_main("--data", DATA, "--model", "ols", "--out", out) == 2
    assert "--overwrite" in _one_error_line(capsys)
    assert (out / "mine.txt").exists()  # refused: nothing changed
    assert fit_main("--data", DATA, "--model", "ols", "--out", out, "--overwrite") == 0
    assert cli.is_fit_dir(out) and not (out / "mine.txt").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no scratch or old folder left


def test_a_killed_fits_scratch_folder_is_removed_by_the_next_run(tmp_path, precious):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = tmp_path / f".fit-{dead.pid}-abcd"
    stale.mkdir()
    (stale / cli.SCRATCH_MARKER).write_text(json.dumps({"pid": dead.pid, "host": os.uname().nodename}))
    lookalike = tmp_path / ".fit-mine"  # a user's folder with a similar name, no marker
    lookalike.mkdir()
    assert fit_main("--data", DATA, "--model", "ols", "--out", tmp_path / "fit") == 0
    assert not stale.exists() and lookalike.exists()
    live = cli.scratch_dir(tmp_path, ".fit-")  # ours, alive: kept by the next cleaner
    assert cli.clean_stale(tmp_path, ".fit-") == [] and live.exists()


def test_replace_dir_keeps_the_old_fit_when_the_rename_fails(tmp_path, monkeypatch):
    target = tmp_path / "fit"
    target.mkdir()
    (target / "posterior.nc").write_text("old")
    new = cli.scratch_dir(tmp_path, ".fit-")
    (new / "posterior.nc").write_text("new")
    real = Path.rename

    def flaky(self, dst):
        if self == new:
            raise OSError("disk trouble")
        return real(self, dst)

    monkeypatch.setattr(Path, "rename", flaky)
    with pytest.raises(OSError):
        cli.replace_dir(new, target)
    assert (target / "posterior.nc").read_text() == "old"
    monkeypatch.setattr(Path, "rename", real)
    cli.replace_dir(new, target)
    assert (target / "posterior.nc").read_text() == "new" and not (target / cli.SCRATCH_MARKER).exists()


# --------------------------------------------------------------------------- fit: one-line errors, checked first
@pytest.mark.parametrize("args,words", [
    (["--chains", "-1"], "--chains: expected a whole number >= 1"),
    (["--draws", "0"], "--draws: expected a whole number >= 1"),
    (["--tune", "-3"], "--tune: expected a whole number >= 0"),
    (["--draws", "many"], "--draws: expected a whole number"),
])
def test_fit_bad_arguments_fail_at_once(args, words, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        fit_main("--data", DATA, "--out", tmp_path / "fit", *args)
    assert exit_.value.code == 2
    assert words in _one_error_line(capsys)
    assert not (tmp_path / "fit").exists()


def test_fit_data_folder_is_one_line(precious, tmp_path, capsys):
    assert fit_main("--data", precious, "--model", "ols", "--out", tmp_path / "fit") == 2
    assert "is a folder" in _one_error_line(capsys)


def test_fit_says_what_the_data_cannot_inform_before_sampling(tmp_path, capsys):
    single = pd.read_csv(DATA)
    single = single[single["strategy"] == "single"]
    data = tmp_path / "single.csv"
    single.to_csv(data, index=False)
    assert fit_main("--data", data, "--model", "ols", "--out", tmp_path / "fit") == 0
    out = capsys.readouterr().out
    assert "note: only single-device runs" in out and "speedup curves" in out
    assert json.loads((tmp_path / "fit" / "diagnostics.json").read_text())["data_notes"]


def test_data_notes_name_what_is_missing():
    from bayes_energy.schema import add_efficiency

    def notes(t):
        return data_notes(add_efficiency(validate(t)))

    with pytest.raises(SchemaError, match="at least 2"):
        notes(good_table().iloc[:1])
    text = " ".join(notes(good_table()[lambda d: d["strategy"].isin(["single", "ddp"])]))
    assert "no runs of fsdp, tp" in text and "ddp: measured at one device count (2)" in text
    four = good_table().iloc[1:].assign(n_gpus=4, time_s=0.8)
    assert notes(pd.concat([good_table(), four], ignore_index=True)) == []


# --------------------------------------------------------------------------- schema: absurd values
@pytest.mark.parametrize("col,value,words", [
    ("energy_j", 1e300, "energy_j"), ("energy_j", 1e-300, "energy_j"), ("time_s", 1e12, "time_s"),
    ("tokens", 1e300, "tokens"),
])
def test_physically_absurd_values_are_rejected_with_the_row(col, value, words):
    t = good_table()
    t[col] = t[col].astype(float)
    t.loc[2, col] = value
    with pytest.raises(SchemaError, match=rf"sweep.csv: row 4, column '{words}'.*physically plausible range"):
        validate(t, source="sweep.csv")


def test_hidden_size_must_divide_by_heads():
    t = good_table()
    t.loc[1, "heads"] = 3
    with pytest.raises(SchemaError, match=r"row 3, columns 'hidden_size', 'heads'.*multiple of heads, got 64 and 3"):
        validate(t, source="sweep.csv")


def test_semicolon_file_says_the_delimiter_looks_wrong(tmp_path):
    from bayes_energy.datasets import load_sweep

    path = tmp_path / "excel.csv"
    good_table().to_csv(path, index=False, sep=";")
    with pytest.raises(SchemaError, match="excel.csv: line 1: .*semicolons, not commas"):
        load_sweep(path)


# --------------------------------------------------------------------------- predict
def predict_main(*args):
    from bayes_energy.predict import main

    return main([str(a) for a in args])


def _candidates(path, **kw):
    base = {"hardware": "NVIDIA A100-SXM4-80GB", "family": "bert", "num_layers": 12, "hidden_size": 768, "heads": 12,
            "ff": 3072, "seq_len": 128, "batch_size": 16, "tokens": 1e6, "strategy": "ddp", "n_gpus": 2}
    pd.DataFrame([base | kw]).to_csv(path, index=False)
    return path


def test_predict_out_misuse_keeps_the_file_and_the_folder(precious, tmp_path, capsys):
    configs = _candidates(tmp_path / "c.csv")
    assert predict_main("--posterior", "x.nc", "--configs", configs, "--out", precious) == 2
    assert "is a folder" in _one_error_line(capsys)
    assert predict_main("--posterior", "x.nc", "--configs", configs, "--out", precious / "thesis.tex") == 2
    assert "--overwrite" in _one_error_line(capsys)
    assert predict_main("--posterior", "x.nc", "--configs", precious, "--out", tmp_path / "p.csv") == 2
    assert "is a folder" in _one_error_line(capsys)
    assert _survives(precious)


@pytest.mark.parametrize("kw,words", [
    ({"hardware": ""}, "column 'hardware'"),
    ({"strategy": "single", "n_gpus": 2}, "exactly 1"),
    ({"n_gpus": 1.5}, "column 'n_gpus'"),
    ({"tokens": float("inf")}, "column 'tokens'"),
    ({"tokens": 1e300}, "column 'tokens'"),
    ({"hidden_size": 770}, "multiple of heads"),
])
def test_predict_impossible_candidates_are_one_line_before_loading(kw, words, tmp_path, capsys):
    configs = _candidates(tmp_path / "c.csv", **kw)
    assert predict_main("--posterior", tmp_path / "never-read.nc", "--configs", configs, "--out", tmp_path / "p.csv") == 2
    line = _one_error_line(capsys)
    assert "c.csv: row 2" in line and words in line
    assert not (tmp_path / "p.csv").exists()


@pytest.fixture(scope="module")
def posterior_copy(small_fit_dir, tmp_path_factory):
    import arviz as az

    def edit(change):
        idata = az.from_netcdf(small_fit_dir / "posterior.nc")
        idata.load()
        change(idata)
        path = tmp_path_factory.mktemp("edited") / "posterior.nc"
        idata.to_netcdf(path)
        return path

    return edit


def _drop_levels(idata):
    cfg = json.loads(idata.posterior.attrs["bayes_energy_config"])
    del cfg["levels"]
    idata.posterior.attrs["bayes_energy_config"] = json.dumps(cfg)
    idata.posterior.attrs["bayes_energy_version"] = "0.0.1"


def test_posterior_from_another_version_lacking_config_is_refused_naming_it(posterior_copy, tmp_path, capsys):
    path = posterior_copy(_drop_levels)
    configs = _candidates(tmp_path / "c.csv")
    assert predict_main("--posterior", path, "--configs", configs, "--out", tmp_path / "p.csv") == 2
    line = _one_error_line(capsys)
    assert "written by bayes_energy 0.0.1" in line and "levels" in line and "refit" in line


def test_posterior_saved_before_the_noise_prior_key_loads_as_the_half_normal_fit_it_was(posterior_copy):
    from bayes_energy.models.io import load

    def drop(idata):
        cfg = json.loads(idata.posterior.attrs["bayes_energy_config"])
        del cfg["priors"]["noise_prior"], cfg["priors"]["noise_alpha"]
        for key in ("time_coordinates", "strategy_slopes"):
            cfg.pop(key, None)
        idata.posterior.attrs["bayes_energy_config"] = json.dumps(cfg)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _, spec, model = load(posterior_copy(drop), rebuild=True)
    assert spec.config["priors"]["noise_prior"] == "halfnormal"
    assert type(model["E_sigma"].owner.op).__name__ == "HalfNormalRV"
    assert spec.config["time_coordinates"] == "marginal" and "T_beta_given_E" not in model.named_vars
    assert spec.config["strategy_slopes"] == [] and not any(":" in c for c in spec.coords["coef"])


def test_posterior_from_another_version_warns_and_an_edited_table_is_refused(posterior_copy):
    from bayes_energy.models.io import PosteriorFileError, VersionWarning, load

    other = posterior_copy(lambda d: d.posterior.attrs.update(bayes_energy_version="0.0.1"))
    with pytest.warns(VersionWarning, match="0.0.1"):
        load(other)

    def edit_table(idata):
        idata.training_table["energy_j"].values[0] *= 2

    with pytest.raises(PosteriorFileError, match="does not match its hash"):
        load(posterior_copy(edit_table))


@pytest.mark.slow
def test_predict_warns_on_extrapolated_device_counts(small_fit):
    from bayes_energy.predict import ExtrapolationWarning, predict

    idata, table = small_fit
    row = table[table["strategy"] == "fsdp"].head(1).assign(n_gpus=1000)
    with pytest.warns(ExtrapolationWarning, match="1000"):
        predict(idata, row, seed=0, n_draws=50)


def test_predict_unknown_hardware_suggests_known_names(small_fit_dir, tmp_path, capsys):
    configs = _candidates(tmp_path / "c.csv", hardware="A100")
    assert predict_main("--posterior", small_fit_dir / "posterior.nc", "--configs", configs, "--out", tmp_path / "p.csv") == 2
    line = _one_error_line(capsys)
    assert "'A100'" in line and "did you mean" in line and "--allow-unknown-hardware" in line


# --------------------------------------------------------------------------- plan
def plan_main(*args):
    from bayes_energy.plan import main

    return main([str(a) for a in args])


WORKLOAD = ["--arch", "bert-base", "--seq-len", "128", "--batch-size", "8", "--tokens", "1e6"]


@pytest.mark.parametrize("args,words", [
    (["--deadline-s", "-1"], "--deadline-s: expected a positive number"),
    (["--tokens", "-5"], "--tokens: expected a positive number"),
    (["--p", "1.5"], "--p: expected a probability"),
])
def test_plan_bad_flags_are_blamed_on_the_flag(args, words, capsys):
    with pytest.raises(SystemExit) as exit_:
        plan_main("--posterior", "x.nc", *WORKLOAD, *args)
    assert exit_.value.code == 2
    line = _one_error_line(capsys)
    assert words in line and "candidates" not in line


def test_plan_out_existing_file_is_kept(precious, capsys):
    assert plan_main("--posterior", "x.nc", *WORKLOAD, "--out", precious / "thesis.tex") == 2
    assert "--overwrite" in _one_error_line(capsys)
    assert _survives(precious)


def test_plan_unknown_hardware_suggests_known_names():
    from bayes_energy.plan import resolve_hardware

    known = ["NVIDIA A100-SXM4-80GB", "NVIDIA GeForce RTX 2080 Ti"]
    with pytest.raises(ValueError, match="cpu-x.*A100-SXM4-80GB"):
        resolve_hardware(["cpu-x"], known)
    assert resolve_hardware(["cpu-x"], known, allow_unknown=True) == ["cpu-x"]


# --------------------------------------------------------------------------- report
def test_report_out_misuse_keeps_files(precious, small_fit_dir, capsys):
    from bayes_energy.report import main

    assert main([str(small_fit_dir), "--out", str(precious / "thesis.tex")]) == 2
    assert "--overwrite" in _one_error_line(capsys)
    assert main([str(small_fit_dir), "--out", str(precious)]) == 2
    assert "is a folder" in _one_error_line(capsys)
    assert main([str(precious / "thesis.tex")]) == 2
    assert "is a file" in _one_error_line(capsys)
    assert _survives(precious)


def test_write_file_leaves_the_old_file_when_writing_fails(tmp_path):
    target = tmp_path / "pred.csv"
    target.write_text("old")

    def broken(tmp):
        tmp.write_text("half")
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError):
        cli.write_file(target, broken)
    assert target.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["pred.csv"]


# --------------------------------------------------------------------------- sweep --out
def sweep_main(*args):
    from bayes_energy.runner.sweep import main

    return main([str(a) for a in args])


@pytest.mark.parametrize("content", [b"notes", b"notes\nmore notes", b"a,b\n1,2\n3,4", b"a,b\n1,2\n"])
def test_sweep_never_changes_a_foreign_file(content, tmp_path, capsys):
    path = tmp_path / "n.txt"
    path.write_bytes(content)
    for extra in (["--dry-run"], []):
        assert sweep_main(PLAN, "--out", path, "--device", "cpu", "--meter", "estimate", *extra) == 2
        assert "not a sweep table" in _one_error_line(capsys)
        assert path.read_bytes() == content


def test_sweep_dry_run_writes_nothing(tmp_path, capsys):
    out = tmp_path / "new" / "sweep.csv"
    assert sweep_main(PLAN, "--out", out, "--device", "cpu", "--meter", "estimate", "--dry-run", "--no-progress") == 0
    assert capsys.readouterr().out.strip()  # the list of what would run
    assert not (tmp_path / "new").exists()


def test_sweep_out_folder_is_refused(precious, capsys):
    assert sweep_main(PLAN, "--out", precious, "--device", "cpu", "--meter", "estimate", "--dry-run") == 2
    assert "is a folder" in _one_error_line(capsys)
    assert _survives(precious)


def test_killed_sweeps_work_folders_are_cleaned(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = tmp_path / f"bayes_energy_sweep_{dead.pid}-x"
    stale.mkdir()
    (stale / cli.SCRATCH_MARKER).write_text(json.dumps({"pid": dead.pid, "host": os.uname().nodename}))
    new = cli.scratch_dir(tmp_path, "bayes_energy_sweep_")
    assert not stale.exists() and new.exists()

