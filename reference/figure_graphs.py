"""The fast checker's device work replayed from CUDA graphs, for a caller checking one shape often.

A fast check of small matrices is launch-bound: at 20x32 an evaluator's timed repeat checks its 50
outputs as one batch of 1000 32x32 matrices, about 80 launches (Q's blocks, T's doubling rounds,
the residual kernels, the reductions) for a few microseconds of arithmetic each. The launches
depend only on the batch's shape (:func:`reference.checker.fast_figures`), so after the second
check of a shape its figures are captured once as a CUDA graph and replayed: the inputs are copied
into the graph's buffers, one replay queues the rest. The kernels are the same ones with the same
operands, so the figures, and the verdicts, are those of the eager path.

Only batches of at most ``max_elements`` floats a tensor are captured, the sizes replays were
measured at; a graph holds its intermediates' memory for as long as it is kept.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import torch

from reference.checker import fast_figures

__all__ = ["MAX_ELEMENTS", "FigureGraphs"]

# 2^21 floats a tensor (8 MiB): room for the 1000x32 batch of a 20x32 repeat (a million floats),
# whose check a replay makes several times faster; the next repeats' stacked batches (2000x176,
# 520x352) are no faster replayed, and each such graph holds about 0.5 GiB
# (reports/h100/2026-12-07-blocked_wy-outputs-in-place.md, last section).
MAX_ELEMENTS = 1 << 21

_Key = tuple[torch.device, torch.Size, tuple[tuple[int, ...], ...], bool]


@dataclass(frozen=True)
class _Captured:
    """One shape's graph and the static tensors it reads and writes."""

    graph: torch.cuda.CUDAGraph
    a: torch.Tensor
    h: torch.Tensor
    tau: torch.Tensor
    figures: torch.Tensor


class FigureGraphs:
    """A ``figures_of`` for :func:`reference.checker.verdict` that replays captured graphs.

    A shape's first check runs eagerly (a test stage checks most shapes once, and a capture costs
    more than one eager check); its second captures the graph, which every later check replays.
    At most ``capacity`` graphs are kept, the least recently used dropped first, so a run over
    many shapes holds only a few graphs' memory.
    """

    def __init__(self, max_elements: int = MAX_ELEMENTS, capacity: int = 4) -> None:
        self.max_elements = max_elements
        self.capacity = capacity
        self._seen: set[_Key] = set()
        self._eager: set[_Key] = set()  # layouts a copy would not keep: checked eagerly always
        self._refused = False  # the device refused a capture: nothing is captured from then on
        self._captured: OrderedDict[_Key, _Captured] = OrderedDict()

    @property
    def captured(self) -> int:
        """How many graphs are held now."""
        return len(self._captured)

    def __call__(self, a: torch.Tensor, h: torch.Tensor, tau: torch.Tensor, reconstruction: bool) -> torch.Tensor:
        if not self._replayable(a, h, tau):
            return fast_figures(a, h, tau, reconstruction)
        # The layouts too: cuBLAS may round a transposed operand's product differently, and a
        # replay must give what the eager path gives for the same tensors.
        key = (a.device, a.shape, (a.stride(), h.stride(), tau.stride()), reconstruction)
        captured = self._captured.get(key)
        if captured is None:
            if key not in self._seen or key in self._eager:
                self._seen.add(key)
                return fast_figures(a, h, tau, reconstruction)
            captured = self._capture(key, a, h, tau, reconstruction)
            if captured is None:
                return fast_figures(a, h, tau, reconstruction)
            self._captured[key] = captured
            while len(self._captured) > self.capacity:
                self._captured.popitem(last=False)
        self._captured.move_to_end(key)
        captured.a.copy_(a)
        captured.h.copy_(h)
        captured.tau.copy_(tau)
        captured.graph.replay()
        return captured.figures

    def _replayable(self, a: torch.Tensor, h: torch.Tensor, tau: torch.Tensor) -> bool:
        """CUDA float32 batches small enough to be launch-bound, outside any capture of the caller's,
        once the device has refused none."""
        return (a.is_cuda and h.device == a.device and tau.device == a.device
                and a.dtype == h.dtype == tau.dtype == torch.float32
                and a.numel() <= self.max_elements and not self._refused
                and not torch.cuda.is_current_stream_capturing())

    def _capture(self, key: _Key, a: torch.Tensor, h: torch.Tensor, tau: torch.Tensor,
                 reconstruction: bool) -> _Captured | None:
        """Warm the launches up on a side stream (library handles, workspaces, loaded kernels), as
        torch's graph documentation asks, then capture them reading static copies of the inputs.
        Only this thread's calls are held to the capture's rules (another thread of the caller's
        may use the device meanwhile). None, and the check eager, where the inputs' layout would
        not survive a copy (that shape stays eager) or the device refuses (every shape does)."""
        statics = [x.clone() for x in (a, h, tau)]
        if any(s.stride() != x.stride() for s, x in zip(statics, (a, h, tau), strict=True)):
            # Not dense (a clone is contiguous then): the graph would read another layout than
            # the eager path does, so this shape stays eager.
            self._eager.add(key)
            return None
        static_a, static_h, static_tau = statics
        side = torch.cuda.Stream(a.device)
        side.wait_stream(torch.cuda.current_stream(a.device))
        with torch.cuda.stream(side):
            fast_figures(static_a, static_h, static_tau, reconstruction)
        torch.cuda.current_stream(a.device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph, capture_error_mode="thread_local"):
                figures = fast_figures(static_a, static_h, static_tau, reconstruction)
        except RuntimeError:
            self._refused = True
            return None
        return _Captured(graph, static_a, static_h, static_tau, figures)
