"""Every figure renders from the paper's tables and from fixture runs with the expected
series and points (the matplotlib objects, not only the files)."""

from __future__ import annotations

import colorsys
import string

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
from matplotlib.colors import to_hex, to_rgb
from matplotlib.container import ErrorbarContainer
from matplotlib.markers import MarkerStyle

from analysis import paper
from analysis.figures import fig3, fig4, fig5, scaling_curves, training_curves
from analysis.reference import jft
from vitscale import record as rf
from vitscale.catalog import model_columns
from vitscale.record.cells import load_history, load_runs

from ..helpers import run_folders as fixtures

IMAGENET = rf.finetune_key("imagenet")
SHAPES5 = rf.fewshot_key("synthetic-shapes", 5)
MODELS = ("ViT-Pico/8", "ViT-Pico/4", "BiT-R11x0.5", "R50x1+ViT-Pico/16")
SUBSETS = (1000, 10_000, 100_000)


@pytest.fixture(scope="module")
def cells(tmp_path_factory):
    """Two seeds of every (steps, subset, model), plus a failed cell the figures skip."""
    root = tmp_path_factory.mktemp("runs")
    n = 2 * 2 * len(SUBSETS) * len(MODELS)
    fixtures.write_runs(root, cells=n, models=MODELS, subsets=SUBSETS, steps=(40, 80))
    config, rows, result = fixtures.cell(model="ViT-Nano/4", subset=1000, steps=40)
    failed = result | {"status": rf.STATUS_FAILED, "error": "boom", "failed_step": 20}
    fixtures.write_cell(root / "fixture" / "failed", config=config, metrics=rows, result=failed)
    frame, problems = load_runs(root)
    assert not problems and len(frame) == n + 1
    return frame


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _points(ax, gid):
    return [c for c in ax.collections if c.get_gid() == gid]


def _lines(ax, gid=None):
    return [ln for ln in ax.lines if ln.get_gid() == gid]


def _frontier_brute_force(x, y):
    """Non-dominated points by the definition, O(n^2): independent of analysis.frontier."""
    keep = []
    for i in range(len(x)):
        dominated = any(
            x[j] <= x[i] and y[j] >= y[i] and (x[j] < x[i] or y[j] > y[i]) for j in range(len(x))
        )
        if not dominated:
            keep.append((x[i], y[i]))
    return sorted(keep)


# --------------------------------------------------------------------------- Fig. 3


def test_fig3_from_the_paper():
    fig, ax = plt.subplots()
    fig3.plot(ax, fig3.paper_frame())
    t5 = paper.table5_frame()
    lines = {ln.get_label(): ln for ln in _lines(ax)}
    assert set(lines) == {"ViT-B/32", "ViT-B/16", "ViT-L/32", "ViT-L/16", "ViT-H/14"}
    ticks = [t.get_text() for t in ax.get_xticklabels()]
    assert ticks == ["ImageNet", "ImageNet-21k", "JFT-300M"]  # by pre-training size
    for model, line in lines.items():
        rows = t5[(t5["model"] == model) & t5[IMAGENET].notna()]
        expected = {
            ticks.index(d): v for d, v in zip(rows["pretrain_dataset"], rows[IMAGENET], strict=True)
        }
        got = dict(zip(line.get_xdata(), line.get_ydata(), strict=True))
        assert got == pytest.approx(expected)
    assert len(lines["ViT-H/14"].get_xdata()) == 2  # Table 5 has no ImageNet-only H/14
    (band,) = _points(ax, "band")
    resnets = paper.table6_frame().query("family == 'ResNet'")[IMAGENET]
    ys = band.get_paths()[0].vertices[:, 1]
    assert (ys.min(), ys.max()) == pytest.approx((resnets.min(), resnets.max()))
    xs = band.get_paths()[0].vertices[:, 0]
    assert xs.min() > 1.5 and xs.max() < 2.5  # only around JFT-300M: the only ResNet data
    assert ax.get_ylabel() == "ImageNet accuracy, fine-tuned (%)"


