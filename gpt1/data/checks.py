"""Data-quality gates built in code with great-expectations 1.x (the only importer of it).

`validate_frame(df, name, rules, docs_dir)` runs a list of rules (plain dicts, see RULE_KINDS)
as one expectation suite through a GX checkpoint whose action builds the Data Docs HTML site in
docs_dir (offline, written whole or not at all), and returns a JSON-ready report with the
offending row positions from GX's COMPLETE result format; `summarize(report)` is its one-line
verdict. `corpus_rules(cfg)` is the suite over the cleaned corpus: non-empty text, no NUL or
control characters, mojibake below a threshold, length bounds, unique ids. great_expectations
is imported lazily (it takes ~7 s).
"""

from __future__ import annotations

import ast
import html
import json
import logging
import os
import re
from pathlib import Path
from typing import Any

import pandas as pd

from gpt1 import atomic
from gpt1.config import ChecksCfg

log = logging.getLogger(__name__)

Rule = dict[str, Any]
"""{"kind": <RULE_KINDS key>, "column": ..., plus the kind's arguments; optional "mostly"
(fraction of rows that must pass) and "label" (name in the summary)}."""

CONTROL_CHARS = r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]"
"""C0 controls (NUL included) and DEL; tab and newlines are allowed."""
MOJIBAKE = r"(?:Ã[\x80-\xbf]|Â[\x80-\xbf]|â€|ï»¿|\ufffd)"
"""UTF-8 read as Latin-1/cp1252 (Ã©, Â«, â€™, a BOM as ï»¿) and the replacement character."""

# kind -> (expectation class name, {rule key: expectation argument})
RULE_KINDS: dict[str, tuple[str, dict[str, str]]] = {
    "not_null": ("ExpectColumnValuesToNotBeNull", {}),
    "unique": ("ExpectColumnValuesToBeUnique", {}),
    "in_set": ("ExpectColumnValuesToBeInSet", {"values": "value_set"}),
    "between": ("ExpectColumnValuesToBeBetween", {"min": "min_value", "max": "max_value"}),
    "length_between": ("ExpectColumnValueLengthsToBeBetween",
                       {"min": "min_value", "max": "max_value"}),
    "not_match_regex": ("ExpectColumnValuesToNotMatchRegex", {"regex": "regex"}),
    "match_regex": ("ExpectColumnValuesToMatchRegex", {"regex": "regex"}),
    "column_exists": ("ExpectColumnToExist", {}),
    "row_count_between": ("ExpectTableRowCountToBeBetween",
                          {"min": "min_value", "max": "max_value"}),
}
_EXAMPLE_CHARS = 60
_ROWS_KEPT = 20
"""Offending row positions kept per rule in the report (GX counts them all)."""
DOCS_INDEX = "index.html"


def corpus_rules(cfg: ChecksCfg) -> list[Rule]:
    """The cleaned-corpus suite (columns doc_id, text)."""
    return [
        {"kind": "row_count_between", "min": 1, "max": None, "label": "non-empty corpus"},
        {"kind": "unique", "column": "doc_id", "label": "unique ids"},
        {"kind": "not_null", "column": "text", "label": "text present"},
        {"kind": "length_between", "column": "text", "min": cfg.min_document_chars,
         "max": cfg.max_document_chars, "label": "length bounds"},
        {"kind": "not_match_regex", "column": "text", "regex": CONTROL_CHARS,
         "label": "no NUL/control characters"},
        {"kind": "not_match_regex", "column": "text", "regex": MOJIBAKE,
         "mostly": 1.0 - cfg.max_mojibake_frac, "label": "mojibake below threshold"},
    ]


def _expectation(gx: Any, rule: Rule) -> Any:
    if rule.get("kind") not in RULE_KINDS:
        raise ValueError(f"unknown rule kind {rule.get('kind')!r}; known: {sorted(RULE_KINDS)}")
    cls_name, args = RULE_KINDS[rule["kind"]]
    kwargs = {dst: rule[src] for src, dst in args.items()}
    if "column" in rule:
        kwargs["column"] = rule["column"]
    if "mostly" in rule:
        kwargs["mostly"] = rule["mostly"]
    return getattr(gx.expectations, cls_name)(**kwargs)


def _short(value: Any) -> Any:
    if isinstance(value, str) and len(value) > _EXAMPLE_CHARS:
        return value[:_EXAMPLE_CHARS] + "..."
    return value


