"""The qr_v2 checker: the contest's gates, in the contest's order, with the contest's messages.

``check(A, output) -> (passed, message)`` is the published verdict (docs/problem.md §3). ``verdict`` returns
the same verdict with its figures as numbers (``Verdict.diagnostics``), and chooses how Q is
materialised from ``(H, tau)``:

- ``"published"``: ``torch.linalg.householder_product``, exactly as the contest does.
- ``"blocked"``: the batched compact-WY product of :mod:`reference.householder` (float32 too).
- ``"fast"``: a batched Q, trusted only for a clear pass; anything else (a failure, a non-finite
  Q, or a pass within a factor of two of a gate) is decided again by the published path, so the
  verdict, and the message of every failure, are the contest's. Its residuals are float64
  products, computed on CUDA by the fused kernels of :mod:`reference.checker_kernels`, with Q
  there from split-TF32 tensor-core blocks where those are faster (:func:`reference.q_kernels.fast_q`)
  and from the blocked product elsewhere.
- ``"auto"`` (default): ``"fast"`` on CUDA, where the published path loops over the batch;
  ``"published"`` on the CPU, where LAPACK's loop is cheap.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import torch

from reference.householder import householder_q

__all__ = [
    "FACTOR_RTOL_FACTOR",
    "ORTH_RTOL_FACTOR",
    "QMethod",
    "Verdict",
    "check",
    "check_implementation",
    "fast_figures",
    "prepare",
    "torch_residuals",
    "verdict",
]

FACTOR_RTOL_FACTOR = 20.0
ORTH_RTOL_FACTOR = 100.0
_EPS32 = torch.finfo(torch.float32).eps
# "auto" trusts the blocked Q only for passes whose scaled residuals stay under this share of
# their gate. The two float32 products differ by a few ulps (a scaled residual of order 1),
# so half the gate leaves an order of magnitude of room.
_AUTO_TRUST = 0.5

QMethod = Literal["auto", "fast", "published", "blocked"]


@dataclass(frozen=True)
class Verdict:
    """A check's outcome: ``message`` is the contest's text, ``diagnostics`` its numbers."""

    passed: bool
    message: str
    diagnostics: dict[str, float | int] = field(default_factory=dict)

    def as_tuple(self) -> tuple[bool, str]:
        return self.passed, self.message


def _rtol(n: int, factor: float) -> float:
    return factor * max(n, 1) * _EPS32


def _scaled(residual: torch.Tensor, scale: torch.Tensor, n: int) -> torch.Tensor:
    return residual / (_EPS32 * max(n, 1) * scale.clamp_min(1e-30))


def _l1(x: torch.Tensor) -> torch.Tensor:
    """Matrix 1-norm (largest column sum of magnitudes) of each matrix, in float64."""
    return torch.linalg.matrix_norm(x.double(), ord=1, dim=(-2, -1))


def _finite(x: torch.Tensor, one_pass: bool) -> bool:
    """Whether ``x`` holds no NaN or Inf. The published path asks as the contest's checker does,
    ``torch.isfinite`` first: under ``--compat`` a kernel shares the checker's process and may
    hook that very call, and the contest's holes must stay open there
    (tests/exploits/function_mode_in_check.py). ``one_pass`` (the fast path, which runs in the
    evaluator's own process) sums first: NaN and Inf carry through every addition, so a finite
    sum has finite terms, in one read of ``x`` instead of the elementwise test's two passes and
    boolean temporary (on an H200, H at 640x512: the elementwise test 1.00 ms, a one-pass
    reduction over H 0.21 ms, reports/h200/2026-12-02-spare-workers-on-the-h200.md); a sum that
    overflowed from finite terms is settled by the elementwise test."""
    if one_pass and bool(torch.isfinite(x.sum()).item()):
        return True
    return bool(torch.isfinite(x).all().item())


def _form_problem(name: str, value: object, shape: tuple[int, ...], device: torch.device) -> str | None:
    """What is wrong with ``value``'s type, shape, dtype or device (host checks only), or None."""
    if not isinstance(value, torch.Tensor):
        return f"{name} must be a torch.Tensor"
    if value.shape != shape:
        return f"{name} shape must be {shape}, got {tuple(value.shape)}"
    if value.dtype != torch.float32:
        return f"{name} dtype must be torch.float32, got {value.dtype}"
    if value.device != device:
        return f"{name} must be on {device}, got {value.device}"
    return None


def _tensor_problem(name: str, value: object, shape: tuple[int, ...], device: torch.device,
                    one_pass: bool) -> str | None:
    problem = _form_problem(name, value, shape, device)
    if problem is None and not _finite(value, one_pass):
        return f"{name} contains NaN or Inf"
    return problem


@contextmanager
def _ieee_fp32_matmul() -> Iterator[None]:
    """Force full-precision float32 products (no TF32 or bf16 passes), then restore.

    A kernel runs in the same process as the checker and may have switched TF32 on; the
    blocked Q must not inherit that. The ``fp32_precision`` API is used because reading the
    legacy ``allow_tf32`` flag raises once anything has used the new one.
    """
    backends = [torch.backends.cuda.matmul, torch.backends.mkldnn.matmul]
    saved = [b.fp32_precision for b in backends]
    try:
        for b in backends:
            b.fp32_precision = "ieee"
        yield
    finally:
        for b, value in zip(backends, saved, strict=True):
            b.fp32_precision = value


def _materialise_q(h: torch.Tensor, tau: torch.Tensor, method: Literal["published", "blocked"]) -> torch.Tensor:
    if method == "published":
        return torch.linalg.householder_product(h, tau)
    with _ieee_fp32_matmul():
        return householder_q(h, tau)


def _gated(a: torch.Tensor, h: torch.Tensor, tau: torch.Tensor, method: Literal["published", "blocked"]) -> Verdict:
    """Gates 3-6 of docs/problem.md §3, with Q materialised by ``method``."""
    batch, n, _ = a.shape
    factor_rtol = _rtol(n, FACTOR_RTOL_FACTOR)
    orth_rtol = _rtol(n, ORTH_RTOL_FACTOR)

    q = _materialise_q(h, tau, method)
    r = torch.triu(h)
    if not torch.isfinite(q).all().item():
        return Verdict(False, "Q materialized from `(H, tau)` contains NaN or Inf")
    if not torch.isfinite(r).all().item():
        return Verdict(False, "R extracted from `triu(H)` contains NaN or Inf")

    a64, q64, r64 = a.double(), q.double(), r.double()
    projected = q64.transpose(-1, -2) @ a64
    if not torch.isfinite(projected).all().item():
        return Verdict(False, "Q.T @ A contains NaN or Inf")

    a_norms = _l1(a64)
    factor_residual = _l1(r64 - projected)
    factor_allowed = factor_rtol * a_norms
    factor_scaled = _scaled(factor_residual, a_norms, n)
    if not torch.isfinite(factor_scaled).all().item():
        return Verdict(False, "R - Q.T @ A residual produced NaN or Inf")
    if bool((factor_residual > factor_allowed).any().item()):
        worst = int(factor_scaled.argmax().item())
        residual = factor_residual[worst].item()
        allowed = factor_allowed[worst].item()
        scaled = factor_scaled[worst].item()
        return Verdict(
            False,
            "R - Q.T @ A is too large: "
            f"matrix={worst}, residual={residual:.3g}, allowed={allowed:.3g}, scaled={scaled:.3g}",
            {"matrix": worst, "residual": residual, "allowed": allowed, "scaled_factor_residual": scaled},
        )

    eye = torch.eye(n, device=a.device, dtype=torch.float64).expand(batch, n, n)
    qtq = q64.transpose(-1, -2) @ q64
    if not torch.isfinite(qtq).all().item():
        return Verdict(False, "Q.T @ Q contains NaN or Inf")
    orth_residual = _l1(qtq - eye).amax()
    orth_scale = _l1(eye).amax()
    orth_allowed = orth_rtol * orth_scale
    orth_scaled = _scaled(orth_residual, orth_scale, n)
    if not torch.isfinite(orth_scaled).all().item():
        return Verdict(False, "Q.T @ Q residual produced NaN or Inf")
    if orth_residual.item() > orth_allowed.item():
        return Verdict(
            False,
            "Q is not orthogonal enough: "
            f"residual={orth_residual.item():.3g}, allowed={orth_allowed.item():.3g}, "
            f"scaled={orth_scaled.item():.3g}",
            {
                "residual": orth_residual.item(),
                "allowed": orth_allowed.item(),
                "scaled_orthogonality_residual": orth_scaled.item(),
            },
        )

    a_scale = a_norms.amax()
    tri_scaled = _scaled(_l1(torch.tril(projected, diagonal=-1)).amax(), a_scale, n)
    recon = q64 @ r64
    if not torch.isfinite(recon).all().item():
        return Verdict(False, "Q @ R contains NaN or Inf")
    recon_scaled = _scaled(_l1(recon - a64).amax(), a_scale, n)

    diagnostics: dict[str, float | int] = {
        "factor_rtol": factor_rtol,
        "orth_rtol": orth_rtol,
        "scaled_factor_residual": factor_scaled.amax().item(),
        "scaled_reconstruction_residual": recon_scaled.item(),
        "scaled_triangular_residual": tri_scaled.item(),
        "scaled_orthogonality_residual": orth_scaled.item(),
        "batch": batch,
        "n": n,
    }
    return Verdict(True, _pass_message(diagnostics), diagnostics)


def _pass_message(diagnostics: dict[str, float | int]) -> str:
    return "; ".join(
        f"{key}={value}" if isinstance(value, int) else f"{key}={value:.3g}" for key, value in diagnostics.items()
    )


def _column_sum_max(x: torch.Tensor) -> torch.Tensor:
    """The matrix 1-norm of each matrix in one fused reduction (no |x| temporary)."""
    return torch.linalg.vector_norm(x, ord=1, dim=-2).amax(dim=-1)


def _torch_residuals(
    a: torch.Tensor, h: torch.Tensor, q: torch.Tensor, reconstruction: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """:func:`reference.checker_kernels.residual_norms` by float64 torch products: the path off
    CUDA, and the specification the GPU kernels are tested against."""
    a64, q64 = a.double(), q.double()
    r64 = h.double().triu_()
    diff = torch.baddbmm(r64, q64.transpose(-1, -2), a64, alpha=-1.0)  # R - Q^T A
    factor = _column_sum_max(diff)
    triangular = _column_sum_max(diff.tril_(diagonal=-1))  # tril(R) = 0: this is -tril(Q^T A)
    del diff
    gram = q64.transpose(-1, -2) @ q64
    gram.diagonal(dim1=-2, dim2=-1).sub_(1.0)
    orthogonality = _column_sum_max(gram)
    del gram
    recon = _column_sum_max(torch.baddbmm(a64, q64, r64, beta=-1.0)) if reconstruction else None
    return _column_sum_max(a64), factor, triangular, orthogonality, recon


def torch_residuals(a: torch.Tensor, h: torch.Tensor, tau: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The gates' norms by torch alone, as the fast path computes them off CUDA: Q by the blocked
    product in IEEE float32, every product of the residuals in float64 (no verdict, no figures).

    A hardened worker runs this between timed repeats (:mod:`evaluator.worker`, its mirror check): the
    same cuBLAS float32 and float64 products the contest's check runs in the kernel's process."""
    return _torch_residuals(a, h, _materialise_q(h, tau, "blocked"), reconstruction=False)


def _fast_residuals(
    a: torch.Tensor, h: torch.Tensor, tau: torch.Tensor, reconstruction: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Per matrix: ``||A||_1``, ``||R - Q^T A||_1``, ``||tril(Q^T A, -1)||_1``, ``||Q^T Q - I||_1``
    and (``reconstruction``) ``||QR - A||_1``, every product of the residuals in float64. On CUDA
    (:func:`_fused_kernels_run_on`): Q by :func:`reference.q_kernels.fast_q` (split-TF32 Triton
    blocks where they are faster), the residuals by Triton kernels fused with their norms (both
    modules imported on first use, so that the interpreter setting in force then decides how they
    run); elsewhere torch, Q by the float32 blocked product."""
    if not _fused_kernels_run_on(a.device):
        return _torch_residuals(a, h, _materialise_q(h, tau, "blocked"), reconstruction)
    from reference.checker_kernels import residual_norms
    from reference.q_kernels import fast_q

    h = h.contiguous()
    with _ieee_fp32_matmul():  # float32 products, whatever the kernel under test switched on
        q = fast_q(h, tau)
    return residual_norms(a, h, q, reconstruction)


def _fused_kernels_run_on(device: torch.device) -> bool:
    """Whether the residual kernels run on ``device``: CUDA from compute capability 8.0, where
    float64 ``tl.dot`` maps to tensor-core instructions (the kernels were built and measured for
    those); older GPUs, where it is not verified here, and the CPU take the torch path."""
    return device.type == "cuda" and torch.cuda.get_device_capability(device) >= (8, 0)


_LIBRARIES_LOADED: set[torch.device] = set()  # devices where the published path has run once
_PREPARED: set[tuple[torch.device, int]] = set()  # (device, n) whose kernel specialisations are loaded


def prepare(device: torch.device | str, sizes: Iterable[int], cache_dir: Path | None = None) -> None:
    """Load now everything the fast path will run on ``device`` for n x n matrices of each of ``sizes``.

    An evaluator calls this before any kernel under test has run, so that its later checks load no
    code: the published path runs once (torch loads its CUDA linear-algebra library on first use),
    the residual and Q kernels' modules and Triton are imported, and each kernel is compiled (or read
    from Triton's cache) and loaded for every specialisation those sizes call for. The residual
    kernels' depend on n and on the 16-byte alignment of the partial sums' slots, which follows the
    batch's parity when n is odd: hence a batch of one and of two per size; Q's on n alone, once the
    batch is large enough for the Triton product (:func:`reference.q_kernels.fast_q`). ``cache_dir``
    (created if missing) becomes Triton's cache for this process first, read and written from then
    on. A no-op where the fast path runs torch only.
    """
    device = torch.device(device)
    if not _fused_kernels_run_on(device):
        return
    import triton

    from reference.checker_kernels import residual_norms
    from reference.q_kernels import MIN_TRITON_BATCH, fast_q

    if cache_dir is not None:
        cache_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        triton.knobs.cache.dir = str(cache_dir)

    if device not in _LIBRARIES_LOADED:
        eye = torch.eye(2, device=device).expand(1, 2, 2).contiguous()
        verdict(eye, (eye, eye.new_ones(1, 2)), "published")
        _LIBRARIES_LOADED.add(device)
    for n in sorted(set(sizes)):
        if (device, n) in _PREPARED:
            continue
        for batch in (1, 2):
            eye = torch.eye(n, device=device).expand(batch, n, n).contiguous()
            residual_norms(eye, eye, eye, reconstruction=True)
        for batch in (1, MIN_TRITON_BATCH):  # the Q of small batches is cuBLAS's, of larger ones Triton's
            eye = torch.eye(n, device=device).expand(batch, n, n).contiguous()
            fast_q(eye, eye.new_zeros(batch, n))
        torch.cuda.synchronize(device)
        _PREPARED.add((device, n))


def fast_figures(a: torch.Tensor, h: torch.Tensor, tau: torch.Tensor, reconstruction: bool) -> torch.Tensor:
    """The fast path's figures for a batch, queued on its device and not waited for: the worst
    scaled factor, orthogonality, triangular and (``reconstruction``, else 0) reconstruction
    residuals, then the sums of H and tau (their finiteness, see :func:`_finite`).

    Shapes alone decide which launches it queues, so a CUDA graph of it replays for any content
    (:mod:`reference.figure_graphs`).
    """
    n = a.shape[-1]
    a_norms, factor, triangular, orth, recon = _fast_residuals(a, h, tau, reconstruction)
    eps_n = _EPS32 * max(n, 1)
    factor_scaled = factor / (eps_n * a_norms.clamp_min(1e-30))
    a_scale = a_norms.amax().clamp_min(1e-30)
    recon_scaled = recon.amax() / (eps_n * a_scale) if recon is not None else torch.zeros_like(a_scale)
    return torch.stack((factor_scaled.amax(), orth.amax() / eps_n, triangular.amax() / (eps_n * a_scale),
                        recon_scaled, h.sum().double(), tau.sum().double()))


FigureSource = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, bool], torch.Tensor]


def _fast_clear_pass(
    a: torch.Tensor, h: torch.Tensor, tau: torch.Tensor, reconstruction: bool = True,
    figures_of: FigureSource = fast_figures,
) -> Verdict | None:
    """The gates with a blocked Q and float64 products, for a pass with room to spare.

    Returns the pass (with the contest's diagnostics) when H and tau are finite and every
    scaled residual is under half its gate, else None: failures, near-gate passes and anything
    non-finite go to the published path, which gives the contest's verdict and message. Without
    ``reconstruction`` the ``QR - A`` residual, which no gate reads, is neither computed nor
    reported. ``figures_of`` computes :func:`fast_figures` (or replays it); everything is queued
    before the one wait for its figures: H's finiteness is asked with the rest, not before it.
    """
    batch, n, _ = a.shape
    figures = figures_of(a, h, tau, reconstruction)
    worst_factor, orth_scaled, tri_scaled, recon_figure, *sums = figures.tolist()  # the one wait
    if not (all(map(math.isfinite, (worst_factor, orth_scaled, tri_scaled, recon_figure, *sums)))
            and worst_factor < _AUTO_TRUST * FACTOR_RTOL_FACTOR and orth_scaled < _AUTO_TRUST * ORTH_RTOL_FACTOR):
        return None
    diagnostics: dict[str, float | int] = {
        "factor_rtol": _rtol(n, FACTOR_RTOL_FACTOR),
        "orth_rtol": _rtol(n, ORTH_RTOL_FACTOR),
        "scaled_factor_residual": worst_factor,
    }
    if reconstruction:
        diagnostics["scaled_reconstruction_residual"] = recon_figure
    diagnostics |= {
        "scaled_triangular_residual": tri_scaled,
        "scaled_orthogonality_residual": orth_scaled,
        "batch": batch,
        "n": n,
    }
    return Verdict(True, _pass_message(diagnostics), diagnostics)


def verdict(a: torch.Tensor, output: object, q_method: QMethod = "auto", reconstruction: bool = True,
            figures_of: FigureSource = fast_figures) -> Verdict:
    """Check a kernel's ``output`` for input ``a`` (see the module docstring for ``q_method``).

    ``reconstruction=False`` lets the fast path skip ``QR - A``, a diagnostic no gate reads (the
    evaluator's timed repeats report only the gates' residuals): the verdict is the same (once Q
    has passed the orthogonality gate, ``|Q| <= ~1`` and float64 products of it with a finite
    float32 R cannot overflow, so the published path's "Q @ R contains NaN or Inf" cannot fire),
    and a pass from the fast path then leaves that figure out of its diagnostics. ``figures_of``:
    what computes the fast path's figures, :func:`fast_figures` or a replay of it
    (:class:`reference.figure_graphs.FigureGraphs`, for a caller checking one shape many times).
    """
    if q_method not in ("auto", "fast", "published", "blocked"):
        raise ValueError(f"q_method must be 'auto', 'fast', 'published' or 'blocked', got {q_method!r}")
    if not isinstance(a, torch.Tensor) or a.dim() != 3 or a.shape[-1] != a.shape[-2]:
        raise ValueError("a must be a batch x n x n tensor")
    batch, n, _ = a.shape
    if q_method == "auto":
        q_method = "fast" if a.device.type == "cuda" else "published"

    if not isinstance(output, tuple) or len(output) != 2:
        return Verdict(False, "output must be a tuple `(H, tau)`")
    h, tau = output
    tensors = (("H", h, (batch, n, n)), ("tau", tau, (batch, n)))
    if q_method == "fast" and all(_form_problem(*tensor, a.device) is None for tensor in tensors):
        cleared = _fast_clear_pass(a, h, tau, reconstruction, figures_of)
        if cleared is not None:
            return cleared
    # The contest's order: each tensor's form, then its finiteness, then the gates.
    for name, value, shape in tensors:
        problem = _tensor_problem(name, value, shape, a.device, one_pass=q_method == "fast")
        if problem is not None:
            return Verdict(False, problem)
    return _gated(a, h, tau, "published" if q_method == "fast" else q_method)


def check(a: torch.Tensor, output: object, q_method: QMethod = "auto") -> tuple[bool, str]:
    """``(passed, message)`` for a kernel's ``output`` on input ``a``, as the contest reports it."""
    return verdict(a, output, q_method).as_tuple()


def check_implementation(data: torch.Tensor, output: object) -> tuple[bool, str]:
    """The contest's name for :func:`check`, for submissions that import it from ``reference``."""
    return check(data, output)
