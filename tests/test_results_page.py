"""docs/results.md says what its stored reports say (issue 34, point 7). Every table on the page names the
report it is cut from (`<!-- from results/<sweep>/report.md -->` above it); each of its rows must be a row of
a table of that report, cell for cell in the columns it keeps, and the report's numbers must be those of the
report.json written beside it. The cost table is checked against the runs in report.json and cost.json."""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path

import pytest

from tinylm.analysis.estimates import Estimate
from tinylm.analysis.formats import fmt_interval, fmt_number, fmt_p

DOCS = Path(__file__).parents[1] / "docs"
PAGE = DOCS / "results.md"
SOURCE = re.compile(r"<!-- from (results/[\w./-]+/report\.md) -->")


def tables(text: str) -> list[tuple[int, list[str], list[list[str]]]]:
    """Every markdown table in `text`: the line it starts on, its header and its rows, as cell texts."""
    found, lines, number = [], text.splitlines(), 0
    while number < len(lines):
        if lines[number].startswith("|") and number + 1 < len(lines) and lines[number + 1].startswith("|---"):
            header, rows, end = cells(lines[number]), [], number + 2
            while end < len(lines) and lines[end].startswith("|"):
                rows.append(cells(lines[end]))
                end += 1
            found.append((number, header, rows))
            number = end
        else:
            number += 1
    return found


def cells(line: str) -> list[str]:
    parts = re.split(r"(?<!\\)\|", line.strip())[1:-1]
    return [part.strip().replace("**", "") for part in parts]


def page_tables() -> list[tuple[str, list[str], list[list[str]]]]:
    """The page's tables, each with the report named in the comment just above it ('' when none is)."""
    text = PAGE.read_text(encoding="utf-8")
    lines = text.splitlines()
    named = []
    for start, header, rows in tables(text):
        above = next((line for line in reversed(lines[:start]) if line.strip()), "")
        match = SOURCE.search(above)
        named.append((match.group(1) if match else "", header, rows))
    return named


def test_every_table_on_the_page_names_its_report_or_is_the_cost_table():
    for source, header, _ in page_tables():
        assert source or header[0] == "experiment", f"a table with no stored report above it: {header}"
        if source:
            assert (DOCS / source).is_file() and (DOCS / source).with_name("report.json").is_file(), source


@pytest.mark.parametrize("number", range(len(page_tables())))
def test_each_row_is_a_row_of_its_report_cell_for_cell(number):
    source, header, rows = page_tables()[number]
    if not source:
        return
    report = tables((DOCS / source).read_text(encoding="utf-8"))
    # The report's table that has every column the page keeps; its rows keyed by the choices they show.
    candidates = sorted(((h, r) for _, h, r in report if set(header) <= set(h)), key=lambda t: t[0] != header)
    assert candidates, f"{source} has no table with the columns {header}"
    their_header, their_rows = candidates[0]  # the table with exactly these columns, else the first with all
    keys = [c for c in header if c in CHOICE_COLUMNS]
    assert keys, f"the page's table from {source} shows no choice column to match rows by"
    theirs = {tuple(row[their_header.index(k)] for k in keys): row for row in their_rows}
    for row in rows:
        key = tuple(row[header.index(k)] for k in keys)
        assert key in theirs, f"{source}: no row {dict(zip(keys, key, strict=True))}"
        for column, cell in zip(header, row, strict=True):
            assert cell == theirs[key][their_header.index(column)], (source, key, column)


# The columns that name a setting in the reports the page cites (the report's own column names).
CHOICE_COLUMNS = {"norm", "act", "norm_type", "optim.lr", "optim.warmup_steps", "model.n_layer", "model.qk_norm",
                  "size", "seed", "data", "trainer.max_steps", "corpus", "optim"}  # fmt: skip


