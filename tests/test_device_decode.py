"""The device-decoding path (vitscale.data.shards.device) is the workers': the same
Inception crop and flip from the same seed, the same pixels on the CPU for every kind of
image, bad images replaced alike; on a GPU (recorded: a fake ``torch.cuda``) the next batch
is drawn beside the step without the host waiting, and nvJPEG writes no memory in use."""

from __future__ import annotations

import contextlib

import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torchvision.transforms import v2

from vitscale.data.shards.dataset import EncodedBatch
from vitscale.data.shards.device import DeviceDecoder, flipped, inception_crop
from vitscale.data.transforms import (
    INCEPTION_AREA,
    INCEPTION_RATIO,
    eval_transform,
    train_transform,
)

from .helpers.configs import tiny_config
from .helpers.datasets import bad_set, image_kinds, jpeg_bytes, write_jpeg_shards


@settings(max_examples=200, deadline=None)
@given(
    seed=st.integers(0, 2**64 - 1),
    height=st.integers(1, 600),
    width=st.integers(1, 600),
)
def test_the_crop_and_flip_are_torchvisions_draws(seed, height, width):
    """torchvision's RandomResizedCrop and RandomHorizontalFlip, drawing from the global
    generator seeded with ``seed`` (the workers' path), are the oracle."""
    crop = v2.RandomResizedCrop(8, scale=INCEPTION_AREA, ratio=INCEPTION_RATIO)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        expected = crop.make_params([torch.empty(1, 1, 1).expand(3, height, width)])
        expected_flip = bool(torch.rand(1) < 0.5)
    generator = torch.Generator().manual_seed(seed)
    top, left, h, w = inception_crop(generator, height, width)
    assert (top, left, h, w) == tuple(expected[k] for k in ("top", "left", "height", "width"))
    assert flipped(generator) == expected_flip


def _encoded(indices: list[int], seeds: list[int], size=(40, 30)) -> EncodedBatch:
    data = [torch.frombuffer(bytearray(jpeg_bytes(i, size)), dtype=torch.uint8) for i in indices]
    return EncodedBatch(
        images=torch.cat(data),
        targets=torch.tensor(indices),
        lengths=torch.tensor([len(d) for d in data]),
        seeds=tuple(seeds),
    )


def test_on_the_cpu_the_device_path_draws_the_workers_pixels():
    from vitscale.data.shards.read import decode

    seeds = [3, 2**63 + 5, 17]
    batch = _encoded([0, 1, 2], seeds)
    for augment, transform in ((True, train_transform(16)), (False, eval_transform(16))):
        out = DeviceDecoder(image_size=16, augment=augment, crop=True, device="cpu")(batch)
        for k, (i, seed) in enumerate(zip([0, 1, 2], seeds, strict=True)):
            with torch.random.fork_rng(devices=[]):
                torch.default_generator.manual_seed(seed)
                expected = transform(decode(jpeg_bytes(i, (40, 30))))
            assert torch.equal(out.images[k], expected), (augment, k)
        assert torch.equal(out.targets, batch.targets)


# ------------------------------------------------------------------ on a GPU, recorded


class _Stream:
    def __init__(self, gpu: _GPU, name: str) -> None:
        self.gpu, self.name = gpu, name

    def wait_stream(self, other: _Stream) -> None:
        self.gpu.log.append(("wait", self.name, other.name))

    def synchronize(self) -> None:
        self.gpu.log.append(("synchronize", self.name))


