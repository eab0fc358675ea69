"""Memory that fits: the activation estimate against what autograd really saves (CPU,
fp32 and bf16 autocast, over the model registry), and `vitscale grid --dry-run
--profile P` choosing micro-batches per GPU and refusing cells that cannot fit."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml

from vitscale import memory
from vitscale.catalog import list_models
from vitscale.cli import main
from vitscale.flops import count
from vitscale.grid.actions import decide, prepare
from vitscale.grid.placement import apply_placements, place_grid
from vitscale.grid.profile import load_profile
from vitscale.grid.spec import load_grid
from vitscale.models import create_model

from .helpers.models import REAL_PARAM_LIMIT, small_resolution

ROOT = Path(__file__).resolve().parents[1]
# Every registry model small enough to run on the CPU; the hybrid trunk is held below.
CALIBRATED = [n for n in list_models() if count(n, small_resolution(n)).params <= REAL_PARAM_LIMIT]


def _uninitialised(name: str, **kwargs) -> torch.nn.Module:
    """The model with constant weights (the values do not matter here, and initialising a
    100M-parameter model takes seconds)."""
    with torch.device("meta"):
        model = create_model(name, **kwargs)
    model = model.to_empty(device="cpu").train()
    with torch.no_grad():
        for p in model.parameters():  # not garbage: denormals would make the CPU crawl
            p.fill_(0.01)
    return model


def _check(name: str, size: int, batches, precisions, **kw) -> None:
    model = _uninitialised(name, image_size=size, **kw)
    for batch in batches:
        images = torch.randn(batch, 3, size, size)
        for precision in precisions:
            measured = memory.measure_saved_bytes(model, images, bf16=precision == "bf16")
            estimated = memory.saved_activation_bytes(
                name, image_size=size, batch=batch, precision=precision, device="cpu", **kw
            )
            assert estimated == pytest.approx(measured, rel=0.01), (batch, precision)


@pytest.mark.parametrize("name", CALIBRATED)
def test_saved_activations_match_autograd(name):
    """fp32, every registry model that runs on the CPU (ViTs with dropout's masks)."""
    size = small_resolution(name)
    dropout = 0.0 if name.startswith("BiT") else 0.1
    _check(name, size, (2,), ("fp32",), num_classes=10, dropout=dropout)


@pytest.mark.parametrize(
    ("name", "precisions"),
    [
        ("ViT-Pico/8", ("fp32", "bf16")),
        ("BiT-R11x0.5", ("fp32", "bf16")),
        ("Mixer-Femto/8", ("fp32", "bf16")),
        # The hybrid trunk (SAME padding, its own kernel standardisation); under CPU
        # autocast its casts coincide with fp32's layout, so fp32 covers its paths.
        ("R50x1+ViT-B/32", ("fp32",)),
    ],
)
def test_casts_and_the_per_example_split_match_autograd(name, precisions):
    """At two batch sizes (and under bf16 autocast: casts of activations and weights): the
    bytes per example and the bytes once per forward (weight copies) are both right."""
    dropout = 0.0 if name.startswith("BiT") else 0.1
    _check(name, 32, (1, 3), precisions, num_classes=10, dropout=dropout)


def test_gap_pooling_and_the_heads_are_counted():
    _check("ViT-Pico/8", 32, (2,), ("fp32", "bf16"), num_classes=7, head="finetune", pool="gap")
    _check("ViT-Pico/8", 32, (2,), ("fp32",), num_classes=7, head="pretrain", pre_logits=False)


def test_cuda_autocast_keeps_groupnorm_in_fp32():
    """Under CUDA autocast GroupNorm runs in fp32: a BiT keeps fp32 norm inputs and ReLU
    outputs plus a bf16 copy for each convolution, more than CPU autocast (all bf16) and
    less than fp32 twice over; ViTs (LayerNorm in fp32 on both) do not differ."""
    kw = dict(image_size=224, batch=64)
    cuda, cpu = (
        memory.saved_activation_bytes("BiT-R50x1", precision="bf16", device=d, **kw)
        for d in ("cuda", "cpu")
    )
    fp32 = memory.saved_activation_bytes("BiT-R50x1", precision="fp32", **kw)
    assert cpu < fp32 < cuda < 2 * fp32
    vit = [
        memory.saved_activation_bytes("ViT-B/16", precision="bf16", device=d, **kw)
        for d in ("cuda", "cpu")
    ]
    assert vit[0] == vit[1]


def test_the_step_counts_weights_gradients_optimiser_and_buckets():
    params = count("ViT-B/16", 224, num_classes=1000, head="pretrain").params
    one = memory.estimate("ViT-B/16", image_size=224, micro_batch=32)
    eight = memory.estimate("ViT-B/16", image_size=224, micro_batch=32, processes=8)
    assert (one.weights, one.gradients, one.optimizer, one.buckets) == (
        4 * params,
        4 * params,
        8 * params,
        0,
    )
    assert eight.buckets == 4 * params and eight.total == one.total + 4 * params
    sgd = memory.estimate("ViT-B/16", image_size=224, micro_batch=32, optimizer="sgd")
    assert sgd.optimizer == 4 * params
    with pytest.raises(ValueError, match="unknown optimizer 'lamb'; valid: adamw, sgd"):
        memory.estimate("ViT-B/16", image_size=224, micro_batch=32, optimizer="lamb")


def test_paper_grids_get_micro_batches_that_fit_an_h100(capsys):
    """Fig. 5 on 8x H100: every cell and every fine-tune fits at the micro-batch chosen;
    the BiT cells, 512 images per GPU (about 200 GiB for R152x2), are split."""
    profile = ROOT / "slurm" / "profiles" / "h100x8.yaml"
    grid = ROOT / "experiments" / "fig5_compute.yaml"
    assert main(["grid", str(grid), "--dry-run", "--json", "--profile", str(profile)]) == 0
    cells = json.loads(capsys.readouterr().out)["cells"]
    usable = memory.usable_bytes(80 * memory.GiB)
    for cell in cells:
        m = cell["memory"]
        assert m["problems"] == [] and m["device"] == "cuda" and m["precision"] == "bf16"
        assert m["per_process_batch"] % m["micro_batch_size"] == 0
        assert m["pretrain_bytes"]["total"] <= usable and m["finetune_bytes"]["total"] <= usable
    r152x2 = next(c for c in cells if c["model"] == "BiT-R152x2")["memory"]
    assert r152x2["per_process_batch"] == 512 and r152x2["micro_batch_size"] < 512
    whole = memory.estimate(
        "BiT-R152x2", image_size=224, micro_batch=512, num_classes=1000, processes=8
    )
    assert whole.total > 150 * memory.GiB  # what the grid would have asked for
    # The table shows the same, with its units.
    assert main(["grid", str(grid), "--dry-run", "--profile", str(profile)]) == 0
    out = capsys.readouterr().out
    assert "GiB/GPU" in out and "usable 71.0 GiB per GPU" in out


def _grid(tmp_path: Path, model: str, **train) -> Path:
    grid = {
        "name": "mem",
        "base": {
            "model": {"name": model},
            "data": {"dataset": "synthetic", "image_size": 224},
            "train": {"steps": 10, "batch_size": 1024} | train,
            "optim": {"warmup_steps": 1},
            "wandb": {"mode": "disabled"},
        },
        "resources": {"default": {"gpus": 1}},
    }
    path = tmp_path / "grid.yaml"
    path.write_text(yaml.safe_dump(grid))
    return path


def _profile(tmp_path: Path, gpu_mem_gb: float) -> Path:
    path = tmp_path / "gpus.yaml"
    path.write_text(
        yaml.safe_dump({"gpus_per_node": 1, "cpus_per_node": 8, "gpu_mem_gb": gpu_mem_gb})
    )
    return path


def test_a_cell_that_fits_at_no_micro_batch_is_refused_by_name(tmp_path, capsys):
    grid, profile = _grid(tmp_path, "ViT-H/14"), _profile(tmp_path, 8)
    (cell,) = load_grid(grid).cells
    assert main(["grid", str(grid), "--dry-run", "--profile", str(profile)]) == 2
    out = capsys.readouterr()
    assert cell.id in out.out  # the table is printed first
    assert f"cell {cell.id} (ViT-H/14): needs" in out.err
    assert "even at micro-batch 1, more than the 6.2 GiB usable of a 8 GiB GPU" in out.err
    assert "Traceback" not in out.err
    # A micro-batch the grid gives is checked too, and named.
    grid = _grid(tmp_path, "ViT-B/16", micro_batch_size=1024)
    assert main(["grid", str(grid), "--dry-run", "--profile", str(_profile(tmp_path, 16))]) == 2
    assert (
        "at train.micro_batch_size=1024, more than the 13.4 GiB usable" in capsys.readouterr().err
    )


def test_chosen_micro_batches_are_written_into_the_cells_config(tmp_path):
    """Submission writes the derived micro-batch into config.json; an operational key, so
    the cell keeps its id (and its run folder)."""
    g = load_grid(_grid(tmp_path, "ViT-B/16"))
    (cell,) = g.cells
    fits = place_grid(g, load_profile(_profile(tmp_path, 16)))
    assert 1 <= fits[0].micro_batch < 1024 and 1024 % fits[0].micro_batch == 0
    apply_placements(fits)
    (item,) = decide(g, tmp_path / "runs")
    prepare(item)
    written = json.loads((item.run_dir / "config.json").read_text())
    assert written["train"]["micro_batch_size"] == fits[0].micro_batch
    assert written["cell_id"] == cell.id == load_grid(_grid(tmp_path, "ViT-B/16")).cells[0].id


def test_decoding_on_the_device_is_in_the_estimate_that_picks_the_micro_batch(
    tmp_path, monkeypatch
):
    """Decoding on the GPU holds the process's whole batch there (each
    image at its stored resolution, its crop, the float batch, the next one's beside it) in
    the side streams' own pools, which the step cannot reuse; the estimate that picks the
    micro-batch (the trainer's, and the grid's at submission) left it out. On a GPU whose
    memory the step just fits at 256, decoding there takes a smaller micro-batch."""
    from vitscale.config import resolve
    from vitscale.train.hardware import micro_batch_for

    from .helpers.datasets import write_jpeg_shards

    root = write_jpeg_shards(tmp_path / "sh", shards=1, per_shard=4)

    def config(decode: str) -> dict:
        return {
            "model": {"name": "ViT-B/16"},
            "data": {"dataset": f"shards:{root}", "image_size": 224, "decode": decode},
            "train": {"steps": 10, "batch_size": 256, "precision": "bf16"},
            "optim": {"warmup_steps": 1},
            "wandb": {"mode": "disabled"},
        }

    workers, device = resolve(config("workers")), resolve(config("device"))
    m = workers.model
    step = memory.estimate(
        m.name, image_size=224, micro_batch=256, num_classes=4, pool=m.pool,
        pre_logits=m.pre_logits, dropout=m.dropout or 0.0, precision="bf16",
    )  # fmt: skip
    gpu = (step.total + 2**20 + memory.CONTEXT_BYTES) / memory.USABLE_FRACTION
    props = type("Properties", (), {"total_memory": int(gpu)})
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda d=None: props)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d=None: "NVIDIA H100 80GB HBM3")
    cuda = torch.device("cuda", 0)
    assert micro_batch_for(workers, per_process=256, num_classes=4, device=cuda) == 256
    assert micro_batch_for(device, per_process=256, num_classes=4, device=cuda) < 256
    # the grid's placement, which submission writes into the cells' configs, counts it too
    profile, placed = load_profile(_profile(tmp_path, 80)), {}
    for decode in ("workers", "device"):  # an operational key: one cell id, two grids
        path = tmp_path / f"{decode}.yaml"
        grid = {"name": decode, "base": config(decode), "resources": {"default": {"gpus": 1}}}
        path.write_text(yaml.safe_dump(grid))
        (placed[decode],) = place_grid(load_grid(path), profile)
    at_least = 256 * 3 * 224 * 224  # the batch's crops alone, uint8
    assert placed["device"].pretrain.total - placed["workers"].pretrain.total >= at_least


