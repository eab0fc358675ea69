"""`vitscale summary`: the verdict follows the numbers, whichever way they fall."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analysis.frontier import pareto_frontier
from analysis.summary import NOISE_FACTOR, compare_frontiers, fig5_cells, summarise
from vitscale.record import fewshot_key

A, B = fewshot_key("synthetic-glyphs", 5), fewshot_key("synthetic-textures", 5)
# model -> (family, exaFLOPs per step)
MODELS = {"ViT-Pico/4": ("ViT", 2.0), "ViT-Pico/8": ("ViT", 1.0), "BiT-R11x0.5": ("ResNet", 1.5)}


def _frame(values: dict[tuple, float | list[float]], steps: int = 100) -> pd.DataFrame:
    """Rows from ``{(model, subset[, steps]): accuracy or [accuracy per seed]}``; textures
    (B) read 10 points above glyphs (A), so the 2-task mean is A + 5."""
    rows = []
    for key, accs in values.items():
        model, n, *rest = key
        cell_steps = rest[0] if rest else steps
        family, per_step = MODELS[model]
        for seed, acc in enumerate(np.atleast_1d(accs)):
            rows.append(
                {
                    "status": "done",
                    "model": model,
                    "family": family,
                    "num_examples": n,
                    "steps": cell_steps,
                    "seed": seed,
                    "exaflops": per_step * cell_steps,
                    A: acc,
                    B: acc + 10,
                }
            )
    rows.append(
        {
            "status": "failed",
            "model": "ViT-Pico/4",
            "family": "ViT",
            "num_examples": 100,
            "steps": steps,
            "seed": 0,
            "exaflops": 2.0,
            A: 99.0,
            B: 99.0,
        }
    )  # failed cells never count
    return pd.DataFrame(rows)


@pytest.mark.parametrize(
    ("large_vit", "verdict"),
    [
        (70.0, "reverses: the ViTs overtake (+20.0 -> -10.0; a change of 30.0 points"),
        (55.0, "shrinks by 15.0 points (+20.0 -> +5.0; 7.5x the largest seed spread"),
        (39.0, "does not change beyond the noise (+20.0 -> +21.0;"),
        (30.0, "grows by 10.0 points (+20.0 -> +30.0;"),
    ],
)
def test_gap_verdict_against_seed_spread(large_vit, verdict):
    spread = 2.0  # every verdict cell: two seeds 2 points apart
    two = lambda x: [x - spread / 2, x + spread / 2]  # noqa: E731
    s = summarise(
        _frame(
            {
                ("ViT-Pico/4", 100): two(20.0),
                ("ViT-Pico/8", 100): two(10.0),
                ("BiT-R11x0.5", 100): two(40.0),
                ("ViT-Pico/4", 10_000): two(large_vit),
                ("ViT-Pico/8", 10_000): two(25.0),
                ("BiT-R11x0.5", 10_000): two(60.0),
            }
        )
    )
    assert s.metric == f"average({A}, {B})"
    assert s.by_subset.loc[100, "gap"] == pytest.approx(20.0)  # best ResNet - best ViT
    assert s.by_subset.loc[100, "ViT_model"] == "ViT-Pico/4"
    assert s.by_subset.loc[100, "ResNet_spread"] == pytest.approx(spread)
    lines = "\n".join(s.lines())
    assert (
        "smallest subset (100 images): best ResNet 45.0 ± 2.0 (BiT-R11x0.5) vs best ViT "
        "25.0 ± 2.0 (ViT-Pico/4): ResNets 20.0 points ahead" in lines
    )
    assert verdict in lines
    change = s.gap_change
    assert change["seed_spread"] == pytest.approx(spread)
    assert change["threshold"] == pytest.approx(NOISE_FACTOR * spread)
    assert change["trend"] == (abs(change["shrink"]) > NOISE_FACTOR * spread)


def test_one_seed_falls_back_to_noise_points_and_says_so():
    s = summarise(
        _frame(
            {
                ("ViT-Pico/4", 100): 20.0,
                ("BiT-R11x0.5", 100): 40.0,
                ("ViT-Pico/4", 1000): 20.5,
                ("BiT-R11x0.5", 1000): 40.0,
            }
        ),
        metric=A,
    )
    lines = "\n".join(s.lines())
    assert "does not change beyond the noise" in lines
    assert "one seed: no spread measured" in lines
    assert np.isnan(s.gap_change["seed_spread"])


def test_no_resnet_lead():
    s = summarise(
        _frame(
            {
                ("ViT-Pico/4", 100): 50.0,
                ("BiT-R11x0.5", 100): 40.0,
                ("ViT-Pico/4", 1000): 60.0,
                ("BiT-R11x0.5", 1000): 45.0,
            }
        ),
        metric=A,
    )
    assert "was never a ResNet lead" in "\n".join(s.lines())
    with pytest.raises(ValueError, match="no column"):
        summarise(_frame({("ViT-Pico/4", 100): 1.0}), metric="fewshot/nope/5shot")


def test_fig4_uses_one_duration_and_fig5_every_duration():
    # 200 steps span both subsets (Fig. 4); 100-step runs exist only at the largest subset
    # (Fig. 5's shorter durations) and must not leak into the per-subset comparison.
    s = summarise(
        _frame(
            {
                ("ViT-Pico/8", 100, 200): 10.0,
                ("BiT-R11x0.5", 100, 200): 40.0,
                ("ViT-Pico/8", 1000, 200): 30.0,
                ("BiT-R11x0.5", 1000, 200): 50.0,
                ("ViT-Pico/8", 1000, 100): 99.0,  # would win Fig. 4 if durations mixed
                ("BiT-R11x0.5", 1000, 100): 45.0,
                ("ViT-Pico/4", 1000, 100): 20.0,
            }
        ),
        metric=A,
    )
    assert s.steps == 200
    assert s.by_subset.loc[1000, "ViT"] == pytest.approx(30.0)
    front = s.frontier.set_index(["model", "steps"])
    assert len(front) == 5  # every run at the largest subset
    # ViT: Pico/8 at 100 steps costs 100 EF and scores 99: it dominates Pico/8 at 200 steps
    # (200 EF, 30) and Pico/4 at 100 steps (200 EF, 20).
    assert front.loc[("ViT-Pico/8", 100), "on_frontier"]
    assert not front.loc[("ViT-Pico/8", 200), "on_frontier"]
    assert not front.loc[("ViT-Pico/4", 100), "on_frontier"]
    assert front.loc[("BiT-R11x0.5", 100), "on_frontier"]
    assert front.loc[("BiT-R11x0.5", 200), "on_frontier"]


def _front(points: dict[str, list[tuple[float, float]]]) -> pd.DataFrame:
    rows = [
        {"family": f, "model": f"{f}{i}", "exaflops": x, "mean": y, "on_frontier": True}
        for f, pts in points.items()
        for i, (x, y) in enumerate(pts)
    ]
    return pd.DataFrame(rows)


def test_frontiers_cross_where_the_leader_changes():
    c = compare_frontiers(
        _front(
            {"ViT": [(1.0, 10.0), (4.0, 80.0)], "ResNet": [(1.0, 50.0), (2.0, 60.0), (8.0, 70.0)]}
        )
    )
    assert c["range"] == [1.0, 4.0]  # both families measured; no extrapolation past 4 EF
    assert [(s["leader"], s["from"], s["to"]) for s in c["segments"]] == [
        ("ResNet", 1.0, 2.0),
        ("ViT", 4.0, 4.0),
    ]
    assert c["crossings"] == [4.0]
    assert c["segments"][0]["margin_min"] == pytest.approx(40.0)
    assert c["segments"][0]["margin_max"] == pytest.approx(50.0)


def test_frontiers_that_do_not_overlap_are_not_compared():
    assert compare_frontiers(_front({"ViT": [(1.0, 10.0)], "ResNet": [(5.0, 50.0)]})) == {}
    assert compare_frontiers(_front({"ViT": [(1.0, 10.0)]})) == {}


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.floats(0.1, 100), st.floats(0, 100)), min_size=1, max_size=6),
    st.lists(st.tuples(st.floats(0.1, 100), st.floats(0, 100)), min_size=1, max_size=6),
)
def test_frontier_comparison_matches_brute_force(vit, resnet):
    """At every compute both families reach, the named leader has the higher best-so-far."""
    frame = []
    for family, pts in (("ViT", vit), ("ResNet", resnet)):
        xs, ys = np.array([p[0] for p in pts]), np.array([p[1] for p in pts])
        keep = set(pareto_frontier(xs, ys).tolist())
        frame += [(family, x, y, i in keep) for i, (x, y) in enumerate(pts)]
    front = pd.DataFrame(frame, columns=["family", "exaflops", "mean", "on_frontier"])
    c = compare_frontiers(front)
    lo = max(min(p[0] for p in vit), min(p[0] for p in resnet))
    hi = min(max(p[0] for p in vit), max(p[0] for p in resnet))
    if lo > hi:
        assert c == {}
        return

    def best(pts, x):
        return max(y for cx, y in pts if cx <= x * (1 + 1e-9))

    for s in c["segments"]:
        for x in (s["from"], s["to"]):
            margin = best(vit, x) - best(resnet, x)
            expected = "ViT" if margin > 0 else "ResNet" if margin < 0 else "tie"
            assert s["leader"] == expected
    leaders = [s["leader"] for s in c["segments"]]
    assert all(a != b for a, b in zip(leaders, leaders[1:], strict=False))


def test_json_carries_the_verdict_as_numbers():
    s = summarise(
        _frame(
            {
                ("ViT-Pico/8", 100): [10.0, 12.0],
                ("BiT-R11x0.5", 100): [40.0, 41.0],
                ("ViT-Pico/8", 1000): [30.0, 31.0],
                ("BiT-R11x0.5", 1000): [45.0, 45.5],
            }
        ),
        metric=A,
    )
    d = json.loads(json.dumps(s.to_dict()))  # JSON-safe: no NaN, no numpy types
    assert d["fig4_steps"] == 100
    small = d["subsets"][0]
    assert small["num_examples"] == 100
    assert small["vit"] == {"model": "ViT-Pico/8", "mean": 11.0, "seed_spread": 2.0, "seeds": 2}
    assert small["gap"] == pytest.approx(29.5)
    assert d["gap_change"]["shrink"] == pytest.approx(29.5 - 14.75)  # 45.25 - 30.5
    assert d["gap_change"]["seed_spread"] == pytest.approx(2.0)
    assert set(d["frontier"]) == {"ViT", "ResNet"}
    assert d["frontier"]["ViT"][0]["on_frontier"] is True
    assert d["verdict"] == s.lines()


def test_fig5_reads_the_largest_subset_of_each_pretraining_set():
    frame = pd.DataFrame(
        {
            "pretrain_dataset": ["a", "a", "a", "b", "b", "a"],
            "num_examples": [10, 100, 100, 5, 50, 10],
            "published": [False, False, False, False, False, True],
        }
    )
    assert fig5_cells(frame).index.tolist() == [1, 2, 4, 5]
    assert fig5_cells(frame.drop(columns=["published"])).index.tolist() == [1, 2, 4]


def test_the_verdict_can_read_an_average_of_chosen_tasks():
    """A pre-registered verdict metric (the scenes world's suite mean without its control
    task) is named by its parts; an unknown part is refused with the metrics there are."""
    frame = _frame({("ViT-Pico/8", 100): [40.0, 42.0], ("BiT-R11x0.5", 100): [60.0, 61.0]})
    both = summarise(frame, metric=f"average({A}, {B})")
    assert both.metric == f"average({A}, {B})"
    assert summarise(frame).metric == both.metric  # the default averages every 5-shot task
    only_b = summarise(frame, metric=f"average({B})")
    row = only_b.by_subset.iloc[0]
    assert row["ViT"] == pytest.approx(51.0) and row["ResNet"] == pytest.approx(70.5)
    with pytest.raises(ValueError, match="or 'average"):
        summarise(frame, metric="average(fewshot/nope/5shot)")


def test_two_learning_rates_are_two_settings_never_averaged_as_seeds():
    """A grid with optim.lr [1e-3, 3e-3] x seed [0, 1]: each (model, subset) has two
    settings of two seeds, not four seeds. The spread is the seed spread (0.4), never the
    learning rate's effect (20 points); ``settings="best"`` keeps the better lr and says so."""
    shapes = fewshot_key("imagefolder:/data/shapes", 5)
    rows = []
    for model, (family, _) in MODELS.items():
        for n in (100, 1000):
            for lr, gain in ((1e-3, 0.0), (3e-3, 20.0)):
                for seed in (0, 1):
                    rows.append(
                        {
                            "status": "done",
                            "model": model,
                            "family": family,
                            "num_examples": n,
                            "steps": 100,
                            "exaflops": 1.0,
                            "config.seed": seed,
                            "config.optim.lr": lr,
                            "config.eval.fewshot.datasets": ("imagefolder:/data/shapes",),
                            "config.eval.fewshot.shots": (5, 10),
                            shapes: (60.0 if family == "ResNet" else 30.0) + gain + 0.4 * seed,
                        }
                    )
    frame = pd.DataFrame(rows)
    shown = summarise(frame)  # the own set's 5-shot metric is found by default
    assert shown.metric == shapes
    assert set(shown.cells.seeds) == {2}
    assert np.allclose(shown.cells.spread, 0.4)
    assert "ViT-Pico/4 lr=0.003" in set(shown.cells.model)
    assert shown.to_dict()["settings"]["differing_keys"] == ["optim.lr"]
    assert any("differ in optim.lr besides their seed" in line for line in shown.lines())
    best = summarise(frame, settings="best")
    assert set(best.cells.seeds) == {2} and np.allclose(best.cells.spread, 0.4)
    assert set(best.cells.model) == set(MODELS)  # one setting each, the better one
    assert best.cells["mean"].min() == pytest.approx(50.2)
    assert "ViT-Pico/4 at 100 images: best of 2 lr settings: lr=0.003" in best.chosen


