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
from tinylm.analysis.present.formats import fmt_interval, fmt_number, fmt_p

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
        seed_claims = header[0] == CLAIM
        assert source or seed_claims or header[0] == "experiment", (
            f"a table with no stored report above it: {header}"
        )
        if source:
            assert (DOCS / source).is_file() and (DOCS / source).with_name("report.json").is_file(), source


@pytest.mark.parametrize("number", range(len(page_tables())))
def test_each_row_is_a_row_of_its_report_cell_for_cell(number):
    source, header, rows = page_tables()[number]
    if not source:
        return  # the cost table and the seed claims table have their own tests
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


CLAIM = "claim (the seed's words)"  # the seed claims table's first column: its rows cite several reports


def test_the_seed_claims_table_quotes_only_the_verdicts_of_the_reports_each_row_names():
    """Each claim's row names its stored reports (their sweeps in backquotes), and every verdict it quotes is
    one of theirs, failures included, as the page's prose is held to (issue 64, point 5)."""
    (rows,) = [rows for source, header, rows in page_tables() if header[0] == CLAIM]
    stored = {p.name for p in (DOCS / "results").iterdir()}
    assert len(rows) >= 5
    for row in rows:
        text = " ".join(row)
        cited = set(re.findall(r"`([\w-]+)`", text)) & stored
        assert cited, f"a claim that names no stored report: {row[0]}"
        assert not sentences_beyond_their_verdicts(row[0], text, cited)


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
    compared = [s for s in family if comparison_of(s, False)]
    assert compared, source
    judged_apart = record.get("rule") == "tuned then judged" and record["tuned"]
    for s in compared:
        # Tuned then judged, the family table shows the judging seeds' comparison (the sweep's judges nothing).
        difference, p, verdict = comparison_of(s, judged_apart)
        d = difference and Estimate(*(difference[k] for k in ("mean", "n", "sd", "low", "high")))
        numbers = (fmt_number(d.mean if d else None, signed=True), fmt_interval(d, signed=True), fmt_p(p))
        # The family table's cells, or a ladder's cell of each level: `mean [low, high], p p_holm: verdict`
        # (across corpora, the difference's share of the baseline's gain between the interval and the p).
        if "scale" in record or record.get("ladder"):
            row = (re.escape("{} {}".format(*numbers[:2])) + r"( \([+-][\d.]+% of the baseline's gain\))?"
                   + re.escape(f", p {numbers[2]}: {verdict}"))  # fmt: skip
            assert re.search(row, text), (source, s["choices"], row)
        else:
            assert " | ".join(numbers) in text, (source, s["choices"], numbers)


def comparison_of(setting: dict, judged_apart: bool) -> tuple[dict | None, float | None, str] | None:
    """A stored setting's comparison as (difference, Holm-adjusted p, verdict text), in the json of any
    format: before format 6 `vs_baseline` with `p_holm`, from 6 on `comparison` with tests and judgement."""
    if "vs_baseline" in setting:
        c = (judged_apart and setting["added_seeds_vs_baseline"]) or setting["vs_baseline"]
        return (c["difference"], c["p_holm"], c["verdict"]) if c else None
    c = (judged_apart and setting["added"]) or setting["comparison"]
    if not c:
        return None
    return c["tests"]["difference"], c["judgement"]["p_adjusted"], c["judgement"]["verdict"]["text"]


def test_the_cost_table_is_what_the_runs_took():
    (table,) = [(h, r) for s, h, r in page_tables() if not s and h[0] == "experiment"]
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
    """Each stored report.md is what its report.json renders to, byte for byte (issue 47, point 2), and a stored
    ladder's words across levels are re-judged when the rule changes (issues 49 and 59)."""
    from tinylm.analysis.ladder import trends
    from tinylm.analysis.present.render import markdown
    from tinylm.analysis.present.schema import from_json

    folder = DOCS / "results" / report
    record = json.loads((folder / "report.json").read_text(encoding="utf-8"))
    assert record["format"] >= 2 and "why" in record and "probe" in record
    rebuilt = from_json(record)
    assert markdown(rebuilt) == (folder / "report.md").read_text(encoding="utf-8")
    if rebuilt.ladder is not None:  # its words across levels are what its levels give under the rule in force
        ladder = rebuilt.ladder
        again = trends(ladder.rungs, ladder.columns, rebuilt.alpha, ladder.axis)
        assert [t.verdict for t in again] == [t.verdict for t in ladder.trends]


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
            if "vs_baseline" in setting:  # before format 6
                answer = setting["added_seeds_vs_baseline"] or setting["vs_baseline"]
                outcome, seeds = (answer["outcome"], answer["seeds"]) if answer else (None, ())
            else:
                answer = setting["added"] or setting["comparison"]
                outcome = answer and answer["judgement"]["verdict"]["outcome"]
                seeds = answer["tests"]["seeds"] if answer else ()
            if answer and outcome != "not resolved":
                assert set(seeds) <= set(setting["judged_on"]), path
                judged += 1
    assert judged >= 1  # swiglu_vs_gelu at least


