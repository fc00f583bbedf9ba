"""Every Triton launch ``qr`` makes, found without a GPU and compiled for one (sm_90, sm_100, ...).

``record_launches`` runs ``qr`` on meta tensors (shapes only) with the kernels swapped for recorders
and derives each launch's specialisation exactly as Triton's launcher would on the GPU;
``compile_launch`` builds it with the real compiler (Triton's wheel ships ptxas). Use: the CPU test
that every launch compiles (and a look at a plan's registers and spills without a GPU).
``record_calls`` does the same for any code's launches (the checker's kernels use it too). Not part
of the contest export. Must run where the interpreter has not run (TRITON_INTERPRET unset).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from types import ModuleType
from typing import Any

import torch
import triton

import reference_kernels.blocked_wy.gram_lookahead as gram_lookahead
import reference_kernels.blocked_wy.gram_panel as gram_panel
import reference_kernels.blocked_wy.kernels as kernels
import reference_kernels.blocked_wy.lookahead as lookahead
import reference_kernels.blocked_wy.products as products
import reference_kernels.blocked_wy.source as source
import reference_kernels.blocked_wy.split_tf32 as split_tf32
import reference_kernels.blocked_wy.tail as tail
from reference_kernels.blocked_wy.qr import READS_INPUT_IN_PLACE, Plan, _factor_in_place, graph_operands, qr

__all__ = ["Launch", "compile_launch", "record_calls", "record_launches"]

Launch = tuple[triton.runtime.jit.JITFunction, tuple[dict, dict, dict, dict]]
_KERNELS = (
    (kernels, "_panel_kernel"),
    (lookahead, "_lookahead_kernel"),
    (gram_panel, "_bottom_gram_kernel"),
    (gram_panel, "_gram_householder_kernel"),
    (gram_panel, "_bottom_v_kernel"),
    (gram_lookahead, "_strip_kernel"),
    (gram_lookahead, "_gram_lookahead_kernel"),
    (products, "_project_kernel"),
    (products, "_subtract_kernel"),
    (products, "_fused_update_kernel"),
    (products, "_leaf_gram_kernel"),
    (products, "_leaf_apply_kernel"),
    (split_tf32, "_split_kernel"),
    (source, "_copy_kernel"),
    (tail, "_tail_kernel"),
)


def _specialise(fn: triton.runtime.jit.JITFunction, args: tuple, kwargs: dict) -> tuple[dict, dict, dict, dict]:
    """Signature, constants, attributes and options as Triton's launcher derives them for sm_90."""
    from triton._C.libtriton import native_specialize_impl
    from triton.backends.nvidia.compiler import CUDABackend

    bound = dict(zip(fn.arg_names, args, strict=False)) | {k: v for k, v in kwargs.items() if k in fn.arg_names}
    options = {k: v for k, v in kwargs.items() if k not in fn.arg_names}
    signature, constants, attrs = {}, {}, {}
    for i, param in enumerate(fn.params):
        value = bound[param.name]
        if param.is_constexpr:
            signature[param.name], constants[param.name] = "constexpr", value
            continue
        if isinstance(value, torch.Tensor):  # qr's kernel arguments are allocations: aligned like this stand-in
            value = torch.empty(4, dtype=value.dtype)
        kind, attr = native_specialize_impl(CUDABackend, value, False, not param.do_not_specialize, True)
        signature[param.name] = kind
        if kind == "constexpr":
            constants[param.name] = value
        elif isinstance(attr, str):  # "" included, as the launcher does: it is part of the cache key
            attrs[(i,)] = CUDABackend.parse_attr(attr)
    return signature, constants, attrs, options


class _Recorder:
    def __init__(self, fn: triton.runtime.jit.JITFunction, found: dict[str, Launch]) -> None:
        self.fn, self.found = fn, found

    def __getitem__(self, grid: Any):
        def launch(*args: object, **kwargs: object) -> None:
            spec = _specialise(self.fn, args, kwargs)
            self.found.setdefault(f"{self.fn.__name__}{spec}", (self.fn, spec))

        return launch


def record_calls(run: Callable[[], object], kernels: Iterable[tuple[ModuleType, str]]) -> dict[str, Launch]:
    """The distinct launches ``run`` makes of the kernels named (module, attribute), each swapped
    for a recorder meanwhile: ``run`` calls the code under test on meta tensors."""
    found: dict[str, Launch] = {}
    saved = [(module, name, getattr(module, name)) for module, name in kernels]
    try:
        for module, name, fn in saved:
            setattr(module, name, _Recorder(fn, found))
        run()
    finally:
        for module, name, fn in saved:
            setattr(module, name, fn)
    return found


def record_launches(calls: Iterable[tuple[tuple[int, int], Plan]]) -> dict[str, Launch]:
    """The distinct launches of ``qr`` on (batch, n) shapes with the given plans, eager and, where
    the plan's graph reads its input in place, as that graph captures them (with its outputs at
    their addresses where it writes them there; a trimming plan's scan with them: its widths stay
    on the device)."""

    def run() -> None:
        for (batch, n), plan in calls:
            a = torch.empty(batch, n, n, device="meta")
            qr(a, plan=plan, graph=False)
            if n > plan.whole_max and plan.update in READS_INPUT_IN_PLACE:
                h, tau, src = graph_operands(a, plan, torch.empty(3, dtype=torch.int64, device="meta"))
                _factor_in_place(torch.empty_like(a) if h is None else h, a.new_empty(batch, n) if tau is None else tau,
                                 plan, src)

    return record_calls(run, _KERNELS)


def compile_launch(launch: Launch, arch: int = 90) -> triton.compiler.CompiledKernel:
    """One recorded launch compiled for ``sm_<arch>`` (90: H200; 100: B200), also stored in Triton's
    cache, as a GPU run keys it: its cubin is ``.asm["cubin"]``, its shared memory ``.metadata.shared``."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    fn, (signature, constants, attrs, options) = launch
    source = ASTSource(fn, signature, constants, attrs)
    return triton.compile(source, target=GPUTarget("cuda", arch, 32), options=options)
