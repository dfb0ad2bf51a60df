"""Metering a user's own job: the context manager, the Trainer callback, torchrun, failures.

The meters are the runner's own. On this CPU machine that is RAPL when a
(fake) powercap tree is readable and the labelled estimate otherwise; NVML
is the project's autospecced ``pynvml`` fake (``tests/test_meters.py``),
with counters that run with the wall clock so that every process of a
torchrun launch sees the same devices.
"""

from __future__ import annotations

import contextlib
import csv
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from unittest import mock

import pytest

torch = pytest.importorskip("torch")
pynvml = pytest.importorskip("pynvml")

from bayes_energy.datasets import load_sweep  # noqa: E402
from bayes_energy.runner.job import JobError, JobMeter, architecture_of, measure_job  # noqa: E402
from bayes_energy.runner.sweep import COLUMNS, SweepError, SweepTable  # noqa: E402
from tests.test_meters import HOPPER, FakeNVML, nv  # noqa: E402,F401 - nv is a fixture
from tests.test_rapl import _set, _zone  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ARCH = {"num_layers": 2, "hidden_size": 16, "heads": 2, "ff": 64, "family": "mlp"}

#: pynvml functions either meter stack (ours, Zeus's) calls; patched on the real module.
NVML_FUNCS = (
    "nvmlInit", "nvmlShutdown", "nvmlDeviceGetCount", "nvmlDeviceGetHandleByIndex", "nvmlDeviceGetName",
    "nvmlDeviceGetUUID", "nvmlDeviceGetArchitecture", "nvmlSystemGetDriverVersion",
    "nvmlDeviceGetTotalEnergyConsumption", "nvmlDeviceGetPowerUsage", "nvmlDeviceGetC2cModeInfoV",
)


class ClockNVML(FakeNVML):
    """The project's NVML fake with counters that run with the wall clock at each device's power.

    ``energy_mj = power_mW * time.time()``: every process reads the same
    counters, as processes sharing a node's real GPUs do.
    """

    def _energy(self, h):
        if not self.counter[h]:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return int(self.power_mw[h] * time.time())


@contextlib.contextmanager
def patch_nvml():
    """Patch the NVML functions on the real ``pynvml`` module (autospec), so every importer sees the fake."""
    with contextlib.ExitStack() as stack:
        for name in NVML_FUNCS:
            stack.enter_context(mock.patch.object(pynvml, name, autospec=True))
        pynvml.nvmlDeviceGetC2cModeInfoV.side_effect = pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        yield pynvml


def _tiny_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 16))


def _train(model, job, steps, sleep_s=0.0, before_step=None):
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for k in range(steps):
        if before_step:
            before_step(k)
        loss = model(torch.randn(8, 16)).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        if sleep_s:
            time.sleep(sleep_s)
        job.step()


def _rows(path):
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


@pytest.fixture
def no_rapl(tmp_path):
    return str(tmp_path / "no-powercap")


@pytest.fixture(autouse=True)
def _one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


# ----------------------------------------------------------------------- the context manager
def test_context_manager_appends_one_valid_row_with_the_labelled_estimate(tmp_path, no_rapl, capsys):
    out = tmp_path / "runs.csv"
    model = _tiny_model()
    with measure_job(out, model, architecture=ARCH, seq_len=8, batch_size=4, grad_accum=2, warmup_steps=2,
                     powercap_root=no_rapl) as job:
        _train(model, job, steps=6)
    table = load_sweep(out)  # the schema's own loader accepts it
    assert len(table) == 1
    row = table.iloc[0]
    assert row["status"] == "ok"
    assert row["energy_source"] == "estimate"  # no NVML, no RAPL: the runner's estimate, and it says so
    assert "ESTIMATE" in capsys.readouterr().err
    assert (row["num_layers"], row["hidden_size"], row["heads"], row["ff"]) == (2, 16, 2, 64)
    assert (row["strategy"], row["n_gpus"], row["seq_len"], row["batch_size"], row["grad_accum"]) == ("single", 1, 8, 4, 2)
    assert row["steps"] == 4  # 6 steps, 2 of them warm-up
    assert row["tokens"] == 4 * 4 * 8 * 2
    assert row["energy_j"] > 0 and row["time_s"] > 0
    assert row["params_total"] == sum(p.numel() for p in model.parameters())
    assert list(pd_header(out)) == list(COLUMNS)  # same layout as the sweep's files