def test_an_answer_open_at_the_designs_horizon_says_add_seeds_adds_no_more_and_what_it_would_take():
    """rms_vs_layer's one row is open after the 12 added seeds its design allows: the Answer must not send
    the reader to add_seeds (which stops there), and says the added seeds the row's spread would need."""
    from tinylm.analysis.present.render import markdown
    from tinylm.analysis.present.schema import from_json

    record = json.loads((DOCS / "results" / "rms_vs_layer" / "report.json").read_text(encoding="utf-8"))
    report = from_json(record)
    (row,) = report.sizing.rows
    assert row.spent and row.has == row.horizon == 12 and row.needed == 113
    text = markdown(report)
    assert (
        "Still open: 1 of 1, at the sequential design's horizon (12 added seeds), where `add_seeds` adds no "
        "more. At this spread, added seeds to find the difference (or δ) 80% of the time: "
        "`norm=pre norm_type=rms act=gelu` 113." in text
    )
    assert "adds judging seeds at the chosen rates, in rounds, until each is resolved" not in text


# Issue 59: a sentence that states a finding quotes a verdict its report prints. A quoted phrase that starts
# with a verdict's word must be one of the cited reports' verdicts (or a clause of one: its words before the
# look, the loss verdict before `; fails …`, a word across levels and what it says at a level), unless the
# three words before it negate it or report an old wording (`no`, `not`, `nor`, `never`, `was`, `said`, …).
VERDICT_START = re.compile(
    r"^(better|worse|not resolved|equivalent|identical|holds|flips|grows|shrinks|changes)\b"
)
NEGATED = {"no", "not", "nor", "neither", "never", "was", "were", "said"}
LINK = re.compile(r"results/([\w-]+)/report\.md")
FAILS = re.compile(r"fails (\d+)/(\d+) vs (\d+)/(\d+)")
README = DOCS.parent / "README.md"


def report_verdicts(sweep: str) -> list[str]:
    """Every verdict a stored report's json records: each comparison's, each word across levels (the loss's
    and the step multiplier's), in the json of any format."""
    found: list[str] = []

    def walk(value: object) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                if key == "verdict" and isinstance(item, str):
                    found.append(item)
                elif key == "verdict" and isinstance(item, dict) and isinstance(item.get("text"), str):
                    found.append(item["text"])  # format 6 on: the words beside their outcome
                elif key == "word" and isinstance(item, str):
                    found.append(item)  # a word across levels (the loss's, or a multiplier's)
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    walk(json.loads((DOCS / "results" / sweep / "report.json").read_text(encoding="utf-8")))
    return found


def verdict_phrases(verdicts: list[str]) -> set[str]:
    """What quoting a verdict may quote: the whole, without its look; the loss verdict before `; fails …`; a
    word across levels (`changes with size`), what follows it (`holds at every level: better`), and a level's
    verdict without its level (`better at 0.1` -> `better`)."""
    phrases = set()
    for verdict in verdicts:
        whole = re.sub(r" \(look \d+, \d+ added seeds\)$", "", verdict)
        phrases |= {
            verdict,
            whole,
            whole.split("; ")[0],
            re.sub(r" at look \d+ \(\d+ added seeds\)$", "", verdict),
        }
        for part in re.split(r": |; |, ", whole):
            phrases |= {part, re.sub(r" at \S+$", "", part)}
    return phrases


