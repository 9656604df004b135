"""What the notebooks measure, judge and draw: the workbook's science, apart from the core.

One module per notebook, each with its measurements and, beside them, the verdicts of its claims:
`base_models` (00), `grpo` (01), `ratio_decay` (02), `dapo` (03), `gspo` (04), `gfpo` (05),
`dr_grpo` (06), `ppo_vapo` (07), `gspo_moe` (08), `explorer` (90, the objectives explorer). Shared analysis:
`runs` (arms -> configs, run folders, windows of steps, every run as one frame: `load_runs`),
`plots` (one look for every figure), `verdicts` and `stats` (the rules of evidence), `regime` (the task regime's
measurements), `intervals`, and `report` (claims scoreboard; the claims' text is `claims.yaml`). The runner that
executes the notebooks and builds the report page is `gpolib.workbook`.
"""
