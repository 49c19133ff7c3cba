"""Layer 4 of harness/: every metric, defined once — memorization (paper 003's counterfactual NED test,
PII regurgitation), losses (paper 004's recollection / counterfactual / contextual measures), exposure
(Carlini et al. 2019), utility (paper 003 Table 2 analogue), nmt (Finding Memo, paper 002), mia (membership
inference: LOSS, zlib, Min-K%, Min-K%++, control-calibrated loss). A measure sees
a model only through harness.model's scorer and cache. Imports core, text and model."""