def quoted_claims(text: str) -> list[tuple[str, str]]:
    """Each backquoted phrase that starts with a verdict's word, with the sentence before it; negated or
    historical mentions left out (a negation among the three words before it, other quotes skipped)."""
    claims, text = [], " ".join(text.split())
    for match in re.finditer(r"`([^`]+)`", text):
        phrase = match.group(1)
        if not VERDICT_START.match(phrase):
            continue
        before = re.split(r"[.!?]\s", text[: match.start()])[-1]
        words = [w.strip(",;:()*").lower() for w in re.sub(r"`[^`]*`", " ", before).split()[-3:]]
        if not NEGATED & set(words):
            claims.append((phrase, before))
    return claims


def page_sections() -> list[tuple[str, str, set[str]]]:
    """docs/results.md's sections (## and ###): heading, prose (tables left out) and the reports it cites."""
    sections, heading, lines = [], "", []
    text = re.sub(r"```.*?```", "", PAGE.read_text(encoding="utf-8"), flags=re.DOTALL)  # commands, not prose
    for line in [*text.splitlines(), "## end"]:
        if line.startswith("## ") or line.startswith("### "):
            text = "\n".join(lines)
            sections.append(
                (heading, " ".join(x for x in lines if not x.startswith("|")), set(LINK.findall(text)))
            )
            heading, lines = line, []
        else:
            lines.append(line)
    return [s for s in sections if s[2]]


def readme_findings() -> list[tuple[str, str, set[str]]]:
    """The README's findings bullets, each with the stored reports it names (its sweeps in backquotes)."""
    text = README.read_text(encoding="utf-8")
    block = text[text.index("What the stored sweeps found") :].split("\n\n")[0]
    bullets = re.split(r"\n- ", block)[1:]
    stored = {p.name for p in (DOCS / "results").iterdir()}
    return [
        (b.split("(")[0], " ".join(b.split()), set(re.findall(r"`([\w-]+)`", b)) & stored) for b in bullets
    ]


def sentences_beyond_their_verdicts(name: str, prose: str, cited: set[str]) -> list[str]:
    """What a section or bullet says that its cited reports do not."""
    verdicts = sorted({v for sweep in cited for v in report_verdicts(sweep)})
    phrases, wrong = verdict_phrases(verdicts), []
    for phrase, before in quoted_claims(prose):
        if phrase not in phrases:
            wrong.append(f"{name}: `{phrase}` is no verdict of {sorted(cited)} ({before[-60:]!r})")
    # A verdict that counts failures on either side is never quoted without them.
    for verdict in verdicts:
        for clause in FAILS.finditer(verdict):
            if (clause.group(1), clause.group(3)) != ("0", "0") and clause.group(0) not in prose:
                wrong.append(f"{name}: drops `{clause.group(0)}` of `{verdict}`")
    # "Nothing resolves" and "no trend word" are claims about every verdict cited.
    if re.search(r"nothing resolves|no trend word", prose, re.IGNORECASE):
        resolved = [v for v in verdicts if not v.startswith(("not resolved", "not yet judged"))]
        if any(not v.startswith(("equivalent",)) for v in resolved):
            wrong.append(f"{name}: says nothing resolves, but its reports say {sorted(set(resolved))}")
    return wrong


@pytest.mark.parametrize("section", [s[0] for s in page_sections()])
def test_every_verdict_the_results_page_quotes_is_one_its_reports_print(section):
    (found,) = [s for s in page_sections() if s[0] == section]
    assert not sentences_beyond_their_verdicts(*found)


@pytest.mark.parametrize("bullet", [b[0] for b in readme_findings()])
def test_every_verdict_the_readme_findings_quote_is_one_their_reports_print(bullet):
    (found,) = [b for b in readme_findings() if b[0] == bullet]
    assert found[2], f"README finding names no stored report: {bullet}"
    assert not sentences_beyond_their_verdicts(*found)


def test_the_verdict_check_catches_the_sentences_issue_59_found():
    """The sentences the issue's audit found, each in the place it stood: a verdict of another report, a
    failure clause dropped, and "nothing resolves" beside a resolved word across sizes."""
    qk = "sandwich are `worse` than pre-norm GELU; post-norm is `not resolved`. QK-norm is `better` at lr 1e-1 only."
    assert sentences_beyond_their_verdicts("lr", qk, {"lr_sensitivity"})
    muon = (
        "Muon is `better` than AdamW under both placements: `holds at every level`. AdamW failed 0/8 vs 2/8."
    )
    assert sentences_beyond_their_verdicts("optim", muon, {"optimizer_ladder"})
    scale = (
        "Nothing resolves at any size, and no trend word is earned. SwiGLU against GELU: `changes with size`."
    )
    assert sentences_beyond_their_verdicts("scale", scale, {"scale_ladder"})
    fine = "No corpus says `worse`; SwiGLU is `better` at python_stdlib and `not resolved` at shakespeare."
    assert not sentences_beyond_their_verdicts("corpus", fine, {"corpus_ladder"})