def _run_checkpoints(gx: Any, name: str, frames: dict[str, pd.DataFrame],
                     expectations: list[Any], docs_dir: Path | None, run_name: str
                     ) -> dict[str, Any]:
    """Validate each frame (data asset = its key) against the expectations, one suite, each
    through a GX checkpoint run named `run_name` (the stage); with docs_dir, build ONE local
    Data Docs site there over all of them, whose pages name the asset and whose index lists the
    validations offline. Returns asset -> validation result."""
    from great_expectations.core.run_identifier import RunIdentifier
    from great_expectations.data_context.types.base import ProgressBarsConfig

    ctx = gx.get_context(mode="ephemeral")
    ctx.variables.progress_bars = ProgressBarsConfig(globally=False)
    if docs_dir is not None:
        ctx.add_data_docs_site(site_name="gpt1", site_config={
            "class_name": "SiteBuilder",
            "store_backend": {"class_name": "TupleFilesystemStoreBackend",
                              "base_directory": str(docs_dir.resolve())},
            "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"}})
    source = ctx.data_sources.add_pandas(f"{name}_source")
    suite = ctx.suites.add(gx.ExpectationSuite(name=f"{name}_suite"))
    for exp in expectations:
        suite.add_expectation(exp)
    results = {}
    for asset, df in frames.items():
        batch_def = source.add_dataframe_asset(asset).add_batch_definition_whole_dataframe(
            "whole")
        definition = ctx.validation_definitions.add(
            gx.ValidationDefinition(data=batch_def, suite=suite, name=f"{name}_{asset}"))
        checkpoint = ctx.checkpoints.add(gx.Checkpoint(
            name=f"{name}_{asset}_gate", validation_definitions=[definition], actions=[],
            result_format={"result_format": "COMPLETE"}))  # every offending row's index
        run = checkpoint.run(batch_parameters={"dataframe": df},
                             run_id=RunIdentifier(run_name=run_name))
        ((key, result),) = run.run_results.items()
        if docs_dir is not None:
            # A dataframe's batch spec names no asset (the pages would say "Data asset:
            # None"): record it on the stored result; the site is built from the store.
            result.meta["batch_spec"]["data_asset_name"] = asset
            ctx.validation_results_store.set(key, result)
        results[asset] = result
    if docs_dir is not None:
        ctx.build_data_docs(site_names=["gpt1"])
        static_index(docs_dir / DOCS_INDEX)
        offline_site(docs_dir)
    return results


ICONS = {"check-circle": ("\u2714", "#28a745", "passed"), "times": ("\u2718", "#dc3545", "failed"),
         "exclamation-triangle": ("\u26a0", "#d39e00", "warning"),
         "question-circle": ("?", "#6c757d", "")}
"""GX's Font Awesome status icons (CSS from a CDN: blank offline) -> a coloured character."""
_ICON = re.compile(r'<i\s+class="(?P<cls>[^"]*\bfa-(?P<name>' + "|".join(ICONS)
                   + r')\b[^"]*)"[^>]*>\s*</i>')
KEPT_IMAGES = {"favicon.ico"}
"""The only one of GX's static images a page links (the rest, logos, are 3.4 MB per site)."""


def offline_icons(page: str) -> str:
    """`page` with each status icon drawn as a coloured character, which needs no network."""

    def icon(match: re.Match[str]) -> str:
        glyph, colour, title = ICONS[match["name"]]
        return (f'<span class="gpt1-icon" title="{title}" style="color:{colour};'
                f'font-weight:bold">{glyph}</span>')

    return _ICON.sub(icon, page)


def offline_site(site: Path) -> None:
    """Make a built site readable offline and small: status icons as characters in every
    page, and GX's unused static images removed."""
    for page in site.rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        page.write_text(offline_icons(text), encoding="utf-8")
    for image in (site / "static" / "images").glob("*"):
        if image.name not in KEPT_IMAGES and image.is_file():
            image.unlink()


_TABLE_DATA = re.compile(r"\$\('#(?P<id>[\w-]+)'\)\.bootstrapTable\(.*?columns: (?P<columns>\[.*?\]),"
                         r"\s*data: (?P<data>\[.*?\]),?\n", re.S)


