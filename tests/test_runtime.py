"""Where a run executes: honest peak FLOP/s per GPU, TF32, NCCL's current variable names,
loader workers chosen per machine and started with the renderer already built, GPUs
split between local workers, and evaluation samples drawn at random, never the first n."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from vitscale.config import resolve
from vitscale.data import build_dataset
from vitscale.data import workers as loader_workers
from vitscale.evals.features import evaluation_sample
from vitscale.grid.local import gpu_groups, worker_env
from vitscale.grid.profile import load_profile
from vitscale.train import runtime

from .helpers.configs import tiny_config


@pytest.mark.parametrize(
    ("device_name", "peak_tflops"),
    [
        ("NVIDIA H100 80GB HBM3", 989),  # SXM
        ("NVIDIA H100 PCIe", 756),
        ("NVIDIA H100 NVL", 835),
        ("NVIDIA H200", 989),
        ("NVIDIA H200 NVL", 835),
        ("NVIDIA A100-SXM4-40GB", 312),
        ("NVIDIA A100-SXM4-80GB", 312),
        ("NVIDIA A100 80GB PCIe", 312),
        ("NVIDIA L40S", 362),
        ("NVIDIA A10G", 70),
        ("NVIDIA A10", 125),
        ("NVIDIA GeForce RTX 4090", None),  # not in the table: no MFU rather than a wrong one
    ],
)
def test_peak_flops_per_gpu_from_its_cuda_name(device_name, peak_tflops):
    peak = runtime.peak_flops_of(device_name)
    assert (peak and round(peak / 1e12)) == peak_tflops


def test_mfu_is_per_device():
    """8 GPUs training 8,000 images/s at 1 GFLOP each on 100 TFLOP/s devices: each does
    1,000 images/s, 1% of its peak, not 8%."""
    assert runtime.mfu(8000, flops_per_image=1e9, processes=8, peak=100e12) == pytest.approx(0.01)


@pytest.mark.parametrize(
    ("gpu", "major", "expected"),
    [("V100", 7, "fp32"), ("T4", 7, "fp32"), ("A100", 8, "bf16"), ("H100", 9, "bf16")],
)
def test_auto_precision_is_bf16_only_where_the_gpu_has_it(monkeypatch, gpu, major, expected):
    """``torch.cuda.is_bf16_supported()`` counts emulation by default,
    and a V100 or T4 makes a bf16 tensor without complaint (emulated, several times slower
    than fp32), so ``auto`` picked bf16 there. Native bf16 is compute capability 8.0 on."""
    import types

    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(
        torch.cuda, "get_device_properties", lambda d=None: types.SimpleNamespace(major=major)
    )
    monkeypatch.setattr(torch.cuda, "_check_bf16_tensor_supported", lambda device: True)
    assert runtime.resolve_precision("auto") == expected, gpu
    assert runtime.resolve_precision("bf16") == "bf16"  # asked for: as asked


def test_fp32_matmuls_may_use_tf32_and_convolutions_are_autotuned():
    """TF32 for what stays fp32; cuDNN times its algorithms once per input shape and keeps
    the fastest: training's shapes are fixed (a resolution, a micro-batch), so BiT's and
    the hybrids' convolutions pay it on the first step only."""
    import torch

    flags = (torch.backends.cuda.matmul, "allow_tf32"), (torch.backends.cudnn, "allow_tf32")
    flags += ((torch.backends.cudnn, "benchmark"),)
    old = [getattr(owner, name) for owner, name in flags]
    try:
        for owner, name in flags:
            setattr(owner, name, False)
        runtime.make_accelerator(precision="fp32")
        assert [getattr(owner, name) for owner, name in flags] == [True, True, True]
    finally:
        for (owner, name), value in zip(flags, old, strict=True):
            setattr(owner, name, value)


def test_mfu_is_against_the_peak_of_the_precision_used(monkeypatch):
    """fp32 runs its matmuls on TF32 tensor cores, whose peak is half bf16's: an fp32 run
    measured against the bf16 peak would read 2x low."""
    import torch

    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA A100-SXM4-80GB")
    gpu = torch.device("cuda", 0)
    assert runtime.peak_flops(gpu, "bf16") == pytest.approx(312e12)
    assert runtime.peak_flops(gpu, "fp32") == pytest.approx(156e12)
    assert runtime.peak_flops(torch.device("cpu"), "fp32") is None


def test_process_group_timeout_covers_a_checkpoint_write():
    """Never below 30 min; at 20 MB/s a ViT-22B-sized state (16 bytes a parameter) needs
    more, and gets twice its write time."""
    assert runtime.process_group_timeout(86_000_000).total_seconds() == 1800
    assert runtime.process_group_timeout(22_000_000_000).total_seconds() == pytest.approx(
        2 * 16 * 22e9 / 20e6
    )


