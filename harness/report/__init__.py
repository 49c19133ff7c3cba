"""Figures and reports rendered from stored audit results only; nothing here re-scores a model."""


def main(cfg):
    """`memaudit report`: render <run_dir>/report/ from <run_dir>/audit/ (see harness.report.render)."""
    from harness.report.render import render_report

    return render_report(cfg)