class _GPU:
    """``torch.cuda`` as the decoder sees it on a GPU, recorded: every stream made, waited
    for and made current, every copy to the device (blocking or not, from pinned memory or
    not), every host sync, every tensor made from host data for the device, every kernel
    (aten op) with the stream it was queued on, and nvJPEG's calls. The tensors stay on the
    CPU; nvJPEG is libjpeg-turbo, refusing what nvJPEG refuses (4-component JPEGs)."""

    def __init__(self, monkeypatch) -> None:
        import torchvision.io
        from torch.utils._python_dispatch import TorchDispatchMode

        self.log: list[tuple] = []
        self.main = _Stream(self, "main")
        self.current = self.main
        self.nvjpeg_inputs: list[bytes] = []
        self.nvjpeg_outputs: list[set[int]] = []  # id() of what each call returned
        gpu, real_to, real_decode = self, torch.Tensor.to, torchvision.io.decode_jpeg
        streams = iter(range(1, 100))

        @contextlib.contextmanager
        def stream(s: _Stream):
            previous, gpu.current = gpu.current, s
            try:
                yield
            finally:
                gpu.current = previous

        def to(tensor, *args, **kwargs):
            target = kwargs.get(
                "device", next((a for a in args if isinstance(a, str | torch.device)), None)
            )
            if target is None or torch.device(target).type != "cuda":
                return real_to(tensor, *args, **kwargs)
            pinned = getattr(tensor, "_pinned", False)
            gpu.log.append(("copy", gpu.current.name, bool(kwargs.get("non_blocking")), pinned))
            return tensor

        def pin_memory(tensor):
            tensor._pinned = True
            return tensor

        def from_host(real):
            def made(*args, **kwargs):
                if "device" in kwargs:  # host data put where the images are: a copy there
                    gpu.log.append(("from host", gpu.current.name))
                return real(*args, **kwargs)

            return made

        def nvjpeg(data, mode, device):
            assert torch.device(device).type == "cuda"
            gpu.log.append(("nvjpeg", gpu.current.name))
            with Kernels.off():  # nvJPEG's own work, not a kernel on the current stream
                gpu.nvjpeg_inputs += [d.numpy().tobytes() for d in data]
                if any(_components(d.numpy().tobytes()) == 4 for d in data):
                    raise RuntimeError("nvjpegJpegStream: NVJPEG_STATUS_JPEG_NOT_SUPPORTED")
                out = real_decode(data, mode=mode, device="cpu")
            gpu.nvjpeg_outputs.append({id(t) for t in out})
            return out

        class Kernels(TorchDispatchMode):
            on = True

            @classmethod
            @contextlib.contextmanager
            def off(cls):
                cls.on = False
                try:
                    yield
                finally:
                    cls.on = True

            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                if Kernels.on:
                    gpu.log.append(("kernel", gpu.current.name))
                return func(*args, **(kwargs or {}))

        patch = monkeypatch.setattr
        patch(torch.cuda, "Stream", lambda device=None: _Stream(gpu, f"s{next(streams)}"))
        patch(torch.cuda, "current_stream", lambda device=None: gpu.current)
        patch(torch.cuda, "stream", stream)
        patch(torch.cuda, "synchronize", lambda device=None: gpu.log.append(("synchronize",)))
        patch(torch.Tensor, "to", to)
        patch(torch.Tensor, "pin_memory", pin_memory)
        patch(torch.Tensor, "record_stream", lambda t, s: gpu.log.append(("record", id(t), s.name)))
        patch(torch, "as_tensor", from_host(torch.as_tensor))
        patch(torch, "tensor", from_host(torch.tensor))
        patch(torchvision.io, "decode_jpeg", nvjpeg)
        self.kernels = Kernels

    def decode(self, decoder: DeviceDecoder, batch: EncodedBatch):
        """``decoder(batch)`` on this GPU: its kernels recorded, its log from here on. The
        targets are pinned, as the loader's are."""
        batch.targets._pinned = True
        start = len(self.log)
        with self.kernels():
            out = decoder(batch)
        return out, self.log[start:]


def _components(data: bytes) -> int | None:
    """A JPEG's component count, read off its frame header (SOF0-2)."""
    i = 2
    while i + 9 < len(data):
        if data[i + 1] in (0xC0, 0xC1, 0xC2):
            return data[i + 9]
        i += 2 + (data[i + 2] << 8 | data[i + 3])
    return None


