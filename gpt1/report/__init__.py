"""Records -> reports/report.md (Tables 2-5 beside the paper's, findings (a)-(e)) and Figure 2.

One module per role: `runs` (the runs the records hold, grouped by their fields), `contrasts`
(our cells, predictions, run-level bootstrap contrasts, degeneracy flags), `tables` (Tables
2-5), `figure2` (curves, bands, baselines, the figure, `dvc plots` rows), `prose` (what the
curves show, as far as the verdicts say), `estimates` (a finding's record and point
estimates), `findings` ((a), (b), (e) and the findings section), `curve_tests` ((c), (d)),
`pilots` (every arm's pilot table and the plan's gate), `plan` (the plan commit and the
deviations from it, from git), `headline` (the one DVC metrics file), `document` (assembly and
`write_outputs`, the stage's entry) and `verdicts` (`gpt1 verdicts`: claims x committed runs
-> reports/verdicts.md). The records are read by gpt1.records; the paper's numbers come from
params (`report`), never from here. Values in the records are fractions; tables show them x
100 like the paper.
"""
