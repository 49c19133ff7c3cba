"""memlens.recipes: training, in layers of its own (tests/unit/project/test_layers.py): sandbox/ (model-written code
contained) < stages/ (one module per stage recipe, their registry and contract) < formal/, nmt/ (each study's training
side) < orchestration/ (the plan, the pipeline, the preflight check, the job launcher). docs/architecture.md maps them."""