def _batch_of(images: list[bytes], seeds: list[int] | None = None) -> EncodedBatch:
    data = [torch.frombuffer(bytearray(d), dtype=torch.uint8) for d in images]
    n = len(images)
    return EncodedBatch(
        images=torch.cat(data),
        targets=torch.arange(n),
        lengths=torch.tensor([len(d) for d in data]),
        seeds=tuple(seeds or range(n)),
        where=tuple((f"train-{i:06d}.tar", f"img{i:05d}") for i in range(n)),
        positions=tuple(range(n)),
    )


def test_on_a_gpu_the_next_batch_is_drawn_beside_the_step_and_nvjpeg_writes_no_memory_in_use(
    monkeypatch,
):
    """The trainer asks for batch i + 1 right after queuing step i, so
    the side stream must not wait for the main one (it would start only when step i ends),
    and nothing inside it may block the host (a blocking copy, a sync, a tensor made from
    host data as ``v2.Normalize`` makes its mean: each waits for the side stream, which
    waits for the step). nvJPEG writes on a private stream that is ordered after nothing,
    into memory the caching allocator hands out on the caller's current stream (pytorch/
    vision PR 9606): that stream must have no kernels of its own queued (so no block still
    being read is handed out), and what nvJPEG wrote must be marked used by the stream that
    reads it (``record_stream``), which waits for the decode first."""
    gpu = _GPU(monkeypatch)
    kinds = image_kinds()
    decoder = DeviceDecoder(image_size=16, augment=True, crop=True, device="cuda:0")
    for images in ([kinds["jpeg"], kinds["rgba"], kinds["progressive"]], [kinds["jpeg"]] * 2):
        out, log = gpu.decode(decoder, _batch_of(images))
        (augment,) = {
            s for kind, waiter, s in (e for e in log if e[0] == "wait") if waiter == "main"
        }
        streams = {e[1] for e in log if e[0] in ("kernel", "copy", "from host")}
        assert ("wait", augment, "main") not in log, "the side stream waits for the step"
        assert all(e[2:] == (True, True) for e in log if e[0] == "copy"), log
        assert not [e for e in log if e[0] in ("synchronize", "from host")], log
        (call,) = [i for i, e in enumerate(log) if e[0] == "nvjpeg"]
        nvjpeg, written = log[call][1], gpu.nvjpeg_outputs[-1]
        assert nvjpeg not in ("main", augment) and nvjpeg not in streams, (
            "nvJPEG allocates on a stream with kernels queued: it may write into their inputs"
        )
        reads = next(i for i, e in enumerate(log) if i > call and e == ("kernel", augment))
        assert call < log.index(("wait", augment, nvjpeg)) < reads
        marked = {e[1] for e in log if e[0] == "record" and e[2] == augment}
        assert written <= marked
        assert {
            e[1:] for e in log if e[0] == "record" and e[1] in (id(out.images), id(out.targets))
        } == {
            (id(out.images), "main"),
            (id(out.targets), "main"),
        }


def test_on_a_gpu_what_nvjpeg_cannot_decode_goes_to_the_cpu_said_once(monkeypatch, capsys):
    """A CMYK JPEG in a batch made nvJPEG refuse the whole batch, which
    was then decoded again on one CPU thread, silently. Now nvJPEG gets only what it decodes
    (read off each JPEG's frame header), the rest is decoded on the CPU as the workers
    decode it, the same images either way, and the first time it happens is said once."""
    gpu = _GPU(monkeypatch)
    kinds = image_kinds()
    names = ["jpeg", "cmyk", "grayscale", "progressive"]
    decoder = DeviceDecoder(image_size=16, augment=True, crop=True, device="cuda:0")
    for _ in range(2):
        out, _ = gpu.decode(decoder, _batch_of([kinds[k] for k in names]))
    assert kinds["cmyk"] not in gpu.nvjpeg_inputs, "nvJPEG was handed the CMYK JPEG"
    assert sorted(gpu.nvjpeg_inputs) == sorted([kinds[k] for k in names if k != "cmyk"] * 2)
    (warning,) = capsys.readouterr().err.strip().splitlines()
    assert warning.startswith("warning: ") and "'img00001'" in warning and "CPU" in warning
    monkeypatch.undo()
    cpu = DeviceDecoder(image_size=16, augment=True, crop=True, device="cpu")
    assert torch.equal(out.images, cpu(_batch_of([kinds[k] for k in names])).images)


