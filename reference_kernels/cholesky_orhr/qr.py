"""Batched compact Householder QR by CholeskyQR + Householder reconstruction, routed per matrix.

Every matrix is routed on its own structure and its own numbers (see ``pipeline.Route``):

- ``TRIANGULAR``: nothing below the diagonal (upper, diagonal, zero). geqrf's answer is exact and
  free: every reflector is the identity, H = A, tau = 0.
- ``CHOLESKY`` / ``CHOLESKY2``: CholeskyQR (one or two FP64 passes, ``cholqr.py``), then ORHR
  (``orhr.py``). A matrix whose only zero columns are trailing (rankdef) is, for geqrf, the QR of
  its leading k non-zero columns followed by identity reflectors (H and tau zero there).
- ``FALLBACK``: blocked Householder QR, for a zero column followed by non-zero ones, and for
  matrices whose CholeskyQR broke down or failed the accuracy test (nearrank: kappa ~ 1e8).

A call runs ``pipeline.structure`` (on CUDA a graph captured once per shape, device and plan) and
reads the widest matrix the Gram route takes (a host synchronisation), runs ``pipeline.first_pass``
over that many leading columns (a graph per width: a rankdef batch skips its zero columns), reads
the per-matrix status (a second synchronisation), then replays ``first_factors`` (ORHR and
assembly, graphed; skipped when every matrix falls back) and only then touches the matrices that
need more: ``second_pass`` for a padded sub-batch (also graphed, one graph per padded size; a
further synchronisation reads its test; fewer than ``Plan.second_pass_min`` join the fallback
instead), then blocked_wy (graphed by its own cache) on a padded sub-batch for the fallback.
Sub-batches are padded to powers of two (``_padded``) and the small sizes' graphs captured along
with the first ones: with inputs that change every call (the evaluator's fresh-inputs rule), the
handful of matrices a dense batch sends on would otherwise meet a new size, hence a capture,
inside many timed calls. Small matrices (n <= ``Plan.whole_max``) first try the whole algorithm in
one kernel (``kernels.whole_qr``); if it declines any, the batch takes the general path. Outputs
are fresh tensors; all work is in the caller's CUDA order and complete on return.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext

import torch

from reference_kernels.blocked_wy import qr as blocked_wy_qr
from reference_kernels.blocked_wy.launch import ceil_div, pow2_at_least
from reference_kernels.blocked_wy.qr import ieee_fp32, require_square_batch
from reference_kernels.cholesky_orhr.cholqr import probe_matrix, tight_loss
from reference_kernels.cholesky_orhr.graphs import Graphed
from reference_kernels.cholesky_orhr.kernels import whole_qr
from reference_kernels.cholesky_orhr.pipeline import (
    FirstPass,
    Route,
    SecondPass,
    Structure,
    first_factors,
    first_pass,
    second_pass,
    structure,
)
from reference_kernels.cholesky_orhr.plan import Plan, default_plan

__all__ = ["Route", "clear_graphs", "qr", "qr_routed"]


@contextmanager
def _call_state(device: torch.device) -> Iterator[None]:
    """The process state a call needs, restored afterwards: FP32 products at full precision whatever
    the process chose (TF32 fails the factor gate), and on CUDA the input's device as the current
    one (Triton launches and graphs use the current device)."""
    with ieee_fp32(), torch.cuda.device(device) if device.type == "cuda" else nullcontext():
        yield


# Sub-batch sizes whose graphs are captured with the first pass's, before any call needs them: a
# dense batch sends a handful of matrices to pass 2 or the fallback, a different handful for
# every input, and a first capture inside a call costs ~50 ms. Larger sizes (mixed batches) are
# stable from input to input and captured when first met.
PREPARED_SIZES = (1, 2, 4, 8, 16)


def _padded(rows: list[int], batch: int, device: torch.device, pad: bool) -> torch.Tensor:
    """``rows`` as a device index, with ``pad`` repeated up to the next power of two (at most
    ``batch``): sub-batch sizes from a small, stable set, so a graph is captured once per size.
    The padded matrices are copies of the first; the waste is under half the sub-batch."""
    size = len(rows)
    if pad:
        size = min(batch, pow2_at_least(size))
    return torch.tensor(rows + rows[:1] * (size - len(rows)), dtype=torch.long, device=device)


def pass_width(widest: int, n: int, leaf: int) -> int:
    """Columns the passes run over: the widest Gram-route matrix, rounded up to a multiple of the
    leaf (a few widths per size, so a few graphs), at least one leaf and at most n."""
    return min(n, max(leaf, ceil_div(widest, leaf) * leaf))


class _Passes:
    """The passes over the first ``k`` columns for one (shape, device, plan): graphed on CUDA when
    the plan says so, reading the structure step's captured input and results, else eager."""

    def __init__(self, runner: _Runner, src: torch.Tensor, s: Structure, k: int) -> None:
        self.runner = runner
        self.probes = runner.probes[:k]  # the first k rows of the n-row probes: the same draws
        plan = runner.plan
        self._first: Graphed[FirstPass] | Callable[[], FirstPass] = lambda: first_pass(src, s, self.probes, k, plan)
        self._factors: Callable[[FirstPass], tuple[torch.Tensor, torch.Tensor]] = (
            lambda first: first_factors(first, src, plan)
        )
        self._second: dict[int, Graphed[SecondPass]] = {}
        if runner.graph:
            self._first = Graphed(self._first)
            first = self._first.outputs
            factors = Graphed(lambda: first_factors(first, src, plan))
            self._factors = lambda _first: tuple(x.clone() for x in factors())
            self._prepare(first)

    def _prepare(self, first: FirstPass) -> None:
        """Capture the small sub-batch graphs (``PREPARED_SIZES``) of pass 2 now, so that no call
        captures one (the first pass's outputs hold no meaningful data yet)."""
        for size in PREPARED_SIZES:
            if self.runner.plan.second_pass_min <= size <= self.runner.batch:
                self.second(first, [0] * size)

    def first(self) -> FirstPass:
        return self._first()

    def factors(self, first: FirstPass) -> tuple[torch.Tensor, torch.Tensor]:
        """Fresh (H, tau) from the first pass."""
        return self._factors(first)

    def second(self, first: FirstPass, rows: list[int]) -> SecondPass:
        """Pass 2 for ``rows``; the result's first len(rows) entries are theirs."""
        plan = self.runner.plan
        index = _padded(rows, self.runner.batch, first.q.device, self.runner.graph)
        if not self.runner.graph:
            return second_pass(first, index, self.probes, plan)
        if len(index) not in self._second:
            # Reads the first pass's captured Q and R: ``first`` is that graph's output here.
            self._second[len(index)] = Graphed(lambda i: second_pass(first, i, self.probes, plan), index)
        return self._second[len(index)](index)


