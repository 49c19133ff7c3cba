"""The AUC-over-training figure tells every attack apart (#68: its 11 lines reused matplotlib's 10 colours, LOSS and
EZ-MIA the same blue): each registered attack has its own colour, marker and line style, the same in every figure."""

from __future__ import annotations

from matplotlib.colors import to_hex

from memlens.harness.measures.mia import ATTACKS
from memlens.harness.report import figures
from memlens.harness.report.figures import attack_style, mia_over_training_plot


def test_every_registered_attack_has_a_look_of_its_own():
    looks = [tuple(sorted(attack_style(name).items())) for name in ATTACKS.names()]
    assert len(looks) >= 11 and len(set(looks)) == len(looks)
    assert attack_style("loss") != attack_style("ez_mia")
    assert attack_style("not_registered_here") == attack_style("not_registered_here")     # stable for a stranger


def test_the_figure_draws_each_attack_in_its_look(tmp_path, monkeypatch):
    drawn = {}
    monkeypatch.setattr(figures, "save_figure", lambda fig, path: drawn.setdefault("fig", fig) and path)
    aucs = {name: [("checkpoint-10", 0.5 + i / 100, (0.4, 0.7)), ("final", 0.6, (0.5, 0.7))]
            for i, name in enumerate(ATTACKS.names())}
    mia_over_training_plot("FT.3", {"sd_base": (aucs, [])}, tmp_path / "f.png")
    handles, labels = drawn["fig"].axes[0].get_legend_handles_labels()
    assert len(labels) == len(ATTACKS.names())
    looks = set()
    for handle, name in zip(handles, ATTACKS.names()):
        line, style = handle.lines[0], attack_style(name)
        assert (to_hex(line.get_color()), line.get_marker()) == (to_hex(style["color"]), style["marker"]), name
        looks.add((to_hex(line.get_color()), line.get_marker(), line.get_linestyle()))
    assert len(looks) == len(ATTACKS.names())
