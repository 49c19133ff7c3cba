"""Layer 4 of harness/: every metric, defined once — memorization (paper 003's counterfactual NED test,
PII regurgitation), losses (paper 004's recollection / counterfactual / contextual measures), exposure
(Carlini et al. 2019), utility (paper 003 Table 2 analogue), nmt (Finding Memo, paper 002), mia (membership
inference: the ATTACKS registry). A causal-LM measure sees a model only through memlens.harness.model's scorer and
cache; the NMT measures, on a seq2seq model the scorer does not serve, through memlens.harness.model.decode's
greedy_translate and memlens.harness.model.load's fill-mask loader. Imports core, text and model."""