@pytest.mark.parametrize("source", sorted({s for s, _, _ in page_tables() if s}))
def test_each_stored_report_states_the_numbers_of_its_json(source):
    """The report.md a table is cut from was written with the report.json beside it: every comparison's
    difference, interval and Holm p (and, on a ladder, verdict) as the report prints them."""
    text = (DOCS / source).read_text(encoding="utf-8")
    record = json.loads((DOCS / source).with_name("report.json").read_text(encoding="utf-8"))
    family = record["tuned"] or record["settings"]
    compared = [s for s in family if s["vs_baseline"]]
    assert compared, source
    judged_apart = record.get("rule") == "tuned then judged" and record["tuned"]
    for s in compared:
        # Tuned then judged, the family table shows the judging seeds' comparison (the sweep's judges nothing).
        c = (judged_apart and s["added_seeds_vs_baseline"]) or s["vs_baseline"]
        d = c["difference"] and Estimate(**c["difference"])
        numbers = (
            fmt_number(d.mean if d else None, signed=True),
            fmt_interval(d, signed=True),
            fmt_p(c["p_holm"]),
        )
        # The family table's cells, or a ladder's cell of each level: `mean [low, high], p p_holm: verdict`
        # (across corpora, the difference's share of the baseline's gain between the interval and the p).
        if "scale" in record:
            row = (re.escape("{} {}".format(*numbers[:2])) + r"( \([+-][\d.]+% of the baseline's gain\))?"
                   + re.escape(f", p {numbers[2]}: {c['verdict']}"))  # fmt: skip
            assert re.search(row, text), (source, s["choices"], row)
        else:
            assert " | ".join(numbers) in text, (source, s["choices"], numbers)


def test_the_cost_table_is_what_the_runs_took():
    (table,) = [(h, r) for s, h, r in page_tables() if not s]
    header, rows = table
    for row in rows:
        sweep = re.search(r"`([\w./-]+)`", row[header.index("stored report")]).group(1)
        record = json.loads((DOCS / sweep / "report.json").read_text(encoding="utf-8"))
        cost = json.loads((DOCS / sweep / "cost.json").read_text(encoding="utf-8"))
        times = [run["wall_time_s"] for run in record["runs"] if run["wall_time_s"] is not None]
        assert row[header.index("runs")] == str(len(record["runs"])), sweep
        assert row[header.index("wall time")] == f"{cost['wall_s'] / 60:.0f} min", sweep
        median, low, high = statistics.median(times), min(times), max(times)
        assert row[header.index("one run (median, range)")] == f"{median:.0f} s ({low:.0f}–{high:.0f} s)", (
            sweep
        )


@pytest.mark.parametrize("report", sorted(p.name for p in (DOCS / "results").iterdir()))
def test_every_stored_report_renders_again_from_its_json_alone(report):
    """Each stored report.md is what its report.json renders to, byte for byte (issue 47, point 2)."""
    from tinylm.analysis.report_json import from_json
    from tinylm.analysis.sweep_report import report_markdown

    folder = DOCS / "results" / report
    record = json.loads((folder / "report.json").read_text(encoding="utf-8"))
    assert record["format"] >= 2 and "why" in record and "probe" in record
    assert report_markdown(from_json(record)) == (folder / "report.md").read_text(encoding="utf-8")


def test_no_stored_seed_both_chose_a_rate_and_was_judged_at_it():
    """Issue 48: a report judged by the rule since 2026-12-04 records, per tuned setting, the seeds that chose
    its rate and the seeds it is judged on; they never overlap, and a resolved row was judged on some."""
    judged = 0
    for path in sorted((DOCS / "results").glob("*/report.json")):
        record = json.loads(path.read_text(encoding="utf-8"))
        if record.get("rule") != "tuned then judged":
            continue
        for setting in record["tuned"]:
            assert setting["tuned_on"] and not set(setting["tuned_on"]) & set(setting["judged_on"]), path
            answer = setting["added_seeds_vs_baseline"] or setting["vs_baseline"]
            if answer and answer["outcome"] != "not resolved":
                assert set(answer["seeds"]) <= set(setting["judged_on"]), path
                judged += 1
    assert judged >= 1  # swiglu_vs_gelu at least


def test_an_answer_open_at_the_designs_horizon_says_add_seeds_adds_no_more_and_what_it_would_take():
    """rms_vs_layer's one row is open after the 12 added seeds its design allows: the Answer must not send
    the reader to add_seeds (which stops there), and says the added seeds the row's spread would need."""
    from tinylm.analysis.report_json import from_json
    from tinylm.analysis.sweep_report import report_markdown

    record = json.loads((DOCS / "results" / "rms_vs_layer" / "report.json").read_text(encoding="utf-8"))
    report = from_json(record)
    (row,) = report.sizing.rows
    assert row.spent and row.has == row.horizon == 12 and row.needed == 113
    text = report_markdown(report)
    assert (
        "Still open: 1 of 1, at the sequential design's horizon (12 added seeds), where `add_seeds` adds no "
        "more. At this spread, added seeds to find the difference (or δ) 80% of the time: "
        "`norm=pre norm_type=rms act=gelu` 113." in text
    )
    assert "adds judging seeds at the chosen rates, in rounds, until each is resolved" not in text