def holm_over(raw: list[float | None]) -> list[float | None]:
    """Holm over the p-values in `raw` (None: no test), in its order."""
    from statsmodels.stats.multitest import multipletests

    tested = [p for p in raw if p is not None]
    adjusted = iter(multipletests(tested, method="holm")[1] if tested else [])
    return [None if p is None else float(next(adjusted)) for p in raw]


def same(found: list[float | None], stored: list[float | None]) -> bool:
    pairs = zip(found, stored, strict=True)
    return all((a is None) == (b is None) and (a is None or abs(a - b) < 1e-12) for a, b in pairs)


@pytest.mark.parametrize("report", sorted(p.name for p in (DOCS / "results").iterdir()))
def test_a_stored_report_reads_with_the_families_its_p_values_were_adjusted_over(report):
    """Each stored report.json records the families its p-values were adjusted over, or predates them (issue 67,
    point 4) and reads with them: Holm over each family's raw p-values, as many as its size, gives the adjusted p-values the report
    stored (a row's added seeds': those of one of its design's looks), all at the report's α."""
    from tinylm.analysis.grouping import Rules
    from tinylm.analysis.present.schema import FORMAT, from_json
    from tinylm.analysis.sequential_design import look_tests

    record = json.loads((DOCS / "results" / report / "report.json").read_text(encoding="utf-8"))
    rebuilt = from_json(record)
    # Format 7 on stores them; an older file reads with them derived.
    assert (
        record["format"] <= FORMAT and ("families" in record) == (record["format"] >= 7) and rebuilt.families
    )
    assert all(f.method == "holm" and f.alpha == rebuilt.alpha == 0.05 for f in rebuilt.families)
    families = {(f.tests, f.look): f.size for f in rebuilt.families}

    def differences(tests: list) -> list[float | None]:  # each row's loss test, then each row's failure test
        return [t.p_value for t in tests] + [t.failures and t.failures.p_value for t in tests]

    def held(key: tuple[str, int | None], raw: list[float | None], stored: list[float | None]) -> bool:
        return families[key] == sum(p is not None for p in raw) and same(holm_over(raw), stored)

    own = [s.comparison for s in rebuilt.family if s.comparison is not None]
    if not rebuilt.judged_apart:  # the sweep's own seeds judged: its tests of difference and of equivalence
        stored = [c.judgement.p_adjusted for c in own] + [c.judgement.p_failures_adjusted for c in own]
        assert held(("difference", None), differences([c.tests for c in own]), stored)
        equivalent = [c.tests.p_equivalence for c in own], [c.judgement.p_equivalence_adjusted for c in own]
        assert held(("equivalence", None), *equivalent)
    else:
        assert ("difference", None) not in families  # its seeds chose the rates and judged nothing
    if rebuilt.ladder is not None and rebuilt.ladder.ordered:
        trends = rebuilt.ladder.trends
        assert held(
            ("change across levels", None), [t.p_value for t in trends], [t.p_adjusted for t in trends]
        )
    rows = [s for s in rebuilt.family if s.added is not None]
    if not rows:
        assert not any(look for _, look in families)
        return
    columns = rebuilt.family_columns
    bases = {s.key(columns): rebuilt.baseline_of(s).key(columns) for s in rows}
    rules = Rules(rebuilt.confidence, rebuilt.alpha, rebuilt.min_effect, rebuilt.lr_varies)
    looks = look_tests(bases, rebuilt.settings, columns, rules, rebuilt.design)
    adjusted = {}  # each later look's adjusted p-values, by its number (the sweep's seeds are look 1)
    for number, tests in enumerate(looks, start=2):
        raw = differences(tests)
        assert families["difference", number] == sum(p is not None for p in raw)
        adjusted[number] = holm_over(raw)
    for i, s in enumerate(rows):
        stored = [s.added.judgement.p_adjusted, s.added.judgement.p_failures_adjusted]
        assert any(same([found[i], found[len(rows) + i]], stored) for found in adjusted.values()), s.choices
