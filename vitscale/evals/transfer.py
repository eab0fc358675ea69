"""What is measured on a model during pre-training: few-shot linear and upstream top-1
(fine-tuning, which trains, is :mod:`vitscale.train.finetune`).

The datasets, few-shot samples and test sets are fixed once when the evaluator is built,
so every evaluation during training sees the same images (decoded once and kept while
they fit, :class:`~vitscale.evals.features.EvalImages`), and features are extracted once
per evaluation and reused for every k and seed (paper Sec. 4.1; docs/protocol.md).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass

import torch

from .. import record as rf
from ..config import Config
from ..data import build_dataset, fewshot_indices, rank0_downloads_first
from .features import EVAL_CACHE_BYTES, Budget, EvalImages, apply, evaluation_sample, labels_of
from .fewshot import project, ridge_fewshot_accuracy


class EvaluationStopped(Exception):
    """A stop signal came during an evaluation: it was left before its next dataset, a
    point every process reaches together (the trainer checkpoints and runs the whole
    evaluation again when it resumes)."""


@dataclass
class _FewShotSet:
    name: str
    num_classes: int
    pool_images: EvalImages  # the union of all k-shot samples: features extracted once
    test_images: EvalImages
    rows: dict[tuple[int, int], torch.Tensor]  # (k, seed) -> rows of the pool's features


class TransferEvaluator:
    def __init__(
        self,
        cfg: Config,
        *,
        accelerator,
        upstream_num_classes: int,
        batch_size: int,
        num_workers: int = 0,
    ) -> None:
        """``batch_size``: per process, ``eval.batch_size`` as fitted to the device
        (:func:`vitscale.train.hardware.eval_batch_for`)."""
        self.cfg = cfg
        self.accelerator = accelerator
        self.num_workers = num_workers
        d = cfg.data
        self._build = dict(
            root=d.root, image_size=d.image_size, download=d.download, holdout=d.holdout
        )
        self._images = dict(
            batch_size=batch_size,
            accelerator=accelerator,
            budget=Budget(EVAL_CACHE_BYTES),
            num_workers=num_workers,
        )
        fs = cfg.eval.fewshot
        self.fewshot = [
            self._fewshot_set(name, fs.shots, fs.seeds, fs.test_examples) for name in fs.datasets
        ]
        self.upstream = None
        if cfg.eval.upstream.examples:
            with rank0_downloads_first(accelerator, download=d.download):
                test = build_dataset(d.dataset, "test", seed=cfg.seed, **self._build)
            sample = evaluation_sample(len(test), cfg.eval.upstream.examples, seed=cfg.seed)
            self.upstream = EvalImages(test, sample, **self._images)

    def _fewshot_set(
        self, name: str, shots: list[int], seeds: int, test_examples: int | None
    ) -> _FewShotSet:
        # Few-shot features are of the evaluation view (resize + centre crop), never augmented.
        with rank0_downloads_first(self.accelerator, download=self.cfg.data.download):
            train = build_dataset(name, "train", seed=self.cfg.seed, augment=False, **self._build)
            test = build_dataset(name, "test", seed=self.cfg.seed, **self._build)
        samples = {}
        for seed in range(seeds):
            # class-interleaved rounds: the first k * C indices hold k of every class
            largest = fewshot_indices(
                labels_of(train, range(len(train))).numpy(), max(shots), seed=seed
            )
            for k in shots:
                samples[(k, seed)] = largest[: k * train.num_classes].tolist()
        pool = sorted({i for idx in samples.values() for i in idx})
        row_of = {index: row for row, index in enumerate(pool)}
        tested = evaluation_sample(len(test), test_examples, seed=self.cfg.seed)
        return _FewShotSet(
            name,
            train.num_classes,
            pool_images=EvalImages(train, pool, **self._images),
            test_images=EvalImages(test, tested, **self._images),
            rows={ks: torch.tensor([row_of[i] for i in idx]) for ks, idx in samples.items()},
        )

    @torch.no_grad()
    def run(
        self, model: torch.nn.Module, *, stop: Callable[[], bool] | None = None
    ) -> dict[str, float]:
        """Few-shot accuracies (each seed and their mean) and upstream top-1, as fractions.
        ``stop`` (every process's same answer) is asked before each dataset: True raises
        :class:`EvaluationStopped`, so a long evaluation does not outlast a preemption's
        warning."""
        metrics: dict[str, float] = {}
        kw = dict(accelerator=self.accelerator)

        def check() -> None:
            if stop is not None and stop():
                raise EvaluationStopped

        for fs in self.fewshot:
            check()
            pool_x, pool_y = apply(model.pre_logits, fs.pool_images, **kw)
            test_x, test_y = apply(model.pre_logits, fs.test_images, **kw)
            if width := self.cfg.eval.fewshot.width:  # the same width for every model
                pool_x, test_x = project(pool_x, width), project(test_x, width)
            per_k: dict[int, list[float]] = {}
            for (k, seed), rows in fs.rows.items():
                acc = ridge_fewshot_accuracy(
                    pool_x[rows],
                    pool_y[rows],
                    test_x,
                    test_y,
                    num_classes=fs.num_classes,
                    l2_reg=self.cfg.eval.fewshot.l2_reg,
                )
                metrics[f"{rf.fewshot_key(fs.name, k)}/seed{seed}"] = acc
                per_k.setdefault(k, []).append(acc)
            for k, accs in per_k.items():
                metrics[rf.fewshot_key(fs.name, k)] = statistics.fmean(accs)
        if self.upstream is not None:
            check()
            logits, labels = apply(model, self.upstream, **kw)
            top = logits.argmax(dim=1)
            if labels.ndim == 2:  # multi-label: the top prediction is one of the labels (prec@1)
                hits = labels[torch.arange(len(top)), top] > 0
            else:
                hits = top == labels
            metrics[rf.UPSTREAM_TOP1] = hits.float().mean().item()
        return metrics
