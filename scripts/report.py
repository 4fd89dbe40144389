"""Compare a sweep's settings: `python scripts/report.py SWEEP_DIR [--baseline norm=pre,act=gelu] [--x step]`.

Writes SWEEP_DIR/report.md (also printed), report.json, report.png and, when the learning rate varies,
lr_sensitivity.png (docs/sweeps.md).
"""

import argparse
from typing import NoReturn

from tinylm.cli import USAGE_EXIT_CODE, exit_with


class OneLineErrors(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        exit_with(f"{message}; usage: {self.format_usage().strip().removeprefix('usage: ')}", USAGE_EXIT_CODE)


def main() -> None:
    parser = OneLineErrors(
        prog="python scripts/report.py",
        description="Compare a sweep's settings over seeds (markdown, JSON) and plot their curves (PNG).",
    )
    parser.add_argument("sweep_dir", help="a sweep directory, e.g. runs/multirun/<date>/<time>")
    parser.add_argument(
        "--baseline",
        help="the setting to compare against, e.g. norm=pre,act=gelu (default: the best setting)",
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

    from tinylm.analysis.sweep_report import write_report  # after parsing: --help and usage errors stay fast
    from tinylm.errors import UserError

    try:
        text, written = write_report(args.sweep_dir, args.baseline, args.x, args.band, args.curve)
    except UserError as error:
        exit_with(str(error), USAGE_EXIT_CODE)
    except OSError as error:
        exit_with(
            f"cannot write the report into {args.sweep_dir}: {error.strerror or error}", USAGE_EXIT_CODE
        )
    print(text)
    print("wrote " + ", ".join(str(path) for path in written))


if __name__ == "__main__":
    main()
