"""Layer 3 of harness/: the only place a model is loaded or run (the only torch user of harness). A model is
seen through one interface, `scorer.CausalLMScorer` — greedy completions (`complete`), target log-probs
(`target_losses`) and a `fingerprint` — with one cache of what it computed (`cache`). Modules: load
(safetensors, LoRA merge, fingerprints, context length), encode (the one tokenisation rule), decode
(batched greedy decoding), draft (the target as a speculative draft), logprobs (teacher-forced losses),
scorer, cache. Imports only memlens.harness.core and memlens.harness.text; torch and transformers are imported inside
functions so that `memlens --help` and the layers above stay light."""