def static_index(index: Path) -> None:
    """Write GX's index tables into the HTML itself. GX fills them from scripts loaded from
    CDNs (jQuery, bootstrap-table), so offline its index shows no validation at all; each
    table now holds its rows as plain HTML (status, run time, run name, asset, batch, suite,
    linked to their pages), which the scripts replace when they do load."""
    page = index.read_text(encoding="utf-8")
    for match in _TABLE_DATA.finditer(page):
        columns = ast.literal_eval(match["columns"])  # Python literals GX wrote; never eval'd
        rows = ast.literal_eval(match["data"])
        head = "".join(f"<th>{html.escape(str(c['title']))}</th>" for c in columns)
        body = "".join("<tr>" + "".join(_cell(row, c["field"]) for c in columns) + "</tr>"
                       for row in rows)
        filled = f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
        table = re.compile(rf'(<table\s+id="{re.escape(match["id"])}"[^>]*>)\s*</table>')
        page = table.sub(lambda m, rows=filled: m[1] + rows, page, count=1)  # type: ignore[misc]
    index.write_text(page, encoding="utf-8")


def _cell(row: dict[str, Any], field: str) -> str:
    """One cell of a static index row: the value as text (for a value that is markup styled by
    the CDN's CSS, the sort value GX keeps beside it), linked to the row's page."""
    if field == "validation_success":
        text = row.get("_validation_success_text", "")
        icon = offline_icons(str(row.get(field, "")))
        glyph = re.search(r'<span class="gpt1-icon".*?</span>', icon)
        if glyph:  # the status as an icon that needs no network, then its word
            return f"<td>{glyph[0]} {html.escape(' '.join(str(text).split()))}</td>"
    else:
        text = str(row.get(field, ""))
        if "<" in text:  # markup: its sort value is the plain text
            text = str(row.get(f"_{field}_sort", re.sub(r"<[^>]+>", " ", text)))
    text = html.escape(" ".join(str(text).split()))
    link = row.get("_table_row_link_path")
    if link and field in ("run_time", "expectation_suite_name"):
        text = f'<a href="{html.escape(str(link))}">{text}</a>'
    return f"<td>{text}</td>"


HOME_STYLE = ("body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
              "td,th{border:1px solid #ccc;padding:.3em .8em;text-align:left}")


def write_home(site_root: str | Path, gates: dict[str, str | Path]) -> Path:
    """The Data Docs home, <site_root>/index.html: one page over every gate's site (the
    corpus, each task's splits), each row its status icon, rows checked, failed checks and a
    link to its validation site; plain HTML that needs no network. `gates` maps a gate's name
    to its report JSON (checks.json of a task: one report per split). A gate whose report is
    missing (its stage has not run) is listed as not run."""
    root = Path(site_root)
    rows = []
    for gate, path in gates.items():
        file = Path(path)
        reports = json.loads(file.read_text(encoding="utf-8")) if file.is_file() else None
        if reports is not None and "checks" not in reports:  # a task: {split: report}
            named = {f"{gate} / {split}": r for split, r in reports.items()}
        else:
            named = {gate: reports}
        for name, rep in named.items():
            if rep is None:
                rows.append(f"<tr><td>{html.escape(name)}</td><td>not run</td><td></td><td></td>"
                            "<td></td></tr>")
                continue
            icon = offline_icons(f'<i class="fas fa-{"check-circle" if rep["success"] else "times"}"></i>')
            link = os.path.relpath(rep["data_docs"], root) if rep.get("data_docs") else ""
            rows.append(f"<tr><td>{html.escape(name)}</td><td>{icon} "
                        f"{'passed' if rep['success'] else 'failed'}</td><td>{rep['n_rows']}</td>"
                        f"<td>{rep['failed']} of {rep['evaluated']}</td><td>"
                        + (f'<a href="{html.escape(link)}">{html.escape(link)}</a>' if link else "")
                        + "</td></tr>")
    page = ("<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>gpt1 Data Docs</title>"
            f"<style>{HOME_STYLE}</style></head><body><h1>gpt1 data gates</h1>"
            "<p>Every great-expectations gate of the pipeline; each links its own Data Docs "
            "site (the suite, the validation and the offending rows).</p><table><thead><tr>"
            "<th>gate</th><th>status</th><th>rows</th><th>failed checks</th><th>Data Docs</th>"
            "</tr></thead><tbody>" + "".join(rows) + "</tbody></table></body></html>\n")
    root.mkdir(parents=True, exist_ok=True)
    atomic.write_text(root / DOCS_INDEX, page)
    return root / DOCS_INDEX