def pd_header(path):
    with open(path, newline="") as fh:
        return next(csv.reader(fh))


def test_warmup_steps_are_excluded_from_the_rapl_window(tmp_path):
    """A fake RAPL package: warm-up steps spend 1000 J each, measured steps 1 J; only the latter count."""
    root = tmp_path / "powercap"
    pkg = _zone(root / "intel-rapl:0", "package-0", 0)
    spent = {"uj": 0}

    def spend(k):
        spent["uj"] += (1000 if k < 3 else 1) * 1_000_000
        _set(pkg, spent["uj"])

    out = tmp_path / "runs.csv"
    model = _tiny_model()
    with measure_job(out, model, architecture=ARCH, seq_len=8, batch_size=4, warmup_steps=3,
                     powercap_root=str(root)) as job:
        # the counter moves inside step k; the window opens after step 3 (k = 2)
        _train(model, job, steps=8, before_step=spend)
    row = job.row
    assert row["energy_source"] == "rapl" and row["measured_by"] == "node"
    assert row["steps"] == 5
    assert row["energy_j"] == pytest.approx(5.0)
    assert row["meter_devices"] == "intel-rapl:0:package-0"


def test_a_job_that_raises_writes_a_failed_row_never_ok(tmp_path, no_rapl):
    out = tmp_path / "runs.csv"
    model = _tiny_model()
    with pytest.raises(RuntimeError, match="loss became NaN"):
        with measure_job(out, model, architecture=ARCH, seq_len=8, batch_size=4, warmup_steps=1,
                         powercap_root=no_rapl) as job:
            _train(model, job, steps=3)
            raise RuntimeError("loss became NaN")
    rows = _rows(out)
    assert len(rows) == 1
    r = rows[0]
    assert r["status"] == "failed"
    assert r["error"] == "RuntimeError: loss became NaN"
    assert r["energy_j"] == r["time_s"] == r["tokens"] == r["energy_source"] == ""  # no outcome on a failed row
    assert "before the failure" in r["notes"]  # what the meter saw is kept as a note, not as an outcome
    assert load_sweep(out, include_failed=True)["status"].tolist() == ["failed"]


def test_a_job_that_ends_during_warmup_is_failed(tmp_path, no_rapl):
    out = tmp_path / "runs.csv"
    model = _tiny_model()
    with measure_job(out, model, architecture=ARCH, seq_len=8, batch_size=4, warmup_steps=3,
                     powercap_root=no_rapl) as job:
        _train(model, job, steps=3)
    assert job.row["status"] == "failed"
    assert "no step after the 3 warm-up step(s)" in job.row["error"]


def test_a_second_job_with_the_same_run_key_is_refused_before_it_trains(tmp_path, no_rapl):
    out = tmp_path / "runs.csv"
    model = _tiny_model()
    kw = dict(architecture=ARCH, seq_len=8, batch_size=4, warmup_steps=1, powercap_root=no_rapl)
    with measure_job(out, model, **kw) as job:
        _train(model, job, steps=2)
    before = out.read_bytes()
    trained = []
    with pytest.raises(JobError, match=r"runs.csv: line 2 already holds this run key.*workload="):
        with measure_job(out, model, **kw):
            trained.append(True)
    assert not trained and out.read_bytes() == before
    with measure_job(out, model, workload="second-dataset", **kw) as job:
        _train(model, job, steps=2)
    assert [r["workload"] for r in _rows(out)] == ["job", "second-dataset"]
    assert len(load_sweep(out)) == 2


def test_a_foreign_file_is_refused_before_training(tmp_path, no_rapl):
    out = tmp_path / "notes.csv"
    out.write_text("a,b\n1,2\n")
    with pytest.raises(JobError, match="not a sweep table"):
        with measure_job(out, _tiny_model(), architecture=ARCH, seq_len=8, batch_size=4, powercap_root=no_rapl):
            pass
    assert out.read_text() == "a,b\n1,2\n"


