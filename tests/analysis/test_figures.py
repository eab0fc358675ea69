"""Every figure renders from the paper's tables and from fixture runs with the expected
series and points (the matplotlib objects, not only the files)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
from matplotlib.container import ErrorbarContainer

from analysis import fixtures, paper
from analysis.figures import curves, fig3, fig4, fig5
from analysis.figures._data import log_x
from vitscale import record as rf
from vitscale.record.cells import load_history, load_runs

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
    assert list(lines) == ["40", "80"]
    done = cells[cells["status"] == "done"]
    for steps, line in lines.items():
        rows = done[done["config.train.steps"] == int(steps)]
        assert len(line.get_xdata()) == rows["examples_seen"].nunique() == 1
        assert line.get_ydata()[0] == pytest.approx(rows[SHAPES5].max())
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
        assert len(pts) == t6.groupby(["family", "size"]).ngroups == 11
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


def test_fig5_colours_by_family_and_markers_by_size():
    fig = fig5.figure(fig5.paper_panels()[:1])
    ax = fig.axes[0]
    colours, markers = {}, {}
    for c in _points(ax, "points"):
        family, size = c.get_label().split(" ", 1)
        colours.setdefault(family, set()).add(tuple(np.round(c.get_facecolor()[0], 3)))
        markers.setdefault(size, set()).add(c.get_paths()[0].vertices.tobytes())
    assert all(len(v) == 1 for v in colours.values()) and len(colours) == 3
    assert len({next(iter(v)) for v in colours.values()}) == 3  # three distinct colours
    assert all(len(v) == 1 for v in markers.values())  # B is one marker in ViT and hybrid
    assert len({next(iter(v)) for v in markers.values()}) == len(markers)


def test_fig5_from_runs_with_overlay_and_fit(cells):
    done = cells[cells["status"] == "done"]
    panels = [fig5.Panel(cells, SHAPES5, "shapes")]
    fig = fig5.figure(panels, fit=True, bootstrap=20)
    ax = fig.axes[0]
    pts = _points(ax, "points")
    assert len(pts) == done.groupby(["family", "size"]).ngroups == 3  # Pico ViT, R11, Pico hybrid
    assert sum(len(c.get_offsets()) for c in pts) == len(done)  # the failed cell is skipped
    assert len(_lines(ax, "frontier")) == 3
    assert _lines(ax, "fit")  # families whose frontier has >= 4 points get a law
    # Overlay: a run set that measured ImageNet fine-tuning accuracy gets Table 6 beside it.
    ours = done.assign(**{IMAGENET: done[SHAPES5]})
    fig = fig5.figure([fig5.Panel(ours, IMAGENET, "ImageNet", paper.table6_frame())])
    ref = _points(fig.axes[0], "reference")
    assert sum(len(c.get_offsets()) for c in ref) == 18
    assert all(len(c.get_facecolor()) == 0 or c.get_facecolor()[0][3] == 0 for c in ref)
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "paper (Table 6)" in labels


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
    curves.plot(ax, history, metric=SHAPES5)
    lines = {ln.get_label(): ln for ln in _lines(ax)}
    assert set(lines) == set(MODELS) | {"ViT-Nano/4"}  # history includes the failed cell
    pico = history[history["model"] == "ViT-Pico/4"]
    assert list(lines["ViT-Pico/4"].get_xdata()) == sorted(pico["examples_seen"].unique())


def test_curves_one_panel_per_subset(cells):
    """A Fig. 4 grid's subsets learn differently: each gets its panel, its own means."""
    history, _ = load_history(cells)
    fig = curves.figure(history, metric=SHAPES5)
    axes = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title() for ax in axes] == [f"{n:,} images" for n in SUBSETS]
    for ax, n in zip(axes, SUBSETS, strict=True):
        pico = history[(history["model"] == "ViT-Pico/4") & (history["num_examples"] == n)]
        (line,) = [ln for ln in _lines(ax) if ln.get_label() == "ViT-Pico/4"]
        means = pico.groupby("examples_seen")[SHAPES5].mean()
        assert list(line.get_xdata()) == list(means.index)
        assert list(line.get_ydata()) == pytest.approx(list(means))
    one = curves.figure(history[history["num_examples"] == SUBSETS[0]], metric=SHAPES5)
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


# --------------------------------------------------------------------------- axes


@pytest.mark.parametrize(
    "lo, hi",
    [(25_600, 76_800), (1.12e-6, 4.47e-6), (8.8e-7, 2.7e-6), (1_536, 19_200), (3e-7, 2.8e-6)],
)
def test_a_short_log_axis_has_a_few_round_labels_that_do_not_overlap(lo, hi):
    """Less than ~1.5 decades (a study's examples seen, a frontier's compute): two to four
    labels at round values near the data, side by side without touching on a narrow panel
    (matplotlib's own locator labels every integer multiple there and they run together)."""
    fig, ax = plt.subplots(figsize=(2.4, 2.0))
    xs = np.geomspace(lo, hi, 5)
    ax.plot(xs, np.arange(5))
    log_x(ax, pd.Series(xs))
    fig.canvas.draw()
    shown = [(t.get_position()[0], t) for t in ax.get_xticklabels() if t.get_text()]
    left, right = ax.get_xlim()
    shown = [(x, t) for x, t in shown if left <= x <= right]
    assert 2 <= len(shown) <= 4
    for x, _ in shown:
        mantissa = x / 10 ** np.floor(np.log10(x) + 1e-9)
        assert round(mantissa, 6) in {1, 2, 3, 4, 5, 6, 8}
    boxes = sorted((t.get_window_extent() for _, t in shown), key=lambda b: b.x0)
    assert all(a.x1 < b.x0 for a, b in zip(boxes, boxes[1:], strict=False))
    assert all(ax.xaxis.get_minor_formatter()(x) == "" for x in np.geomspace(lo, hi, 7))
    plt.close(fig)