def test_evaluation_batches_fit_beside_what_training_keeps(monkeypatch):
    """Evaluation runs with pre-training's weights, gradients and AdamW moments still
    allocated, then fine-tuning's model beside the pre-trained one: ``eval.batch_size``
    taken as given made an evaluation-only out-of-memory error on a smaller GPU (on one
    rank, a cell that failed every time). Fitted, a batch that would not fit is cut to
    one that does; on a GPU with room, or on a CPU, it is kept."""
    from vitscale.config import resolve
    from vitscale.train.hardware import eval_batch_for, finetune_eval_batch_for

    cfg = resolve(
        {
            "model": {"name": "ViT-L/16"},
            "data": {"dataset": "synthetic-textures", "image_size": 224},
            "train": {"steps": 10, "batch_size": 256, "precision": "bf16"},
            "optim": {"warmup_steps": 1},
            "eval": {"batch_size": 1024},
            "wandb": {"mode": "disabled"},
        }
    )
    gib = [80]
    props = type("Properties", (), {"total_memory": property(lambda self: gib[0] * memory.GiB)})
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda d=None: props())
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d=None: "NVIDIA H100 80GB HBM3")
    cuda = torch.device("cuda", 0)
    heads = dict(
        num_classes=1000, head="pretrain", pool=cfg.model.pool, pre_logits=cfg.model.pre_logits
    )
    step = memory.estimate("ViT-L/16", image_size=224, micro_batch=1, **heads)
    forward = memory._saved("ViT-L/16", 224, "bf16", "cuda", **heads, dropout=0.0).largest

    def fits(batch: int, resident: int) -> bool:
        used = resident + 2 * batch * forward + memory.WORKSPACE_BYTES
        return used <= memory.usable_bytes(gib[0] * memory.GiB)

    assert eval_batch_for(cfg, per_process=256, num_classes=1000, device=cuda) == 1024
    gib[0] = 8  # the state alone is 4.5 GiB of the 6.2 usable
    batch = eval_batch_for(cfg, per_process=256, num_classes=1000, device=cuda)
    assert 1 < batch < 1024 and fits(batch, step.resident) and not fits(batch + 1, step.resident)
    tuned = finetune_eval_batch_for(cfg, num_classes=10, image_size=384, device=cuda)
    assert 1 <= tuned < batch  # 576 tokens, not 196; SGD's state and the pre-trained model
    cpu = torch.device("cpu")
    assert eval_batch_for(cfg, per_process=256, num_classes=1000, device=cpu) == 1024
