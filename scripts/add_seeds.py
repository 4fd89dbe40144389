"""Add seeds to a finished sweep until its comparisons are resolved (docs/sweeps.md):

    python scripts/add_seeds.py SWEEP_DIR [--baseline act=gelu] [--ladder optim.lr] [--min-effect 0.02]
        [--max-seeds 16] [--per-round 2] [--max-minutes 60]

Each round adds seeds to the settings whose comparison with the baseline is still open, and to the baseline,
then looks again; SWEEP_DIR/sequential.json holds the design and its looks, and `scripts/report.py SWEEP_DIR`
judges the merged sweep by them. Ctrl-C keeps what is done: rerun the same command to carry on.
"""

import sys
from pathlib import Path

from tinylm.cli import OneLineErrors, exit_with


def main() -> None:
    parser = OneLineErrors(
        prog="python scripts/add_seeds.py",
        description="Add seeds, in rounds, to a sweep's open comparisons until each is resolved or the budget ends.",
    )
    parser.add_argument("sweep_dir", help="a finished sweep directory, e.g. runs/multirun/<date>/<time>")
    parser.add_argument(
        "--baseline", help="the setting to compare against (default: the experiment's baseline)"
    )
    parser.add_argument(
        "--ladder",
        help="judge each level of these choices against its own baseline (default: the experiment's `ladder:`); "
        "the design keeps it",
    )
    parser.add_argument("--min-effect", type=float, default=None, help="δ in nats/char (default 0.01)")
    parser.add_argument("--alpha", type=float, default=None, help="family-wise error rate (default 0.05)")
    parser.add_argument("--max-seeds", type=int, default=16, help="most seeds per setting (default 16)")
    parser.add_argument("--per-round", type=int, default=2, help="seeds added per round (default 2)")
    parser.add_argument("--max-minutes", type=float, help="stop before a round that would end past this")
    args = parser.parse_args()
    if args.max_seeds < 2 or args.per_round < 1:
        parser.error("--max-seeds must be at least 2 and --per-round at least 1")
    if args.min_effect is not None and args.min_effect <= 0:
        parser.error("--min-effect must be a positive number of nats/char")
    if args.alpha is not None and not 0 < args.alpha < 1:
        parser.error("--alpha must lie between 0 and 1")

    from tinylm.analysis.estimates import MIN_EFFECT
    from tinylm.analysis.present.write_report import write_report
    from tinylm.analysis.verdicts import ALPHA
    from tinylm.errors import ReportedError
    from tinylm.seed_rounds.plan import Budget  # after parsing: --help stays fast
    from tinylm.seed_rounds.rounds import add_seeds

    train = [sys.executable, str(Path(__file__).with_name("train.py"))]
    budget = Budget(args.max_seeds, args.per_round, args.max_minutes)
    try:
        add_seeds(
            args.sweep_dir,
            train,
            args.baseline,
            args.min_effect or MIN_EFFECT,
            args.alpha or ALPHA,
            budget,
            ladder=args.ladder,
        )
        _, written = write_report(args.sweep_dir)
    except ReportedError as error:
        exit_with(str(error), error.exit_code)
    print("wrote " + ", ".join(str(path) for path in written))


if __name__ == "__main__":
    main()
