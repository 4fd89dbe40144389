"""Results a user already has are never rewritten behind their back (issue 38): a run resumed in place keeps
what each earlier segment finished with; a command refused for bad input writes nothing; the report's figure
draws what its verdict table says."""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import lightning.pytorch as L
import pytest
from conftest import REPO, compose_train, small_corpus
from script_runner import run_script_in_process
from test_stats import fake_run

from tinylm.analysis.present.plots import ForestRow, forest_rows, report_figure, save_figure
from tinylm.analysis.report import build_report
from tinylm.errors import Interrupted
from tinylm.layout import SEGMENTS, earlier_segments, read_run_record, write_run_record
from tinylm.training.optimizers import learning_rate
from tinylm.training.run import run

# --- point 2: resuming a finished run in place -------------------------------------------------------------


def test_earlier_segments_are_the_kept_ones_then_the_record_itself(tmp_path):
    assert earlier_segments(tmp_path) == []  # no record: nothing to keep
    write_run_record(tmp_path, "completed", step=6, **{"loss/val_full": 4.0, "params": 10})
    first = {"status": "completed", "step": 6, "loss/val_full": 4.0}
    assert earlier_segments(tmp_path) == [first]  # in brief: `params` is the run's, not the segment's
    write_run_record(tmp_path, "interrupted", step=9, error="Interrupted: SIGTERM", segments=[first])
    assert earlier_segments(tmp_path) == [
        first,
        {"status": "interrupted", "step": 9, "error": "Interrupted: SIGTERM"},
    ]


class InterruptAt(L.Callback):
    """Stops the run as StopOnSignal does on SIGTERM, after optimizer step `step`."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_end(self, trainer: L.Trainer, *_: Any) -> None:
        if trainer.global_step == self.step:
            raise Interrupted(f"stopped after step {self.step}", signum=signal.SIGTERM, step=self.step)


class WatchBar(L.Callback):
    """What the step progress bar shows at each step: (initial, n, total)."""

    def __init__(self) -> None:
        self.seen: list[tuple[int, int, int | None]] = []

    def on_train_batch_end(self, trainer: L.Trainer, *_: Any) -> None:
        bar = trainer.progress_bar_callback.train_progress_bar
        self.seen.append((bar.initial, bar.n, bar.total))


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture
def lightning_log():
    """Every line Lightning logs while the test runs, wherever its handlers send them."""
    handler, logger = Lines(), logging.getLogger("lightning.pytorch")
    logger.addHandler(handler)
    level, logger.level = logger.level, logging.DEBUG
    yield handler.lines
    logger.removeHandler(handler)
    logger.setLevel(level)


@pytest.fixture
def run_log():
    """Every line tinylm's training run logs while the test runs."""
    handler, logger = Lines(), logging.getLogger("tinylm.training.run")
    logger.addHandler(handler)
    yield handler.lines
    logger.removeHandler(handler)


def test_an_interrupted_resume_in_place_keeps_the_completed_result(tmp_path, lightning_log, run_log):
    corpus = ["data=text", f"data.files={small_corpus(tmp_path)}", "sample.chars=0"]
    run_dir = tmp_path / "run"
    run(compose_train(run_dir, corpus))
    completed = read_run_record(run_dir)
    assert completed["status"] == "completed" and completed["step"] == 6

    resume = compose_train(
        run_dir,
        [*corpus, "ckpt_path=last", "trainer.max_steps=12", "trainer.enable_progress_bar=true",
         "callbacks.progress_bar.refresh_rate=1"],
    )  # fmt: skip
    bar = WatchBar()
    with pytest.raises(Interrupted):
        run(resume, observers=[bar, InterruptAt(9)])

    record = read_run_record(run_dir)
    assert record["status"] == "interrupted" and record["step"] == 9
    (segment,) = record[SEGMENTS]
    assert segment["status"] == "completed" and segment["step"] == 6
    for key in ("loss/val", "loss/val_full", "loss/val_best"):
        assert segment[key] == completed[key]
    # The resumed bar counts from step 6 to a known total: tqdm's rate and time left count steps 7..9 only.
    assert bar.seen == [(6, 7, 12), (6, 8, 12), (6, 9, 12)]
    # The interrupt's checkpoint says what it saves, so Lightning has nothing to assume.
    assert not [line for line in lightning_log if "weights_only" in line]
    # decay_steps follows max_steps (6, then 12): the resume says that its rate schedule moved, and how.
    optim = resume.optim
    after = learning_rate(6, optim.lr, optim.min_lr, optim.warmup_steps, 12)
    assert (
        "resumed at step 6 on another learning-rate schedule (optim.decay_steps 6 -> 12): the rate there goes "
        f"from {optim.min_lr:.3g} to {after:.3g}; optim.decay_steps=6 continues the schedule it had"
    ) in run_log

    # Resumed again to the end: the record is complete, and both earlier segments are kept, oldest first.
    run(compose_train(run_dir, [*corpus, "ckpt_path=last", "trainer.max_steps=12"]))
    final = read_run_record(run_dir)
    assert final["status"] == "completed" and final["step"] == 12
    assert [(s["status"], s["step"]) for s in final[SEGMENTS]] == [("completed", 6), ("interrupted", 9)]
    assert final[SEGMENTS][0]["loss/val_full"] == completed["loss/val_full"]


# --- point 3: a command refused for bad input writes nothing ------------------------------------------------