def test_fig3_band_spans_datasets_in_our_runs(cells):
    two = pd.concat(
        [cells, cells.assign(pretrain_dataset="other", num_examples=cells["num_examples"] * 10)]
    )
    fig, ax = plt.subplots()
    fig3.plot(ax, two, metric=SHAPES5)
    assert [t.get_text() for t in ax.get_xticklabels()] == ["synthetic", "other"]
    assert len(_lines(ax)) == 3  # the two ViTs and the hybrid; ResNets form the band
    (band,) = _points(ax, "band")
    xs = band.get_paths()[0].vertices[:, 0]
    assert xs.min() == 0 and xs.max() == 1


# --------------------------------------------------------------------------- Fig. 4


def test_fig4_lines_per_model(cells):
    fig, ax = plt.subplots()
    fig4.plot(ax, cells, metric=SHAPES5)
    lines = {ln.get_label(): ln for ln in _lines(ax)}
    assert list(lines) == list(MODELS)  # paper order: ViTs, ResNets, hybrids
    done = cells[cells["status"] == "done"]
    # Both durations span every subset: Fig. 4 draws the longest (the paper's one duration
    # per figure), the mean over its seeds, and their range as an error bar.
    done = done[done["steps"] == done["steps"].max()]
    bars = [c for c in ax.containers if isinstance(c, ErrorbarContainer)]
    assert len(bars) == len(MODELS)
    for (model, line), bar in zip(lines.items(), bars, strict=True):
        assert list(line.get_xdata()) == list(SUBSETS)
        (segments,) = bar.lines[2]
        for (x, y), seg in zip(line.get_xydata(), segments.get_segments(), strict=True):
            values = done.loc[(done["model"] == model) & (done["num_examples"] == x), SHAPES5]
            assert len(values) == 2 and y == pytest.approx(values.mean())
            assert [v for _, v in seg] == pytest.approx([values.min(), values.max()])
    styles = {m: ln.get_linestyle() for m, ln in lines.items()}
    assert styles["ViT-Pico/4"] == "-" and styles["BiT-R11x0.5"] == "--"
    assert styles["R50x1+ViT-Pico/16"] == "-."
    markers = {m: ln.get_marker() for m, ln in lines.items()}
    assert markers["ViT-Pico/4"] == markers["ViT-Pico/8"] != markers["BiT-R11x0.5"]
    assert ax.get_xscale() == "log"
    assert ax.get_xlabel() == "Pre-training dataset size (images)"


def test_fig4_generic_grouping_and_aggregate(cells):
    fig, ax = plt.subplots()
    fig4.plot(ax, cells, metric=SHAPES5, x="examples_seen", hue="config.train.steps", agg="max")
    lines = {ln.get_label(): ln for ln in _lines(ax)}
    # one line per model and value, in the model's look: never an average over families
    assert list(lines) == [f"{m} steps={s}" for m in MODELS for s in (40, 80)]
    done = cells[cells["status"] == "done"]
    for label, line in lines.items():
        model, steps = label.split(" steps=")
        rows = done[(done["config.train.steps"] == int(steps)) & (done["model"] == model)]
        assert len(line.get_xdata()) == rows["examples_seen"].nunique() == 1
        assert line.get_ydata()[0] == pytest.approx(rows[SHAPES5].max())
    first, second = lines["ViT-Pico/4 steps=40"], lines["ViT-Pico/4 steps=80"]
    assert first.get_color() == second.get_color() != lines["BiT-R11x0.5 steps=40"].get_color()
    assert second.get_markerfacecolor() == "white" != first.get_markerfacecolor()
    with pytest.raises(ValueError, match="valid: mean, median, max, min"):
        fig4.plot(ax, cells, metric=SHAPES5, agg="best")
    with pytest.raises(ValueError, match="no column"):
        fig4.plot(ax, cells, metric="fewshot/nope/5shot")


# --------------------------------------------------------------------------- Fig. 5


