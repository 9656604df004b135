"""What the notebooks measure, judge and draw: the workbook's helpers, apart from the core.

One module per notebook, each with its measurements and, beside them, the verdicts of its claims:
`base_models` (00), `grpo` (01), `ratio_decay` (02), `dapo` (03), `gspo` (04), `gfpo` (05),
`dr_grpo` (06), `ppo_vapo` (07), `explorer` (90, the objectives explorer). Shared: `runs` (arms -> configs,
run folders, windows of steps, every run as one frame: `load_runs`),
`plots` (one look for every figure), `verdicts` and `stats` (the rules of evidence), `report`
(claims scoreboard; the claims' text is `claims.yaml`), `workbook` (papermill runner behind
`python -m gpolib reproduce`), `index` (reports/index.html) and `browser` (headless Chromium check).
"""
