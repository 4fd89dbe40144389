"""Presenting the sweep report: report.md (render, render_sections, formats), its figures (plots), report.json
(schema) and the files written into a sweep directory (write_report). Each reads the value tinylm.analysis
computes and computes nothing of its own; tinylm.analysis never imports this package."""
