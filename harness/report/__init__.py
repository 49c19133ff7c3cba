"""Layer 6 of harness/ (the top): figures and reports rendered from stored results only - nothing here
re-scores a model. analyses (paper 003 Sec. 5 tables), evidence (did a stage train), findings (the papers'
claims judged on a run: one module per paper), figures, loss_figures, nmt_report, blocks (the report's typed
blocks and its Markdown/HTML writers), sections (its evidence sections), render (`memlens report`). Imports every layer
below it; nothing imports it but the CLI."""