def test_fig5_from_the_paper():
    fig = fig5.figure(fig5.paper_panels())
    axes = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title() for ax in axes] == ["Average-5", "ImageNet"]
    t6 = paper.table6_frame()
    for ax, metric in zip(axes, (paper.AVERAGE_5, IMAGENET), strict=True):
        pts = _points(ax, "points")
        assert len(pts) == t6["model"].nunique() == 15  # a model is one series
        assert sum(len(c.get_offsets()) for c in pts) == len(t6) == 18
        frontiers = _lines(ax, "frontier")
        assert len(frontiers) == 3
        for line in frontiers:
            family = line.get_label().removesuffix(" frontier")
            rows = t6[t6["family"] == family]
            expected = _frontier_brute_force(list(rows["exaflops"]), list(rows[metric]))
            got = sorted(zip(line.get_xdata(), line.get_ydata(), strict=True))
            np.testing.assert_allclose(got, expected)
        assert ax.get_xscale() == "log"
        assert ax.get_xlabel() == "Pre-training compute (exaFLOPs)"
    vit_front = next(ln for ln in _lines(axes[1], "frontier") if ln.get_label().startswith("ViT"))
    assert list(vit_front.get_xdata()) == [55, 196, 783, 1567, 4262]  # B/16 is dominated


def test_fig5_says_which_fit_it_could_not_draw(cells, capsys):
    few = cells[cells["status"] == "done"].groupby("family").head(2)  # 2 points a family
    fig = fig5.figure([fig5.Panel(few, SHAPES5, "shapes")], fit=True, bootstrap=5)
    assert not [ln for ln in fig.axes[0].lines if ln.get_gid() == "fit"]
    notes = capsys.readouterr().err.splitlines()
    assert len(notes) == few["family"].nunique()
    assert all(n.startswith(f"note: no {fig5.FIT_LABEL} drawn for ") for n in notes)


def test_fig5_from_runs_with_overlay_and_fit(cells):
    done = cells[cells["status"] == "done"]
    panels = [fig5.Panel(cells, SHAPES5, "shapes")]
    fig = fig5.figure(panels, fit=True, bootstrap=20)
    ax = fig.axes[0]
    pts = {c.get_label(): c for c in _points(ax, "points")}
    assert list(pts) == list(MODELS)  # full names, paper order; the failed cell is skipped
    # A point per model and compute: the mean over its seeds, their range as a bar (as Fig. 4).
    for model, points in pts.items():
        rows = done[done["model"] == model]
        means = rows.groupby("exaflops")[SHAPES5].agg(["mean", "min", "max"])
        got = sorted(map(tuple, points.get_offsets()))
        np.testing.assert_allclose(got, list(zip(means.index, means["mean"], strict=True)))
    bars = [c for c in ax.collections if c.get_gid() == fig5.SEED_RANGE]
    spans = sorted(tuple(np.round(seg[:, 1], 9)) for b in bars for seg in b.get_segments())
    every = done.groupby(["model", "exaflops"])[SHAPES5].agg(["min", "max"])
    assert spans == sorted(tuple(np.round(r, 9)) for r in every.to_numpy())
    # The frontier: a line through the non-dominated means of each family.
    frontiers = {ln.get_label(): ln for ln in _lines(ax, "frontier")}
    assert len(frontiers) == 3
    vit = done[done["family"] == "ViT"].groupby(["model", "exaflops"])[SHAPES5].mean()
    expected = _frontier_brute_force(list(vit.index.get_level_values(1)), list(vit))
    line = frontiers["ViT frontier"]
    assert len(expected) >= 2
    np.testing.assert_allclose(
        sorted(zip(line.get_xdata(), line.get_ydata(), strict=True)), expected
    )
    assert _lines(ax, "fit")  # families whose frontier has >= 4 points get a law
    # Overlay: a run set that measured ImageNet fine-tuning accuracy gets Table 6 beside it.
    ours = done.assign(**{IMAGENET: done[SHAPES5]})
    fig = fig5.figure([fig5.Panel(ours, IMAGENET, "ImageNet", paper.table6_frame())])
    ref = _points(fig.axes[0], "reference")
    assert sum(len(c.get_offsets()) for c in ref) == 18
    assert all(len(c.get_facecolor()) == 0 or c.get_facecolor()[0][3] == 0 for c in ref)
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "paper (Table 6)" in labels