class _Runner:
    """Everything for one (shape, device, plan): the structure step, the passes per width, the
    fallback. Graphed on CUDA when the plan says so (a caller capturing a graph of its own around
    ``qr`` passes a plan with ``graph=False``), else eager with the same synchronisations."""

    def __init__(self, like: torch.Tensor, plan: Plan) -> None:
        self.plan = plan
        self.batch, self.n, _ = like.shape
        self.probes = probe_matrix(self.n, like.device)
        self.graph = plan.graph and like.is_cuda
        self._structure: Graphed[Structure] | None = None
        self._passes: dict[int, _Passes] = {}

    def passes(self, a: torch.Tensor) -> _Passes:
        """Classify ``a`` (one host synchronisation: the width) and return the passes for it."""
        if self.graph:
            if self._structure is None:
                self._structure = Graphed(structure, a)
                self._prepare_fallback(a)
            s, src = self._structure(a), self._structure.inputs[0]
        else:
            s, src = structure(a), a
        k = pass_width(int(s.widest), self.n, self.plan.leaf)
        if not self.graph:
            return _Passes(self, src, s, k)
        if k not in self._passes:
            self._passes[k] = _Passes(self, src, s, k)
        return self._passes[k]

    def _prepare_fallback(self, a: torch.Tensor) -> None:
        """Capture blocked_wy's graphs for the small sub-batch sizes (``PREPARED_SIZES``) now."""
        for size in (s for s in PREPARED_SIZES if s <= self.batch):
            self.fallback(a, [0] * size)

    def fallback(self, a: torch.Tensor, rows: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """blocked_wy for ``rows``; the result's first len(rows) entries are theirs."""
        index = _padded(rows, self.batch, a.device, self.graph)
        return blocked_wy_qr(a.index_select(0, index), graph=self.graph)


_RUNNERS: dict[tuple[tuple[int, ...], torch.device, Plan], _Runner] = {}


def clear_graphs() -> None:
    """Drop every captured graph and its memory (between benchmark variants)."""
    _RUNNERS.clear()


def _runner(a: torch.Tensor, plan: Plan) -> _Runner:
    key = (tuple(a.shape), a.device, plan)
    if key not in _RUNNERS:
        _RUNNERS[key] = _Runner(a, plan)
    return _RUNNERS[key]


def _general(a: torch.Tensor, plan: Plan) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
    """(H, tau, routes) through the passes and the fallback."""
    runner = _runner(a, plan)
    passes = runner.passes(a)
    first = passes.first()
    status = first.status.tolist()
    if any(s in (Route.TRIANGULAR, Route.CHOLESKY, Route.CHOLESKY2) for s in status):
        h, tau = passes.factors(first)
    else:
        h, tau = torch.empty_like(a), a.new_empty(a.shape[:2])
    redo = [i for i, s in enumerate(status) if s == Route.CHOLESKY2]
    if len(redo) < plan.second_pass_min:
        for i in redo:
            status[i] = Route.FALLBACK
        redo = []
    fallback = [i for i, s in enumerate(status) if s == Route.FALLBACK]
    if redo:
        second = passes.second(first, redo)
        _put(h, tau, redo, second.h, second.tau)
        for i, ok in zip(redo, second.ok[: len(redo)].tolist(), strict=True):
            if not ok:
                status[i] = Route.FALLBACK
                fallback.append(i)
    if fallback:
        fallback.sort()
        _put(h, tau, fallback, *runner.fallback(a, fallback))
    return h, tau, status


def _put(h: torch.Tensor, tau: torch.Tensor, rows: list[int], h_sub: torch.Tensor, tau_sub: torch.Tensor) -> None:
    """A padded sub-batch's results (its first len(rows) entries) into the matrices ``rows``."""
    index = torch.tensor(rows, dtype=torch.long, device=h.device)
    h.index_copy_(0, index, h_sub[: len(rows)])
    tau.index_copy_(0, index, tau_sub[: len(rows)])


def _factor(a: torch.Tensor, plan: Plan | None) -> tuple[torch.Tensor, torch.Tensor, list[int] | None]:
    """(H, tau, each matrix's route; None when the one-kernel path took the whole batch). The
    one-kernel path is host-bound (one launch, one synchronisation): it skips everything a call
    does not need there, the library-precision context included (no library products run)."""
    require_square_batch(a)
    a = a.contiguous()
    batch, n, _ = a.shape
    plan = plan or default_plan(batch, n)
    if a.numel() == 0:
        return torch.empty_like(a), a.new_empty((batch, n)), []
    if n <= plan.whole_max:
        h = torch.empty_like(a)
        tau = a.new_empty((batch, n))
        with torch.cuda.device(a.device) if a.is_cuda else nullcontext():
            if whole_qr(a, h, tau, tight_loss(n)).all().item():
                return h, tau, None
    with _call_state(a.device):
        return _general(a, plan)


def qr_routed(a: torch.Tensor, plan: Plan | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(H, tau, routes): :func:`qr` plus each matrix's :class:`Route` (a CPU int8 tensor)."""
    h, tau, routes = _factor(a, plan)
    if routes is None:
        return h, tau, torch.full((a.shape[0],), int(Route.CHOLESKY), dtype=torch.int8)
    return h, tau, torch.tensor(routes, dtype=torch.int8)


def qr(a: torch.Tensor, plan: Plan | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Compact Householder QR of every matrix of ``a`` (b x n x n float32), ``torch.geqrf`` semantics.

    Returns fresh tensors (H b x n x n, tau b x n); ``a`` is not modified. ``plan``: see :class:`Plan`
    (default: :func:`default_plan` for the batch and size).
    """
    h, tau, _ = _factor(a, plan)
    return h, tau
