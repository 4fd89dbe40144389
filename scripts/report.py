"""Compare a sweep's settings: `python scripts/report.py SWEEP_DIR [--baseline norm=pre,act=gelu] [--ladder KEY]
[--metric steps_to=1.88] [--min-effect 0.01]`.

Writes SWEEP_DIR/report.md (also printed), report.json, report.png and, when the learning rate varies,
lr_sensitivity.png (docs/sweeps.md). `python scripts/report.py --from-json PATH/report.json` writes report.md
again beside that json, from it alone (with the figures that need no curves).
"""

from tinylm.cli import USAGE_EXIT_CODE, OneLineErrors, exit_with


def main() -> None:
    parser = OneLineErrors(
        prog="python scripts/report.py",
        description="Compare a sweep's settings over seeds (markdown, JSON) and plot their curves (PNG).",
    )
    parser.add_argument("sweep_dir", nargs="?", help="a sweep directory, e.g. runs/multirun/<date>/<time>")
    parser.add_argument(
        "--from-json",
        metavar="REPORT_JSON",
        help="render report.md again from a report.json alone, beside it (no runs needed)",
    )
    parser.add_argument(
        "--baseline",
        help="the setting to compare against, e.g. norm=pre,act=gelu (default: the experiment preset's "
        "`baseline:`; without one, no verdicts)",
    )
    parser.add_argument(
        "--ladder",
        help="judge level by level along these choices, e.g. optim.lr or norm,model.n_layer: each level's "
        "designs against the baseline of that level (default: the experiment preset's `ladder:`)",
    )
    parser.add_argument(
        "--metric",
        help="what each run's result is: loss (default: the final validation loss), steps_to=LEVEL or "
        "time_to=LEVEL (the optimizer steps or training seconds at which its validation loss first reached "
        "LEVEL nats/char; a run that never did fails), e.g. steps_to=1.88",
    )
    parser.add_argument(
        "--min-effect",
        type=float,
        help="δ, the smallest difference worth a claim, in the metric's units (default 0.01 nats/char; "
        "50 steps for steps_to, 10 s for time_to): within ±δ is equivalent",
    )
    parser.add_argument(
        "--x", choices=("step", "chars", "time"), default="step", help="the curves' x axis (default: step)"
    )
    parser.add_argument(
        "--band", choices=("minmax", "ci"), default="minmax", help="the band around each mean curve"
    )
    parser.add_argument(
        "--curve",
        help="plot another logged scalar than the validation loss, e.g. training_health/attn_max_logit/block_4",
    )
    args = parser.parse_args()
    if args.min_effect is not None and not args.min_effect > 0:
        parser.error("--min-effect must be a positive number, in the metric's units")
    if (args.sweep_dir is None) == (args.from_json is None):
        parser.error("pass a sweep directory, or --from-json PATH/report.json (one of them)")

    # After parsing: --help and usage errors stay fast.
    from tinylm.analysis.present.write_report import write_from_json, write_report
    from tinylm.errors import UserError

    try:
        if args.from_json is not None:
            text, written = write_from_json(args.from_json)
        else:
            text, written = write_report(
                args.sweep_dir,
                args.baseline,
                args.x,
                args.band,
                args.curve,
                args.min_effect,
                args.ladder,
                args.metric,
            )
    except UserError as error:
        exit_with(str(error), USAGE_EXIT_CODE)
    except OSError as error:
        exit_with(
            f"cannot write the report into {args.sweep_dir or args.from_json}: {error.strerror or error}",
            USAGE_EXIT_CODE,
        )
    print(text)
    print("wrote " + ", ".join(str(path) for path in written))


if __name__ == "__main__":
    main()
