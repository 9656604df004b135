"""The workbook's site: running the notebooks and publishing what they found, apart from the science (`gpolib.lab`).

`workbook` (papermill runner behind `python -m gpolib reproduce`), `execution` (one notebook in its own kernel,
then its HTML), `prefetch` (the notebooks' runs trained ahead of them in n one-thread processes), `progress`
(a running notebook's live progress line and the verdicts that changed), `notebooks` (committed notebooks carry
no results), `index` (reports/index.html), `browser` (headless Chromium check and screenshot of a page),
`screenshot` (README's screenshot of the page, marked with the scoreboard it shows) and `readme`
(the generated blocks of the README and docs/: the phenomena table, the scoreboard, the layout, the times).
"""
