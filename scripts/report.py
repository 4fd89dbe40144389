"""Report on a sweep: `python scripts/report.py SWEEP_DIR` writes SWEEP_DIR/report.md (printed) and report.png."""

import argparse
import sys

from tinylm.analysis.report import ReportError, write_report


def main() -> None:
    parser = argparse.ArgumentParser(
        description="Rank a sweep's runs (markdown table) and plot their validation-loss curves (PNG)."
    )
    parser.add_argument("sweep_dir", help="a sweep directory, e.g. runs/multirun/<date>/<time>")
    args = parser.parse_args()
    try:
        text, markdown, png = write_report(args.sweep_dir)
    except (ReportError, OSError) as error:
        sys.exit(f"report: {error}")
    print(text)
    print(f"wrote {markdown} and {png}")


if __name__ == "__main__":
    main()
