"""Layer 5 of harness/: running the measures over a run — one model's checkpoints against a control on one
example set (run: settings, jobs, rows, summary), a run's whole audit plan sharded over processes (plan),
paper 004's loss audit over checkpoints (losses) and the Finding Memo audit of a translation model (nmt).
Imports core, text, model and measures; never report."""
