"""The qr_v2 input generator, reproduced draw for draw (docs/problem.md §2).

Every random draw goes through one seeded generator on the input's device, in the
order the published generator makes them, so a spec gives the same bytes as the
contest on the same device and torch build (``tests/test_inputs_golden.py``).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

__all__ = ["CASES", "MIXED_PROFILES", "MIXED_WEIGHTS", "default_device", "generate_input"]

_F32 = torch.float32
_EPS32 = torch.finfo(torch.float32).eps

# Profiles a "mixed" batch draws from, in the order their transforms run, and the
# relative weight of each (dense is the well-conditioned majority, about half).
MIXED_PROFILES: tuple[str, ...] = (
    "dense", "rankdef", "nearrank", "clustered", "band", "rowscale", "nearcollinear",
)
MIXED_WEIGHTS: tuple[float, ...] = (6.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0)


def default_device() -> torch.device:
    """The device the contest generates on: CUDA when present, else the CPU."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def _scale_columns(a: torch.Tensor, cond: int) -> torch.Tensor:
    """Multiply column j by 10^(-cond * j / (n-1)); ``cond == 0`` leaves ``a`` as is."""
    if not cond:
        return a.contiguous()
    n = a.shape[-1]
    return a * torch.logspace(0.0, -float(cond), n, device=a.device, dtype=_F32)


def _dense(a: torch.Tensor, cond: int, gen: torch.Generator) -> torch.Tensor:
    return _scale_columns(a, cond)


def _upper(a: torch.Tensor, cond: int, gen: torch.Generator) -> torch.Tensor:
    n = a.shape[-1]
    boost = torch.linspace(1.0, 0.25, n, device=a.device, dtype=_F32)
    a = torch.triu(a)
    a.diagonal(dim1=-2, dim2=-1).add_(boost)
    return _scale_columns(a, cond)


def _diagonal(a: torch.Tensor, cond: int, gen: torch.Generator) -> torch.Tensor:
    m, n = a.shape[0], a.shape[-1]
    d = torch.randn((m, n), device=a.device, dtype=_F32, generator=gen)
    signs = d.sign().clamp(min=0.0).mul(2.0).sub(1.0)  # 0 maps to -1, as published
    magnitudes = torch.logspace(0.0, -float(max(cond, 2)), n, device=a.device, dtype=_F32)
    return torch.diag_embed(signs * magnitudes)