def validate_frame(df: pd.DataFrame, name: str, rules: list[Rule],
                   docs_dir: str | Path | None = None, asset: str | None = None,
                   run_name: str | None = None) -> dict[str, Any]:
    """Run `rules` over df as one great-expectations suite; return a JSON-ready report.

    Report: name, success, n_rows, evaluated/failed counts, and per rule its label, kind,
    column, success, unexpected count/percent, a few (truncated) offending values and the
    positions of the first offending rows (`rows`, from GX's unexpected_index_list). With
    docs_dir, the Data Docs site (index.html naming the `<name>_suite`, listing the validation
    without network) is built there and the report's `data_docs` is its index. `asset` (default
    `name`) is the data asset the pages name, `run_name` (default `name`) the validation run's
    name: the stage that ran it.
    """
    asset = asset or name
    return validate_frames({asset: df}, name, rules, docs_dir, run_name)[asset]


def validate_frames(frames: dict[str, pd.DataFrame], name: str, rules: list[Rule],
                    docs_dir: str | Path | None = None, run_name: str | None = None
                    ) -> dict[str, dict[str, Any]]:
    """`validate_frame` of several tables (asset name -> frame, e.g. a task's splits) against
    one suite, with ONE Data Docs site over all of them; asset -> report."""
    logging.getLogger("great_expectations").setLevel(logging.WARNING)  # INFO floods the log
    import great_expectations as gx

    expectations = [_expectation(gx, r) for r in rules]
    tables = {a: df.reset_index(drop=True) for a, df in frames.items()}  # labels = positions
    run_name = run_name or name
    if docs_dir is None:
        results = _run_checkpoints(gx, name, tables, expectations, None, run_name)
    else:
        with atomic.atomic_path(docs_dir) as tmp:
            results = _run_checkpoints(gx, name, tables, expectations, tmp, run_name)
    return {asset: _report(name, frames[asset], rules, expectations, result, docs_dir)
            for asset, result in results.items()}


def _report(name: str, df: pd.DataFrame, rules: list[Rule], expectations: list[Any],
            result: Any, docs_dir: str | Path | None) -> dict[str, Any]:
    """The JSON-ready report of one validation result (see `validate_frame`)."""
    by_id = {getattr(r.expectation_config, "id", None): r for r in result.results}
    checks = []
    for rule, exp in zip(rules, expectations, strict=True):
        res = by_id[exp.id]
        detail = res.result or {}
        checks.append({
            "label": rule.get("label", rule["kind"]),
            "kind": rule["kind"],
            "column": rule.get("column"),
            "success": bool(res.success),
            "unexpected_count": detail.get("unexpected_count"),
            "unexpected_percent": detail.get("unexpected_percent"),
            "observed_value": _short(detail.get("observed_value")),
            "examples": [_short(v) for v in (detail.get("partial_unexpected_list") or [])[:3]],
            "rows": [int(i) for i in (detail.get("unexpected_index_list") or [])[:_ROWS_KEPT]],
            "error": (res.exception_info or {}).get("exception_message")
            if not res.success else None,
        })
    failed = sum(not c["success"] for c in checks)
    report = {"name": name, "success": failed == 0, "n_rows": len(df),
              "evaluated": len(checks), "failed": failed, "checks": checks}
    if docs_dir is not None:
        report["data_docs"] = str(Path(docs_dir) / DOCS_INDEX)
        log.info("%s: Data Docs %s", name, report["data_docs"])
    return report


def summarize(report: dict[str, Any]) -> str:
    """One line: 'name: k/n checks failed: label (m rows, e.g. ...); ...' or 'name: ok'."""
    if report["success"]:
        return f"{report['name']}: all {report['evaluated']} checks passed"
    parts = []
    for c in report["checks"]:
        if c["success"]:
            continue
        what = c["label"] + (f" [{c['column']}]" if c["column"] else "")
        if c["unexpected_count"] is not None:
            what += f" ({c['unexpected_count']} rows"
            what += f", e.g. {c['examples'][0]!r})" if c["examples"] else ")"
        elif c["observed_value"] is not None:
            what += f" (observed {c['observed_value']!r})"
        parts.append(what.replace("\n", " "))
    return f"{report['name']}: {report['failed']}/{report['evaluated']} checks failed: " + (
        "; ".join(parts))


def check_corpus(df: pd.DataFrame, cfg: ChecksCfg,
                 docs_dir: str | Path | None = None) -> dict[str, Any]:
    """Validate the cleaned corpus (doc_id, text, ...) against `corpus_rules(cfg)`; Data Docs
    in docs_dir when given."""
    report = validate_frame(df[["doc_id", "text"]], "corpus", corpus_rules(cfg), docs_dir,
                            asset="clean_corpus", run_name="check_corpus")
    log.info("%s", summarize(report))
    return report