def test_the_final_append_waits_for_another_writer_and_keeps_the_row_on_timeout(tmp_path, no_rapl):
    out = tmp_path / "runs.csv"
    model = _tiny_model()
    holder = SweepTable(out)  # e.g. a sweep writing the same file
    threading.Timer(0.5, holder.close).start()
    t0 = time.perf_counter()
    with measure_job(out, model, architecture=ARCH, seq_len=8, batch_size=4, warmup_steps=1,
                     powercap_root=no_rapl) as job:
        _train(model, job, steps=2)
    assert time.perf_counter() - t0 >= 0.4
    assert [r["status"] for r in _rows(out)] == ["ok"]

    holder = SweepTable(out)
    try:
        job = measure_job(out, model, architecture=ARCH, seq_len=8, batch_size=4, warmup_steps=1, workload="b",
                          powercap_root=no_rapl, lock_timeout_s=0.2)
        with pytest.raises(SweepError, match="another sweep is writing"):
            with job:
                _train(model, job, steps=2)
        assert job.row is not None and job.row["status"] == "ok"  # the measurement is not lost
    finally:
        holder.close()


def test_bad_settings_are_refused_by_name():
    with pytest.raises(JobError, match="seq_len"):
        JobMeter("x.csv", architecture=ARCH, seq_len=0, batch_size=1)
    with pytest.raises(JobError, match="meter: expected one of auto, nvml, rapl, estimate"):
        JobMeter("x.csv", architecture=ARCH, seq_len=8, batch_size=1, meter="zeus")
    with pytest.raises(JobError, match=r"cannot read 'heads'.*architecture="):
        JobMeter("x.csv", architecture={k: v for k, v in ARCH.items() if k != "heads"}, seq_len=8, batch_size=1)


def test_architecture_is_read_from_hugging_face_configs():
    transformers = pytest.importorskip("transformers")
    bert = transformers.BertConfig(hidden_size=64, num_hidden_layers=3, num_attention_heads=4, intermediate_size=256)
    assert architecture_of(bert) == {"num_layers": 3, "hidden_size": 64, "heads": 4, "ff": 256, "family": "bert",
                                     "vocab_size": bert.vocab_size}
    gpt2 = transformers.GPT2Config(n_embd=48, n_layer=2, n_head=4, n_inner=None)
    arch = architecture_of(gpt2)
    assert (arch["num_layers"], arch["hidden_size"], arch["heads"], arch["ff"], arch["family"]) == (2, 48, 4, 192, "gpt2")
    assert architecture_of(gpt2, {"family": "gpt"})["family"] == "gpt"


def test_nvml_job_records_counter_energy_of_its_device(tmp_path, nv):
    """The runner's NVML monitor on the project's fake: the row's energy is the counter's, source nvml."""
    ClockNVML(nv, [HOPPER, HOPPER], power_w=[300.0, 50.0])
    out = tmp_path / "runs.csv"
    model = _tiny_model()
    with measure_job(out, model, architecture=ARCH, seq_len=8, batch_size=4, warmup_steps=1, device="cuda:1") as job:
        _train(model, job, steps=4, sleep_s=0.05)
    row = job.row
    assert row["energy_source"] == "nvml" and row["meter"] == "nvml" and row["meter_devices"] == "Fake GPU 1"
    assert row["hardware"] == "Fake GPU 1" and row["driver_version"] == "550.54.15"
    assert row["energy_j"] / row["time_s"] == pytest.approx(50.0, rel=0.05)  # cuda:1's 50 W, not cuda:0's


# ----------------------------------------------------------------------- torchrun
TORCHRUN_SCRIPT = """
import sys, time
import torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from bayes_energy.runner.job import measure_job
from tests.test_job_meter import ARCH, HOPPER, ClockNVML, _train, patch_nvml

out = sys.argv[1]
torch.set_num_threads(1)
dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 16)))
with patch_nvml() as nv:
    ClockNVML(nv, [HOPPER, HOPPER], power_w=[100.0, 50.0])
    for mode in ("per-rank", "node"):
        with measure_job(out, model, architecture=ARCH, seq_len=8, batch_size=4, warmup_steps=1,
                         device=f"cuda:{rank}", measured_by=mode, workload=mode) as job:
            _train(model, job, steps=5, sleep_s=0.05)
with measure_job(out, model, architecture=ARCH, seq_len=8, batch_size=4, warmup_steps=1, meter="estimate",
                 workload="estimate") as job:
    _train(model, job, steps=5, sleep_s=0.02)
dist.barrier()
dist.destroy_process_group()
"""


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    env.pop("CUDA_VISIBLE_DEVICES", None)
    env["OMP_NUM_THREADS"] = "1"
    env["HF_HUB_OFFLINE"] = "1"
    return env