def test_fig5_names_a_frontier_only_where_it_draws_one(cells):
    """One cell per family (the demo's Fig. 5): points, no frontier lines, so the legend
    names the models and no frontier."""
    one = cells[(cells["status"] == "done") & (cells["seed"] == 0)]
    one = one[one["exaflops"] == one.groupby("model")["exaflops"].transform("max")]
    one = one[one["model"].isin(["ViT-Pico/4", "BiT-R11x0.5"])]
    fig = fig5.figure([fig5.Panel(one, SHAPES5, "shapes")])
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert labels == ["ViT-Pico/4", "BiT-R11x0.5"]


def test_legend_does_not_cover_data(cells):
    for fig in (
        fig5.figure(fig5.paper_panels()),
        fig3.figure(fig3.paper_frame()),
        fig4.figure(cells, metric=SHAPES5),
    ):
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        (legend,) = fig.legends
        box = legend.get_window_extent(renderer)
        for ax in fig.axes:
            if ax.get_visible():
                assert not box.overlaps(ax.get_window_extent(renderer))
        assert fig.get_figwidth() <= 7.0 + 1e-9  # a column or the page width


# --------------------------------------------------------------------------- curves


def test_curves_from_history(cells):
    history, problems = load_history(cells)
    assert not problems
    fig, ax = plt.subplots()
    training_curves.plot(ax, history, metric=SHAPES5)
    lines = {ln.get_label(): ln for ln in _lines(ax)}
    assert set(lines) == set(MODELS) | {"ViT-Nano/4"}  # history includes the failed cell
    pico = history[history["model"] == "ViT-Pico/4"]
    assert list(lines["ViT-Pico/4"].get_xdata()) == sorted(pico["examples_seen"].unique())


def test_curves_one_panel_per_subset(cells):
    """A Fig. 4 grid's subsets learn differently: each gets its panel, its own means."""
    history, _ = load_history(cells)
    fig = training_curves.figure(history, metric=SHAPES5)
    axes = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title() for ax in axes] == [f"{n:,} images" for n in SUBSETS]
    for ax, n in zip(axes, SUBSETS, strict=True):
        pico = history[(history["model"] == "ViT-Pico/4") & (history["num_examples"] == n)]
        (line,) = [ln for ln in _lines(ax) if ln.get_label() == "ViT-Pico/4"]
        means = pico.groupby("examples_seen")[SHAPES5].mean()
        assert list(line.get_xdata()) == list(means.index)
        assert list(line.get_ydata()) == pytest.approx(list(means))
    assert len({ax.get_ylim() for ax in axes}) == 1  # one y-axis across the panels
    one = training_curves.figure(history[history["num_examples"] == SUBSETS[0]], metric=SHAPES5)
    assert [ax.get_title() for ax in one.axes if ax.get_visible()] == [""]


# --------------------------------------------------------------------------- files


def test_write_png_and_pdf(tmp_path, cells):
    written = fig3.write_paper(tmp_path) + fig5.write_paper(tmp_path)
    written += fig4.write(cells, tmp_path, metric=SHAPES5, formats=("png",))
    names = sorted(p.name for p in written)
    assert names == [
        "fig4_fewshot_synthetic-shapes_5shot.png",
        "paper_fig3_transfer_imagenet.pdf",
        "paper_fig3_transfer_imagenet.png",
        "paper_fig5_compute.pdf",
        "paper_fig5_compute.png",
    ]
    for p in written:
        head = p.read_bytes()[:24]
        assert head.startswith(b"%PDF" if p.suffix == ".pdf" else b"\x89PNG")
        if p.suffix == ".png":  # width at 300 dpi: within a column or the page, legend included
            width = int.from_bytes(head[16:20], "big") / 300
            limit = 3.4 if p.name.startswith(("fig4", "paper_fig3")) else 7.0
            assert width <= limit + 0.2, (p.name, width)  # + savefig's 0.1 in padding a side
    with pytest.raises(ValueError, match="valid: png, pdf, svg"):
        fig5.write_paper(tmp_path, formats=("jpg",))


# --------------------------------------------------------------------------- axes and looks

SPANS = (2, 5, 30, 50, 1_000, 10_000)