def test_a_key_one_config_predates_is_no_setting():
    """Cells of one id run before and after a key was recorded (data.holdout, the recipe's
    name): the older config lacks it, which is no difference; a real one still is."""
    from analysis.settings import differing_keys

    points = pd.DataFrame({"model": ["m"] * 3, "num_examples": [100] * 3})
    configs = pd.DataFrame(
        {
            "data.holdout": [np.nan, 0.2, 0.2],
            "recipe": [None, "synthetic", "synthetic"],
            "seed": [0, 1, 2],
        }
    )
    assert differing_keys(configs, points) == []
    assert differing_keys(configs.assign(**{"optim.lr": [1, 2, 2]}), points) == ["optim.lr"]


def test_the_compute_lines_read_fig5s_metric_and_name_it():
    """Few-shot and fine-tuned accuracy may name opposite winners at equal compute: the
    summary's compute lines read the metric Fig. 5 and Table 6 draw (fine-tuned, where
    cells have it) and say so, while its data section keeps Fig. 4's few-shot metric."""
    from analysis.draw import compute_metrics
    from vitscale.record import finetune_key

    tuned = finetune_key("synthetic-glyphs")
    durations = (100, 200, 300, 400)
    frame = _frame(
        {("ViT-Pico/4", 1000, s): 50 + s / 10 for s in durations}
        | {("BiT-R11x0.5", 1000, s): 40 + s / 10 for s in durations}
    )
    frame[tuned] = np.where(frame["family"] == "ResNet", frame[A] + 30, frame[A])
    s = summarise(frame)
    assert s.compute_metric == tuned != s.metric
    assert compute_metrics(frame[frame["status"] == "done"], metric=None, shots=5)[1] == [tuned]
    assert {seg["leader"] for seg in s.comparison["segments"]} == {"ResNet"}
    frontiers = [line for line in s.lines() if "compute frontier" in line]
    assert len(frontiers) == 2
    assert all("(synthetic-glyphs accuracy, fine-tuned (%))" in line for line in frontiers)
    assert s.to_dict()["compute_metric"] == tuned
    fewshot = summarise(frame, metric=A)  # a metric given: both sections read it
    assert fewshot.compute_metric == A
    assert "ResNet" not in {seg["leader"] for seg in fewshot.comparison["segments"]}


def test_the_frontiers_read_every_cell_with_a_value_of_their_metric():
    """A cell fine-tuned but never evaluated few-shot is on Fig. 5 (fine-tuned accuracy):
    the summary's frontier holds it too, though its data section cannot."""
    from vitscale.record import finetune_key

    tuned = finetune_key("synthetic-glyphs")
    frame = _frame({("ViT-Pico/4", 1000, s): 50 + s / 10 for s in (100, 200, 300)})
    frame[tuned] = frame[A]
    extra = frame[frame["steps"] == 300].assign(steps=400, exaflops=8.0)
    extra[[A, B]] = np.nan  # evaluated only after fine-tuning
    extra[tuned] = 90.0
    s = summarise(pd.concat([frame, extra], ignore_index=True))
    assert 400 not in set(s.cells["steps"])  # the data section: few-shot cells only
    assert s.frontier.loc[s.frontier["steps"] == 400, "mean"].tolist() == [90.0]
