"""Records -> reports/report.md (Tables 2-5 beside the paper's, findings (a)-(e)) and Figure 2.

One module per role: `contrasts` (our cells, predictions, bootstrap contrasts), `tables`
(Tables 2-5), `figure2` (curves, bands, the figure, `dvc plots` rows), `prose` (what the curves
show), `findings` ((a)-(e)) and `document` (assembly and `write_outputs`, the stage's entry).
The records come from gpt1.records; the paper's numbers from params (`report`), never from
here. Values in the records are fractions; tables show them x 100 like the paper.
"""
