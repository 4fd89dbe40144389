"""benchmarks/readme_figures.py keeps the README's quoted figures in step with its commands: the rules that
compare and write them, on the real README and on constructed lines (running the commands is the script's)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import readme_figures

README = readme_figures.README.read_text(encoding="utf-8")
DONE = (
    "done: 700 steps in 2m30s (14,000 chars/s); final loss 1.6000 nats/char = 2.308 bits/char on all 7,477 "
    "validation windows; validation loss reached 2 at step 200 (40.2 s of training), not 1.6; checkpoint "
    "/tmp/x/run/checkpoints/last.ckpt; tensorboard --logdir /tmp/x/run/tb"
)
EVAL = "runs/heldout.txt: loss 1.5000 nats/char, 2.1640 bits/char over 19,968 chars (312 windows of 64)"


def test_the_readme_quotes_a_done_line_and_an_eval_line_the_script_reads():
    assert readme_figures.DONE.search(README) and readme_figures.EVAL.search(README)
    assert readme_figures.FINAL.search(README)


def test_a_measured_figure_that_differs_from_the_readmes_is_found_and_written_in_its_place():
    measured = {"done": DONE, "eval": EVAL}
    found = readme_figures.differences(measured, README)
    assert len(found) == 2 and found[0].startswith("final loss") and found[1].startswith("eval")
    written = readme_figures.written(measured, README, with_times=False)
    assert readme_figures.differences(measured, written) == []
    (done,) = [line for line in written.splitlines() if line.startswith("done: ")]
    assert "steps in … (… chars/s)" in done and "(… s of training)" in done  # a shared machine's times out
    assert "/path/to/tinylm/runs/norm=pre,act=swiglu/<date>_<time>/checkpoints/last.ckpt" in done
    kept = readme_figures.written(measured, README, with_times=True)
    assert "steps in 2m30s (14,000 chars/s)" in kept and "(40.2 s of training)" in kept