def test_profiles_use_current_nccl_variable_names(tmp_path):
    shipped = sorted((Path(__file__).resolve().parents[1] / "slurm" / "profiles").glob("*.yaml"))
    assert shipped
    for path in shipped:
        load_profile(path)  # each shipped profile loads: none sets a deprecated name
    old = tmp_path / "old.yaml"
    old.write_text(
        yaml.safe_dump(
            {"setup": ["export NCCL_ASYNC_ERROR_HANDLING=1", "export NCCL_BLOCKING_WAIT=1"]}
        )
    )
    with pytest.raises(ValueError) as refused:
        load_profile(old)
    message = str(refused.value)
    assert (
        "NCCL_ASYNC_ERROR_HANDLING is deprecated since PyTorch 2.2; use TORCH_NCCL_ASYNC_ERROR_HANDLING"
        in message
    )
    assert "use TORCH_NCCL_BLOCKING_WAIT" in message


def test_gloo_is_pinned_to_the_interface_that_reaches_the_master():
    """The interface holding the address this machine reaches MASTER_ADDR from: loopback
    for itself, the interface of one of its own addresses for that address (what a
    node of the two-node cluster sees); an explicit GLOO_SOCKET_IFNAME and a single
    process are left alone, and an address that does not resolve pins nothing."""
    import psutil

    assert runtime.interface_towards("127.0.0.1") == "lo"
    own = [
        (name, a.address)
        for name, addresses in psutil.net_if_addrs().items()
        for a in addresses
        if a.family.name == "AF_INET" and not a.address.startswith("127.")
    ]
    for name, address in own:
        assert runtime.interface_towards(address) == name
    env = {"WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1"}
    assert runtime.pin_gloo_interface(env) == "lo" and env["GLOO_SOCKET_IFNAME"] == "lo"
    chosen = {"WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "GLOO_SOCKET_IFNAME": "eth9"}
    assert runtime.pin_gloo_interface(chosen) is None and chosen["GLOO_SOCKET_IFNAME"] == "eth9"
    alone = {"WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1"}
    assert runtime.pin_gloo_interface(alone) is None and "GLOO_SOCKET_IFNAME" not in alone
    lost = {"WORLD_SIZE": "2", "MASTER_ADDR": "no-such-host.invalid"}
    assert runtime.pin_gloo_interface(lost) is None and "GLOO_SOCKET_IFNAME" not in lost


def test_loader_workers_are_chosen_per_machine(monkeypatch):
    monkeypatch.setattr(loader_workers, "available_cpus", lambda: 96)
    monkeypatch.delenv("SLURM_CPUS_PER_TASK", raising=False)
    monkeypatch.delenv(loader_workers.CELL_CPUS_ENV, raising=False)
    auto = loader_workers.auto_num_workers
    assert auto(processes_on_node=8, accelerated=True) == 11  # 12 CPUs each, one trains
    assert auto(processes_on_node=1, accelerated=True) == loader_workers.MAX_AUTO_WORKERS
    assert auto(processes_on_node=8, accelerated=False) == 0  # CPU runs train on every core
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "4")  # what SLURM gave this task
    assert auto(processes_on_node=8, accelerated=True) == 3
    with pytest.raises(ValueError, match="data.num_workers must be non-negative, got -1"):
        resolve(tiny_config(data={"num_workers": -1}))


_SHARES = """
import json, os, sys
from vitscale.data.workers import CELL_CPUS_ENV, auto_num_workers, cpu_share
for cpus, env in json.loads(sys.argv[1]):
    os.sched_setaffinity(0, cpus or os.sched_getaffinity(os.getppid()))  # what taskset -c does
    for key in ("SLURM_CPUS_PER_TASK", CELL_CPUS_ENV):
        os.environ.pop(key, None)
    os.environ.update(env)
    local = int(os.environ["LOCAL_WORLD_SIZE"])
    print(json.dumps([cpu_share(processes_on_node=local), auto_num_workers(processes_on_node=local, accelerated=True)]))
"""