@pytest.mark.parametrize(
    ("override", "expect"),
    [
        ("trainer.max_steps=abc", "trainer.max_steps='abc' must be a positive whole number"),
        ("+model.nlayers=2", "model.nlayers is not a setting; did you mean model.n_layer?"),
    ],
)
def test_a_refused_command_leaves_no_run_directory(tmp_path, monkeypatch, override, expect):
    """As a user types it: no hydra.run.dir, so Hydra makes runs/<date>/<time>/ in the working directory."""
    monkeypatch.chdir(tmp_path)
    result = run_script_in_process("train.py", "latest_link=null", override)
    assert result.returncode == 2 and expect in result.stderr, result.stderr
    assert list(tmp_path.iterdir()) == []  # no runs/<date>/<time>/, no .hydra/, no metrics.json


def test_a_refused_command_removes_only_the_directories_it_made(tmp_path):
    (tmp_path / "kept").mkdir()  # an empty directory the user made is theirs
    result = run_script_in_process("train.py", f"hydra.run.dir={tmp_path / 'kept'}", "trainer.max_steps=0")
    assert result.returncode == 2
    result = run_script_in_process("train.py", f"hydra.run.dir={tmp_path / 'new' / 'run'}", "seed=-1")
    assert result.returncode == 2 and "seed=-1 must be a whole number >= 0" in result.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["kept"] and not list((tmp_path / "kept").iterdir())


def test_a_single_run_refused_in_run_writes_nothing(tmp_path):
    """run(cfg) itself, without a script; a sweep's refused job still records why, for the report
    (tests/test_sweep.py::test_failing_jobs_are_recorded_and_the_sweep_goes_on)."""
    cfg = compose_train(tmp_path / "run", ["model.n_head=3"])
    with pytest.raises(Exception, match="divisible by n_head=3"):
        run(cfg)
    assert not (tmp_path / "run").exists()  # a single run refused: nothing written


def test_the_type_of_a_step_count_is_refused_before_torch_loads(tmp_path):
    """`trainer.max_steps=abc` needs no torch to be refused (seconds of imports on a small machine)."""
    program = (
        "import runpy, sys\n"
        f"sys.argv = ['train.py', 'trainer.max_steps=abc', 'hydra.run.dir={tmp_path / 'run'}']\n"
        "try:\n"
        f"    runpy.run_path({str(REPO / 'scripts' / 'train.py')!r}, run_name='__main__')\n"
        "except SystemExit as stop:\n"
        "    print(stop.code, 'torch' in sys.modules, 'lightning' in sys.modules)\n"
    )
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120)
    assert result.stdout.split() == ["2", "False", "False"], result.stdout + result.stderr
    assert "trainer.max_steps='abc' must be a positive whole number" in result.stderr
    assert not (tmp_path / "run").exists()


# --- point 4: the report's figure draws what the verdict table says ---------------------------------------


@pytest.fixture
def three_settings(tmp_path) -> Path:
    """pre/gelu (the baseline), post/gelu clearly worse, pre/swiglu within noise; seeds 1-3, made-up results."""
    sweep = tmp_path / "sweep"
    losses = {
        ("pre", "gelu"): [2.00, 2.10, 1.90],
        ("post", "gelu"): [2.30, 2.41, 2.19],
        ("pre", "swiglu"): [2.01, 2.05, 1.95],
    }
    number = 0
    for (norm, act), values in losses.items():
        for seed, loss in zip(("1", "2", "3"), values, strict=True):
            fake_run(sweep, number, "completed", loss, norm=norm, act=act, seed=seed)
            number += 1
    return sweep


def test_the_forest_rows_are_the_verdict_table(three_settings):
    report = build_report(three_settings, baseline="norm=pre,act=gelu")
    rows = forest_rows(report)
    assert rows[0] == ForestRow(
        "norm=pre act=gelu", 0.0, None, None, "baseline", baseline=True
    )  # named by the choices that vary between the rows, as the tables name them
    judged = {
        s.label(report.shown_family_columns): s.comparison for s in report.family if s.comparison is not None
    }
    assert [row.label for row in rows[1:]] == list(judged)
    for row in rows[1:]:
        c = judged[row.label]
        assert (row.mean, row.low, row.high, row.verdict) == (
            c.tests.difference.mean, c.tests.difference.low, c.tests.difference.high, c.judgement.verdict
        )  # fmt: skip
    worse = next(row for row in rows if row.label.startswith("norm=post"))
    assert worse.mean == pytest.approx(0.3) and str(worse.verdict).startswith("worse") and worse.low > 0


def test_the_report_figure_shows_the_rows_their_verdicts_and_what_is_better(three_settings, tmp_path):
    report = build_report(three_settings, baseline="norm=pre,act=gelu")
    figure = report_figure(report)
    verdicts, curves = figure.axes[:2]
    rows = forest_rows(report)
    shown = [label.get_text() for label in verdicts.get_yticklabels()]  # top row first
    assert shown == [f"{rows[0].label}  (baseline)", *(row.label for row in rows[1:])]
    (right,) = verdicts.child_axes  # the verdicts, as the right-hand labels
    assert [label.get_text().replace("\n", " ") for label in right.get_yticklabels()] == [
        row.verdict for row in rows
    ]
    assert "lower is better" in verdicts.get_xlabel()
    assert figure.get_suptitle() == "norm × act, final validation loss against norm=pre act=gelu"
    assert "validation loss" in curves.get_ylabel()
    png = save_figure(figure, tmp_path / "report.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_without_a_baseline_the_figure_shows_each_settings_estimate(three_settings):
    report = build_report(three_settings)
    rows = forest_rows(report)
    assert not any(row.baseline for row in rows) and len(rows) == 3
    assert {row.verdict for row in rows} == {"no baseline named: no verdict"}
    assert sorted(round(row.mean, 6) for row in rows) == [2.0, 2.003333, 2.3]
    assert "(no baseline named)" in report_figure(report).get_suptitle()