@pytest.mark.slow
def test_torchrun_two_gloo_ranks_write_one_row_per_job_and_count_each_device_once(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(TORCHRUN_SCRIPT)
    out = tmp_path / "runs.csv"
    res = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", str(script), str(out)],
        capture_output=True, text=True, timeout=120, cwd=tmp_path, env=_env(),
    )
    assert res.returncode == 0, res.stderr[-3000:]
    rows = {r["workload"]: r for r in _rows(out)}
    assert len(_rows(out)) == 3 and set(rows) == {"per-rank", "node", "estimate"}  # one row per job, rank 0's
    for mode in ("per-rank", "node"):
        r = rows[mode]
        assert r["status"] == "ok" and r["strategy"] == "ddp" and r["n_gpus"] == "2" and r["backend"] == "gloo"
        assert r["measured_by"] == mode and r["energy_source"] == "nvml"
        assert r["hardware"] == "Fake GPU 0+Fake GPU 1"
        # 100 W + 50 W: each device once (twice would be 300 W; rank 0's device twice 200 W)
        assert float(r["energy_j"]) / float(r["time_s"]) == pytest.approx(150.0, rel=0.05)
        assert float(r["tokens"]) == 4 * 4 * 8 * 2  # 4 measured steps, both data-parallel ranks
    est = rows["estimate"]
    assert est["status"] == "ok" and est["energy_source"] == "estimate" and est["measured_by"] == "node"
    assert len(load_sweep(out)) == 3


SIGTERM_SCRIPT = """
import sys, time
from pathlib import Path
import torch
from bayes_energy.runner.job import measure_job
from tests.test_job_meter import ARCH

out, ready = sys.argv[1], Path(sys.argv[2])
with measure_job(out, torch.nn.Linear(4, 4), architecture=ARCH, seq_len=8, batch_size=4, warmup_steps=1,
                 powercap_root="/nonexistent") as job:
    job.step()
    ready.write_text("window open")
    while True:
        time.sleep(0.01)
"""


