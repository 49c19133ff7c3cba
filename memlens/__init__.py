"""memlens: measure where training data gets memorized in an alignment pipeline for code completion.

One import package under a name nobody else uses on PyPI (DESIGN.md, "One package, one name"): the
repository's folders install as its subpackages (pyproject.toml's package-dir) --

    harness/         -> memlens.harness          everything that measures (the only place a metric lives)
    recipes/         -> memlens.recipes          one training stage per module
    synthetic_data/  -> memlens.synthetic_data   builders of every dataset
    conf/, assets/   -> memlens.conf, memlens.assets   shipped data (Hydra configs, the tiny base)

The command line is `memlens <command>` (or `python -m memlens`). Importing this package stays light: nothing
here imports torch.
"""

__version__ = "0.2.0"

__all__ = ["AuditCallback", "ModelSampler", "__version__", "inject", "preflight"]


def __getattr__(name: str):
    """`memlens.inject` (synthetic_data/inject.py), `memlens.AuditCallback` (harness/audit/callback.py),
    `memlens.preflight` (harness/audit/preflight.py) and `memlens.ModelSampler` (harness/model/canary_sampling.py, the
    `sampled` canary design's sampler), imported on first use: `import memlens` stays light."""
    if name == "inject":
        from memlens.synthetic_data.inject import inject

        return inject
    if name == "AuditCallback":
        from memlens.harness.audit.callback import AuditCallback

        return AuditCallback
    if name == "ModelSampler":
        from memlens.harness.model.canary_sampling import ModelSampler

        return ModelSampler
    if name == "preflight":
        from memlens.harness.audit.preflight import preflight

        return preflight
    raise AttributeError(f"module 'memlens' has no attribute {name!r}")