def _rank(n: int) -> int:
    return max(1, (3 * n) // 4)


def _rankdef(a: torch.Tensor, cond: int, gen: torch.Generator) -> torch.Tensor:
    a[:, :, _rank(a.shape[-1]):] = 0.0
    return _scale_columns(a, cond)


def _nearrank(a: torch.Tensor, cond: int, gen: torch.Generator) -> torch.Tensor:
    m, n = a.shape[0], a.shape[-1]
    r = _rank(n)
    k = n - r
    if k > 0:
        noise = torch.randn((m, n, k), device=a.device, dtype=_F32, generator=gen)
        a[:, :, r:] = a[:, :, :k] + 1.0e-5 * noise
    return _scale_columns(a, cond)


def _clustered(a: torch.Tensor, cond: int, gen: torch.Generator) -> torch.Tensor:
    n = a.shape[-1]
    scales = torch.ones((n,), device=a.device, dtype=_F32)
    scales[n // 2:] = 4.0 * _EPS32
    if n >= 8:
        lo, hi = max(0, n // 2 - 2), min(n, n // 2 + 2)
        scales[lo:hi] = torch.sqrt(torch.tensor(_EPS32, device=a.device))
    return a * scales


def _band(a: torch.Tensor, cond: int, gen: torch.Generator) -> torch.Tensor:
    n = a.shape[-1]
    width = max(2, min(32, n // 32))
    idx = torch.arange(n, device=a.device)
    a = a * ((idx[:, None] - idx[None, :]).abs() <= width)
    boost = torch.linspace(1.0, 0.5, n, device=a.device, dtype=_F32)
    a.diagonal(dim1=-2, dim2=-1).add_(boost)
    return _scale_columns(a, cond)


def _nearcollinear(a: torch.Tensor, cond: int, gen: torch.Generator) -> torch.Tensor:
    m, n = a.shape[0], a.shape[-1]
    base = torch.randn((m, n, 1), device=a.device, dtype=_F32, generator=gen)
    noise = torch.randn((m, n, n), device=a.device, dtype=_F32, generator=gen)
    return _scale_columns(base.expand(m, n, n) + 1.0e-4 * noise, cond)


def _rowscale(a: torch.Tensor, cond: int, gen: torch.Generator) -> torch.Tensor:
    n = a.shape[-1]
    scales = torch.logspace(0.0, -float(max(cond, 4)), n, device=a.device, dtype=_F32)
    return scales.reshape(1, n, 1) * a


_Transform = Callable[[torch.Tensor, int, torch.Generator], torch.Tensor]
_TRANSFORMS: dict[str, _Transform] = {
    "dense": _dense,
    "upper": _upper,
    "diagonal": _diagonal,
    "rankdef": _rankdef,
    "nearrank": _nearrank,
    "clustered": _clustered,
    "band": _band,
    "nearcollinear": _nearcollinear,
    "rowscale": _rowscale,
}

CASES: tuple[str, ...] = (*_TRANSFORMS, "mixed")


def _mixed(a: torch.Tensor, cond: int, gen: torch.Generator) -> torch.Tensor:
    """Give each matrix its own profile, at random positions (docs/problem.md §2 step 6)."""
    m = a.shape[0]
    device = a.device
    weights = torch.tensor(MIXED_WEIGHTS, dtype=_F32, device=device)
    labels = torch.multinomial(weights, m, replacement=True, generator=gen)
    if m >= 2:
        dense = labels == 0
        if not bool(dense.any()):
            labels[int(torch.randint(0, m, (1,), device=device, generator=gen))] = 0
        elif bool(dense.all()):
            pos = int(torch.randint(0, m, (1,), device=device, generator=gen))
            profile = torch.randint(1, len(MIXED_PROFILES), (1,), device=device, generator=gen)
            labels[pos] = int(profile)
    for k, profile in enumerate(MIXED_PROFILES):
        mask = labels == k
        if bool(mask.any()):
            a[mask] = _TRANSFORMS[profile](a[mask], cond, gen)
    return a


def _require_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    return value


def generate_input(
    batch: int, n: int, cond: int, seed: int, case: str = "dense", device: torch.device | str | None = None
) -> torch.Tensor:
    """A contiguous ``batch x n x n`` float32 input on ``device`` (default: :func:`default_device`), as the
    contest makes it there. A run on the CPU of a machine with a GPU passes the CPU: its inputs are the
    CPU's, as a CPU-only machine makes them."""
    batch, n, cond, seed = (
        _require_int(k, v) for k, v in (("batch", batch), ("n", n), ("cond", cond), ("seed", seed))
    )
    if batch <= 0:
        raise ValueError(f"batch must be positive, got {batch}")
    if n <= 0:
        raise ValueError(f"n must be positive, got {n}")
    if cond < 0:
        raise ValueError(f"cond must be non-negative, got {cond}")
    if not isinstance(case, str):
        raise ValueError(f"case must be a string, got {case!r}")
    key = case.lower()
    if key not in CASES:
        raise ValueError(f"unknown QR test case: {case!r} (known: {', '.join(CASES)})")

    device = default_device() if device is None else torch.device(device)
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    a = torch.randn((batch, n, n), device=device, dtype=_F32, generator=gen)
    a = _mixed(a, cond, gen) if key == "mixed" else _TRANSFORMS[key](a, cond, gen)
    return a.contiguous()