@pytest.mark.slow
def test_a_job_stopped_by_sigterm_writes_a_failed_row(tmp_path):
    script, out, ready = tmp_path / "job.py", tmp_path / "runs.csv", tmp_path / "ready"
    script.write_text(SIGTERM_SCRIPT)
    proc = subprocess.Popen([sys.executable, str(script), str(out), str(ready)], env=_env(), cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while not ready.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ready.exists(), proc.communicate()[1][-2000:]
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    rows = _rows(out)
    assert len(rows) == 1 and rows[0]["status"] == "failed"
    assert rows[0]["error"].startswith("stopped by SIGTERM")
    assert proc.returncode == 128 + signal.SIGTERM


# ----------------------------------------------------------------------- transformers.Trainer
def _trainer(tmp_path, callbacks, max_steps=6):
    tr = pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    cfg = tr.BertConfig(vocab_size=128, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=32)
    torch.manual_seed(0)
    model = tr.BertForSequenceClassification(cfg)
    g = torch.Generator().manual_seed(0)
    data = [{"input_ids": torch.randint(0, 128, (16,), generator=g), "attention_mask": torch.ones(16, dtype=torch.long),
             "labels": torch.tensor(i % 2)} for i in range(64)]
    args = tr.TrainingArguments(
        output_dir=str(tmp_path / "hf"), max_steps=max_steps, per_device_train_batch_size=4,
        gradient_accumulation_steps=2, use_cpu=True, report_to=[], save_strategy="no", logging_strategy="no",
        disable_tqdm=True, include_num_input_tokens_seen=True,
    )
    return tr.Trainer(model=model, args=args, train_dataset=data, callbacks=callbacks)


@pytest.mark.slow
def test_trainer_callback_writes_one_valid_row_from_the_bert_config(tmp_path, no_rapl, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from bayes_energy.runner.callback import EnergyCallback

    out = tmp_path / "runs.csv"
    cb = EnergyCallback(out, seq_len=16, warmup_steps=2, workload="tiny-bert", powercap_root=no_rapl)
    _trainer(tmp_path, [cb]).train()
    table = load_sweep(out)
    assert len(table) == 1
    r = table.iloc[0]
    assert (r["family"], r["num_layers"], r["hidden_size"], r["heads"], r["ff"]) == ("bert", 2, 32, 2, 64)
    assert (r["batch_size"], r["grad_accum"], r["seq_len"], r["strategy"], r["n_gpus"]) == (4, 2, 16, "single", 1)
    assert r["steps"] == 4 and r["tokens"] == 4 * 4 * 2 * 16  # the trainer's own token count, warm-up excluded
    assert r["energy_source"] == "estimate" and r["energy_j"] > 0
    assert r["vocab_size"] == 128 and r["workload"] == "tiny-bert"


@pytest.mark.slow
def test_trainer_callback_records_nvml_energy_with_its_source(tmp_path, nv, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from transformers import TrainerCallback

    from bayes_energy.runner.callback import EnergyCallback

    class Slow(TrainerCallback):
        def on_step_end(self, args, state, control, **kw):
            time.sleep(0.04)

    ClockNVML(nv, [HOPPER], power_w=[250.0])
    out = tmp_path / "runs.csv"
    cb = EnergyCallback(out, seq_len=16, warmup_steps=1, device="cuda:0")
    _trainer(tmp_path, [Slow(), cb]).train()
    row = cb.job.row
    assert row["status"] == "ok" and row["energy_source"] == "nvml" and row["hardware"] == "Fake GPU 0"
    assert row["energy_j"] / row["time_s"] == pytest.approx(250.0, rel=0.05)
    assert len(load_sweep(out)) == 1


FAILING_TRAINER_SCRIPT = """
import sys
import torch
from transformers import TrainerCallback
from bayes_energy.runner.callback import EnergyCallback
from tests.test_job_meter import _trainer
from pathlib import Path

class Boom(TrainerCallback):
    def on_step_end(self, args, state, control, **kw):
        if state.global_step == 4:
            raise RuntimeError("boom at step 4")

torch.set_num_threads(1)
tmp = Path(sys.argv[1])
cb = EnergyCallback(tmp / "runs.csv", seq_len=16, warmup_steps=2, powercap_root="/nonexistent")
_trainer(tmp, [cb, Boom()]).train()
"""


@pytest.mark.slow
def test_a_trainer_run_that_dies_half_way_is_written_as_failed(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(FAILING_TRAINER_SCRIPT)
    res = subprocess.run([sys.executable, str(script), str(tmp_path)], capture_output=True, text=True, timeout=120,
                         env=_env(), cwd=tmp_path)
    assert res.returncode != 0 and "boom at step 4" in res.stderr
    rows = _rows(tmp_path / "runs.csv")
    assert len(rows) == 1
    assert rows[0]["status"] == "failed" and rows[0]["error"] == "RuntimeError: boom at step 4"
    assert rows[0]["energy_j"] == "" and rows[0]["energy_source"] == ""


@pytest.mark.slow
def test_the_job_meter_and_importers_import_neither_pymc_nor_transformers():
    code = textwrap.dedent("""
        import sys
        import bayes_energy.runner
        from bayes_energy.runner import measure_job, load_codecarbon, load_zeus
        heavy = [m for m in sys.modules if m.split('.')[0] in ('pymc', 'arviz', 'pytensor', 'nutpie', 'transformers', 'torch')]
        assert not heavy, heavy
        from bayes_energy.runner import EnergyCallback
        bad = [m for m in sys.modules if m.split('.')[0] in ('pymc', 'arviz', 'pytensor', 'nutpie')
               or m.startswith('bayes_energy.models')]
        assert not bad, bad
        print('clean')
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT, env=_env())
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "clean"