def test_a_process_bound_to_its_cpus_keeps_them():
    """srun (or taskset) binds each task to its own CPUs: they are its share already, not to
    be divided again between the node's tasks; CPUs the node's processes share are. One
    process, its affinity set case after case as taskset sets it, under the test's."""
    cpus = sorted(os.sched_getaffinity(0))
    cases = [
        ([cpus[0]], {"SLURM_CPUS_PER_TASK": "1", "LOCAL_WORLD_SIZE": "2"}),  # srun, 1 per task
        (cpus[:2], {"SLURM_CPUS_PER_TASK": "2", "LOCAL_WORLD_SIZE": "2"}),  # srun, 2 per task
        (cpus[:2], {"LOCAL_WORLD_SIZE": "2"}),  # taskset -c: narrower than the parent's if > 2
        (None, {"LOCAL_WORLD_SIZE": "2"}),  # torchrun's workers: the agent's CPUs, shared
    ]
    done = subprocess.run(
        [sys.executable, "-c", _SHARES, json.dumps(cases)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    shares = [json.loads(line) for line in done.stdout.splitlines()]
    assert shares[0] == [1, 0]  # dividing again: 0 CPUs
    assert shares[1] == [2, 1]  # one for the loop, one loader worker (dividing again: none)
    assert shares[2] == ([2, 1] if len(cpus) > 2 else [1, 0])
    assert shares[3][0] == max(1, len(cpus) // 2)


def test_the_local_executor_splits_the_machine_between_its_cells(monkeypatch):
    """``--workers 4 --processes 2`` on 16 CPUs: 4 per cell, 2 per process, as threads and
    as loader workers (one beside the loop), not the 8 per process of a cell alone."""
    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    env = worker_env(workers=4, processes=2)
    assert env["OMP_NUM_THREADS"] == "2" and env[loader_workers.CELL_CPUS_ENV] == "4"
    monkeypatch.setattr(loader_workers, "available_cpus", lambda: 16)
    monkeypatch.setattr(loader_workers, "_bound_alone", lambda cpus: False)
    monkeypatch.delenv("SLURM_CPUS_PER_TASK", raising=False)
    monkeypatch.delenv(loader_workers.CELL_CPUS_ENV, raising=False)
    assert loader_workers.cpu_share(processes_on_node=2) == 8  # a cell alone
    monkeypatch.setenv(loader_workers.CELL_CPUS_ENV, env[loader_workers.CELL_CPUS_ENV])
    assert loader_workers.cpu_share(processes_on_node=2) == 2
    assert loader_workers.auto_num_workers(processes_on_node=2, accelerated=True) == 1


_FORK_READY = """
from vitscale.data import build_dataset, build_loader
from vitscale.data.synthetic import _fused
ds = build_dataset("synthetic-glyphs", "train", image_size=32, subset=64)
assert "module" not in _fused._state
loader = build_loader(ds, batch_size=8, seed=0, num_workers=2)
print("built before fork:", "module" in _fused._state and _fused._state["module"] is not None)
images, labels = next(iter(loader))
print("batch:", tuple(images.shape))
"""


def test_the_fused_renderer_is_built_before_workers_fork():
    """Workers inherit the compiled renderer instead of each building or loading it."""
    done = subprocess.run(
        [sys.executable, "-c", _FORK_READY], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "built before fork: True" in done.stdout and "batch: (8, 3, 32, 32)" in done.stdout


def test_local_workers_get_their_own_gpus():
    assert gpu_groups([], workers=2, processes=1) is None  # a CPU machine
    assert gpu_groups(["0", "1", "2", "3"], workers=2, processes=2) == [["0", "1"], ["2", "3"]]
    assert gpu_groups(["4", "6"], workers=2, processes=1) == [["4"], ["6"]]
    with pytest.raises(
        ValueError,
        match=r"--workers 3 x --processes 1 needs 3 GPUs, and this machine has 2 \(0,1\)",
    ):
        gpu_groups(["0", "1"], workers=3, processes=1)


def test_capped_evaluations_read_a_seeded_random_sample():
    """A class-sorted split (folders, torchvision sets): the first 50 of 1,000 images are
    5 classes of 100; the sample reads nearly all of them, the same for the same seed."""
    labels = np.repeat(np.arange(100), 10)
    sample = evaluation_sample(1000, 50, seed=0)
    assert len(set(sample)) == 50 and sample == sorted(sample)
    assert len(set(labels[sample])) > 35 and len(set(labels[:50])) == 5
    assert sample == evaluation_sample(1000, 50, seed=0) != evaluation_sample(1000, 50, seed=1)
    assert evaluation_sample(30, 50, seed=0) == list(range(30))  # fewer than asked: all


def test_upstream_top1_reads_the_sample(tmp_path):
    from vitscale.evals.transfer import TransferEvaluator

    cfg = resolve(tiny_config(eval={"fewshot": {"datasets": []}, "upstream": {"examples": 40}}))
    accelerator, _ = runtime.make_accelerator(precision="fp32")
    evaluator = TransferEvaluator(
        cfg, accelerator=accelerator, upstream_num_classes=256, batch_size=cfg.eval.batch_size
    )
    test = build_dataset("synthetic", "test", image_size=32)
    assert evaluator.upstream.indices == evaluation_sample(len(test), 40, seed=cfg.seed)
    assert evaluator.upstream.indices != list(range(40))


@pytest.mark.parametrize(
    "model, on_gpu", [("BiT-R11x0.5", True), ("R50x1+ViT-S/16", True), ("ViT-Pico/4", False)]
)
def test_channels_last_by_default_where_a_convolution_trunk_runs_on_a_gpu(model, on_gpu):
    import torch

    from vitscale.train.hardware import channels_last_for

    cfg = resolve(tiny_config(model={"name": model}, data={"image_size": 64}))
    assert channels_last_for(cfg, device=torch.device("cuda")) is on_gpu
    assert channels_last_for(cfg, device=torch.device("cpu")) is False
    forced = resolve(
        tiny_config(model={"name": model}, data={"image_size": 64}, train={"channels_last": True})
    )
    assert channels_last_for(forced, device=torch.device("cpu")) is True
