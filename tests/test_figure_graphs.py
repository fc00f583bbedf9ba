"""The fast checker's figures replayed from CUDA graphs: the same figures and verdicts as the eager
path, captured only where and when :class:`reference.figure_graphs.FigureGraphs` says."""

from __future__ import annotations

import pytest
import torch

from reference import generate_input, verdict
from reference.checker import fast_figures
from reference.figure_graphs import FigureGraphs


def _factored(batch: int, n: int, seed: int, device: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """An input and geqrf's factors, H made row-major as the evaluator's stacked copies are."""
    a = generate_input(batch, n, 1, seed, device=device)
    h, tau = torch.geqrf(a)
    return a, h.contiguous(), tau


def test_cpu_batches_are_computed_eagerly_and_never_captured() -> None:
    graphs = FigureGraphs()
    a, h, tau = _factored(4, 16, 3, "cpu")
    for _ in range(3):
        assert torch.equal(graphs(a, h, tau, False), fast_figures(a, h, tau, False))
    assert graphs.captured == 0


def test_a_verdict_through_the_graphs_is_the_eager_one_on_the_cpu() -> None:
    a, h, tau = _factored(3, 12, 5, "cpu")
    graphs = FigureGraphs()
    for output in ((h, tau), (torch.zeros_like(h), tau)):
        assert verdict(a, output, "fast", False, graphs) == verdict(a, output, "fast", False)


@pytest.mark.gpu
def test_the_second_check_of_a_shape_captures_and_later_ones_replay_the_eager_figures() -> None:
    graphs = FigureGraphs()
    inputs = [_factored(1000, 32, seed, "cuda") for seed in (1, 2, 3, 4)]
    for k, (a, h, tau) in enumerate(inputs):
        figures = graphs(a, h, tau, False).clone()  # a replay's figures live in the graph's buffer
        assert graphs.captured == (0 if k == 0 else 1)
        assert torch.equal(figures, fast_figures(a, h, tau, False)), k
    assert inputs[0][0].numel() <= graphs.max_elements


@pytest.mark.gpu
def test_a_replayed_failure_is_the_eager_failure() -> None:
    graphs = FigureGraphs()
    a, h, tau = _factored(1000, 32, 7, "cuda")
    verdict(a, (h, tau), "fast", False, graphs)
    broken = h.clone()
    broken[17, 5, 9] += 1.0  # one matrix's R off by far more than the factor gate allows
    replayed = verdict(a, (broken, tau), "fast", False, graphs)
    assert graphs.captured == 1
    assert not replayed.passed
    assert replayed == verdict(a, (broken, tau), "fast", False)


@pytest.mark.gpu
def test_layouts_and_large_batches_are_kept_apart() -> None:
    graphs = FigureGraphs(max_elements=50 * 32 * 32, capacity=1)
    a, h, tau = _factored(50, 32, 9, "cuda")
    column_major = h.transpose(-1, -2).contiguous().transpose(-1, -2)  # geqrf's own layout
    for _ in range(2):
        graphs(a, h, tau, False)
    for _ in range(2):
        figures = graphs(a, column_major, tau, False).clone()
    assert torch.equal(figures, fast_figures(a, column_major, tau, False))
    assert graphs.captured == 1  # the row-major graph was dropped for the column-major one
    big = _factored(51, 32, 10, "cuda")
    for _ in range(3):
        assert torch.equal(graphs(*big, False), fast_figures(*big, False))
    assert graphs.captured == 1


@pytest.mark.gpu
def test_a_refused_capture_leaves_every_check_eager(monkeypatch) -> None:
    def refused(*args: object, **kwargs: object) -> object:
        raise RuntimeError("operation not permitted when stream is capturing")

    monkeypatch.setattr(torch.cuda, "graph", refused)
    graphs = FigureGraphs()
    a, h, tau = _factored(100, 32, 11, "cuda")
    for _ in range(3):
        assert torch.equal(graphs(a, h, tau, False), fast_figures(a, h, tau, False))
    assert graphs.captured == 0


@pytest.mark.gpu
def test_a_layout_a_copy_would_not_keep_stays_eager() -> None:
    graphs = FigureGraphs()
    a, h, tau = _factored(100, 32, 13, "cuda")
    wide = torch.zeros(100, 32, 64, device="cuda")
    wide[..., :32] = h
    strided = wide[..., :32]  # rows 64 floats apart: not dense, so a clone would be contiguous
    for _ in range(3):
        assert torch.equal(graphs(a, strided, tau, False), fast_figures(a, strided, tau, False))
    assert graphs.captured == 0
    for _ in range(2):
        graphs(a, h, tau, False)
    assert graphs.captured == 1  # the dense layout of the same shape is still captured