def test_the_device_path_decodes_every_image_the_workers_decode_alike():
    """A 16-bit PNG among 8-bit JPEGs made ``torch.stack`` raise (no
    uint16 promotion), outside any message naming the image. Every kind the workers decode
    (:func:`image_kinds`) gives the workers' pixels on the CPU."""
    from vitscale.data.shards.read import decode

    kinds = image_kinds()
    out = DeviceDecoder(image_size=16, augment=True, crop=True, device="cpu")(
        _batch_of(list(kinds.values()))
    )
    for seed, (name, data) in enumerate(kinds.items()):
        with torch.random.fork_rng(devices=[]):
            torch.default_generator.manual_seed(seed)
            expected = train_transform(16)(decode(data))
        assert torch.equal(out.images[seed], expected), name


def _device_set(root, **data):
    """``(config, train set, the trainer's decoder)`` of a sharded set decoded on the CPU."""
    from vitscale.config import resolve
    from vitscale.data import build_dataset
    from vitscale.train.run import _device_decoder

    data = {"dataset": f"shards:{root}", "image_size": 16, "subset": None, **data}
    cfg = resolve(tiny_config(data=data))
    train_set = build_dataset(
        cfg.data.dataset,
        "train",
        image_size=16,
        seed=cfg.seed,
        skip_bad_samples=cfg.data.skip_bad_samples,
    )
    return cfg, train_set, _device_decoder(cfg, train_set, torch.device("cpu"))


def test_a_bad_image_on_the_device_path_is_replaced_as_the_workers_replace_it(tmp_path):
    """``data.skip_bad_samples`` did not apply to an image found broken
    only when the trainer decoded it: a GPU run of a cell failed where the CPU run of the
    same cell id replaced the image and went on. Now it is replaced by the same example
    (the next stream position's, with its own crop), counted and reported alike."""
    root = bad_set(tmp_path / "sh", {"jpg": jpeg_bytes(1)[:50], "cls": b"1"})
    cfg, train_set, decoder = _device_set(root, decode="device", skip_bad_samples=2)
    _, workers_set, _ = _device_set(root, decode="workers", skip_bad_samples=2)
    positions = list(range(8))  # the whole epoch: the bad example is in it
    expected = workers_set.stream(seed=cfg.seed).__getitems__(positions)
    got = decoder(train_set.stream(seed=cfg.seed).__getitems__(positions))
    assert len(expected.skipped) == 1 and "img00099" in expected.skipped[0]
    assert got.skipped == expected.skipped
    assert torch.equal(got.targets, expected.targets)
    assert torch.equal(got.images, expected.images)


def test_auto_decodes_on_the_workers_until_a_gpu_is_measured_faster(tmp_path, monkeypatch):
    """``data.decode: auto`` put every sharded GPU run on the device path
    with no measurement behind it; the one measured (an H100 with 16 cores) decoded
    1,379 img/s there against the workers' 2,659. ``auto`` follows the measurements."""
    from vitscale.data import shards

    root = write_jpeg_shards(tmp_path / "sh", shards=1, per_shard=4)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H100 80GB HBM3")
    cfg, train_set, _ = _device_set(root)
    from vitscale.train.run import _device_decoder

    assert cfg.data.decode == "auto"
    assert _device_decoder(cfg, train_set, torch.device("cuda", 0)) is None
    monkeypatch.setattr(shards, "DEVICE_DECODE_FASTER", ("H100",))  # were it measured faster
    assert _device_decoder(cfg, train_set, torch.device("cuda", 0)) is not None