def _spanning(span: float) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Finished cells (two seeds, four sizes from 1,536 images to 1,536 x ``span``, compute
    from 3e-7 exaFLOPs over the same span) and their history (examples seen over it too)."""
    xs = np.geomspace(1.0, span, 4)
    rows, steps = [], []
    for i, model in enumerate(MODELS):
        family, size, _ = model_columns(model)
        for seed, x in ((s, x) for s in (0, 1) for x in xs):
            acc = 0.2 + 0.1 * i + 0.1 * np.log10(x) / np.log10(span) + 0.01 * seed
            rows.append(
                {
                    "status": "done",
                    "model": model,
                    "family": family,
                    "size": size,
                    "num_examples": 1536 * x,
                    "exaflops": 3e-7 * x,
                    "steps": 100,
                    SHAPES5: acc,
                }
            )
        for x in xs:
            steps.append(
                {
                    "model": model,
                    "family": family,
                    "size": size,
                    "num_examples": 1536.0,
                    "examples_seen": 1536 * x,
                    "compute/exaflops": 3e-7 * x,
                    SHAPES5: 100 * (0.2 + 0.1 * i + 0.3 * np.log10(x) / np.log10(span)),
                }
            )
    return pd.DataFrame(rows), pd.DataFrame(steps)


def _figures(span: float):
    cells, history = _spanning(span)
    yield "fig4", fig4.figure(cells, metric=SHAPES5)
    panels = [fig5.Panel(cells, SHAPES5, "shapes")] * 3  # a third of the page each
    yield "fig5", fig5.figure(panels)
    yield "curves", training_curves.figure(history, metric=SHAPES5)
    yield "learning", scaling_curves.figure(history, metrics=[SHAPES5] * 4)[0]  # a quarter each


def _shown(axis) -> list:
    lo, hi = sorted(axis.get_view_interval())
    return [
        t
        for t, x in zip(axis.get_ticklabels(), axis.get_ticklocs(), strict=False)
        if t.get_visible() and t.get_text() and lo <= x <= hi
    ]


@pytest.mark.parametrize("span", SPANS)
def test_tick_labels_never_overlap_at_any_span(span):
    """Every figure kind, on a one-column or a narrow panel, whether its x axis spans twice
    or 10^4 times its smallest value: at least two x labels, no two tick labels touching
    (matplotlib's own locator labels minor ticks on 1-2 decades: "2x10^3 3x10^3 ..." ran
    together in Fig. 4)."""
    for kind, fig in _figures(span):
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        for ax in (a for a in fig.axes if a.get_visible()):
            assert len(_shown(ax.xaxis)) >= 2, (kind, span)
            for axis in (ax.xaxis, ax.yaxis):
                boxes = [t.get_window_extent(renderer) for t in _shown(axis)]
                for i, a in enumerate(boxes):
                    for b in boxes[i + 1 :]:
                        assert not a.overlaps(b), (kind, span, axis.axis_name, a, b)
        plt.close(fig)


def _hue(color) -> float:
    return colorsys.rgb_to_hls(*to_rgb(color))[0]


def _marker(marker) -> bytes:
    style = MarkerStyle(marker)
    return np.round(style.get_path().transformed(style.get_transform()).vertices, 6).tobytes()


def test_one_colour_per_family_one_marker_per_size_in_every_figure(cells):
    """A model looks the same in every figure whichever others are drawn beside it (paper
    Figs. 3-5): its family's colour (a shade per patch, one hue per family), its size's
    marker (sizes of a family apart; colour tells families apart), its full name."""
    history, _ = load_history(cells)
    jft_history = jft.history()
    some = cells[cells["model"].isin(MODELS[1:])]  # fewer models: colours may not move
    seen: dict[str, set] = {}
    drawn = []
    for fig in (
        fig4.figure(cells, metric=SHAPES5),
        fig4.figure(some, metric=SHAPES5),
        training_curves.figure(history, metric=SHAPES5),
        fig3.figure(cells.assign(pretrain_dataset="synthetic"), metric=SHAPES5),
        fig5.figure([fig5.Panel(cells, SHAPES5, "shapes")]),
        fig5.figure(fig5.paper_panels()),
        scaling_curves.figure(jft_history, metrics=[rf.fewshot_key("imagenet", 5)])[0],
    ):
        for ax in fig.axes:
            for ln in ax.lines:
                if not ln.get_label().startswith("_") and ln.get_gid() is None:
                    marker = ln.get_marker() if ln.get_marker() != "None" else None
                    drawn.append((ln.get_label(), to_hex(ln.get_color()), marker))
            for c in ax.collections:
                if c.get_gid() == "points":
                    marker = c.get_paths()[0].vertices
                    drawn.append((c.get_label(), to_hex(c.get_facecolor()[0]), marker))
        plt.close(fig)
    families = {**dict(zip(cells["model"], cells["family"], strict=False))}
    families |= dict(
        zip(paper.table6_frame()["model"], paper.table6_frame()["family"], strict=False)
    )
    families |= dict(zip(jft_history["model"], jft_history["family"], strict=False))
    sizes = dict(zip(cells["model"], cells["size"], strict=False))
    sizes |= dict(zip(paper.table6_frame()["model"], paper.table6_frame()["size"], strict=False))
    markers: dict[str, set] = {}
    for label, color, marker in drawn:
        assert label in families, label  # the model's full name, nothing shortened
        seen.setdefault(label, set()).add(color)
        if marker is not None and label in sizes:
            key = _marker(marker) if isinstance(marker, str) else np.round(marker, 6).tobytes()
            markers.setdefault((families[label] == "ResNet", sizes[label]), set()).add(key)
    assert all(len(colours) == 1 for colours in seen.values()), seen
    hues: dict[str, set] = {}
    for model, (color,) in ((m, tuple(c)) for m, c in seen.items()):
        hues.setdefault(families[model], set()).add(round(_hue(color), 2))
    assert all(len(h) == 1 for h in hues.values()), hues  # shades of one hue per family
    assert len({next(iter(h)) for h in hues.values()}) == len(hues)  # families apart
    assert all(len(m) == 1 for m in markers.values()), markers
    for resnet in (False, True):  # ViT sizes (hybrids have the ViT's) apart; ResNets apart
        family = [next(iter(m)) for (r, _), m in markers.items() if r == resnet]
        assert len(set(family)) == len(family) > 1
    assert seen["ViT-Pico/4"] != seen["ViT-Pico/8"]  # same size and family: another shade


def test_crossovers_say_which_pair_crossed():
    """Each crossover mark carries the letter of its pair; the legend spells the pair out
    ("ViT-B/16 passes ViT-S/16"): which line is ahead after it."""
    history = jft.history()  # the compute view: every model, the Mixers too
    metric = rf.fewshot_key("imagenet", 5)
    fig, found = scaling_curves.figure(history, metrics=[metric], x=rf.EXAFLOPS)
    crossed = found[metric]
    assert len(crossed) > len({scaling_curves.passes(*row) for row in crossed}) - 1 > 1
    pairs = list(dict.fromkeys(scaling_curves.passes(*row) for row in crossed))
    (ax,) = [a for a in fig.axes if a.get_visible()]
    letters = [t.get_text() for t in ax.texts if t.get_gid() == scaling_curves.CROSSOVER]
    assert letters == [
        string.ascii_lowercase[pairs.index(scaling_curves.passes(*row))] for row in crossed
    ]
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    for a, b, c in crossed:
        ahead, behind = (a, b) if c.leader == "a" else (b, a)
        assert f"{ahead} passes {behind}" in labels
    plt.close(fig)


def test_two_settings_of_one_model_look_apart_in_fig5(cells):
    """Two learning rates of one model share its colour and marker; the second is hollow
    (as its Fig. 4 line is), so neither hides the other."""
    vit = cells[(cells["model"] == "ViT-Pico/4") & (cells["status"] == "done")]
    two = pd.concat(
        [vit.assign(model="ViT-Pico/4 lr=0.001"), vit.assign(model="ViT-Pico/4 lr=0.003")]
    )
    fig = fig5.figure([fig5.Panel(two, SHAPES5, "shapes")])
    points = {c.get_label(): c for ax in fig.axes for c in _points(ax, "points")}
    first, second = points["ViT-Pico/4 lr=0.001"], points["ViT-Pico/4 lr=0.003"]
    assert to_hex(first.get_edgecolor()[0]) == to_hex(second.get_edgecolor()[0])
    assert to_hex(second.get_facecolor()[0]) == "#ffffff" != to_hex(first.get_facecolor()[0])
