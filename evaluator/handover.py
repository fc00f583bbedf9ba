"""Tensors the parent owns and the worker maps: how inputs reach the kernel and outputs come back.

In a hardened run the parent makes every input and reads every output itself, so both live in
memory the parent allocated and the worker only maps:

- on CUDA, each buffer is a separate allocation from a memory pool of its own
  (``torch.cuda.MemPool``), in classic segments (:func:`_ipc_segments`), shared by CUDA IPC.
  IPC maps a whole allocator segment, so nothing but handed-over buffers may live in those
  segments: the pristine copies the checker compares against never share one with an input
  the kernel can write;
- on the CPU, each buffer is a file with a random name in a private folder outside ``/dev/shm``
  (which the worker's sandbox lets it write), mapped shared by both processes with
  ``torch.from_file``, used by one worker only and deleted when given back: a worker that
  replaced a file under its name could otherwise feed a later contestant's worker other memory.

Each buffer is its own storage with no offset, as the contest's tensors are (kernels that cache
CUDA graphs by pointer, or take a fast path for offset-free tensors, behave as they would there).
The worker never allocates what the parent reads, so it cannot free memory under the parent.
CUDA buffers given back are kept, by shape, for the next case, stage or contestant (they have no
name a worker could replace): a new allocation and IPC mapping cost far more than the copy that
fills a kept buffer.
"""

from __future__ import annotations

import atexit
import contextlib
import math
import os
import re
import secrets
import shutil
import tempfile
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

__all__ = ["HandoverArena", "attach"]



@dataclass(frozen=True)
class _FileSpec:
    path: str
    shape: tuple[int, ...]
    dtype: str


def _dtype(name: str) -> torch.dtype:
    value = getattr(torch, name.removeprefix("torch."), None)
    if not isinstance(value, torch.dtype):
        raise ValueError(f"not a torch dtype: {name}")
    return value


class HandoverArena:
    """The parent's allocator of handed-over buffers for one device (see the module docstring).

    ``new(shape)`` returns a float32 tensor (of unspecified content) and a picklable spec from
    which :func:`attach` maps the same memory in the worker; :meth:`give_back` keeps it for reuse.
    """

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._pool = torch.cuda.MemPool() if device.type == "cuda" else None
        self._folder: Path | None = None
        self._free: dict[tuple[tuple[int, ...], torch.dtype], list[tuple[torch.Tensor, Any]]] = defaultdict(list)

    def new(self, shape: tuple[int, ...], dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, Any]:
        kept = self._free.get((tuple(shape), dtype))
        if kept:
            return kept.pop()
        try:
            return self._allocate(shape, dtype)
        except torch.OutOfMemoryError:
            self._free.clear()  # kept buffers of other shapes go back to the pool first
            return self._allocate(shape, dtype)

    def give_back(self, tensor: torch.Tensor, spec: Any) -> None:
        """The worker has let go of a buffer: keep a CUDA one for the next :meth:`new` of its
        shape, delete a CPU one's file (see the module docstring)."""
        if isinstance(spec, _FileSpec):
            Path(spec.path).unlink(missing_ok=True)
            return
        self._free[(tuple(tensor.shape), tensor.dtype)].append((tensor, spec))

    def _allocate(self, shape: tuple[int, ...], dtype: torch.dtype) -> tuple[torch.Tensor, Any]:
        if self._pool is not None:
            with torch.cuda.use_mem_pool(self._pool), _ipc_segments():
                tensor = torch.zeros(shape, dtype=dtype, device=self.device)
            from torch.multiprocessing.reductions import reduce_tensor

            return tensor, reduce_tensor(tensor)
        numel = math.prod(shape)
        path = self._cpu_folder() / secrets.token_hex(8)
        tensor = torch.from_file(str(path), shared=True, size=max(numel, 1), dtype=dtype)[:numel].view(shape)
        return tensor, _FileSpec(str(path), shape, str(dtype))

    def _cpu_folder(self) -> Path:
        if self._folder is None or not self._folder.is_dir():  # made again if a worker removed it
            if self._folder is None:
                atexit.register(self.close)  # nothing may outlive the process
            self._folder = Path(tempfile.mkdtemp(prefix="qrbench-handover-"))
        return self._folder

    @property
    def folder(self) -> Path | None:
        """Where CPU buffers live as files (the worker opens them for writing); None on CUDA."""
        return None if self._pool is not None else self._cpu_folder()

    def close(self) -> None:
        self._free.clear()
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder = None


_EXPANDABLE = re.compile(r"expandable_segments\s*:\s*(true|1)\b", re.IGNORECASE)


def _allocator_settings() -> str:
    getter = getattr(torch._C, "_accelerator_getAllocatorSettings", None)
    if getter is not None:
        return str(getter())
    return os.environ.get("PYTORCH_ALLOC_CONF") or os.environ.get("PYTORCH_CUDA_ALLOC_CONF") or ""


def _set_allocator_settings(settings: str) -> None:
    setter = getattr(torch._C, "_accelerator_setAllocatorSettings", None)
    if setter is not None:
        setter(settings)
    else:
        torch.cuda.memory._set_allocator_settings(settings)


@contextlib.contextmanager
def _ipc_segments() -> Iterator[None]:
    """Allocate in segments a worker without ``CAP_SYS_PTRACE`` can map.

    PyTorch shares an expandable segment as a file descriptor that the importer takes with
    ``pidfd_getfd``, which needs ptrace rights over this non-dumpable process, and the worker
    has given those up (:func:`evaluator.hardening.containment.close_other_processes`); a
    classic segment goes by a CUDA IPC handle, which needs none. Expandable segments are
    switched off around the allocation and back on after it where the user's settings (or,
    on a torch without a getter, ``PYTORCH_ALLOC_CONF``/``PYTORCH_CUDA_ALLOC_CONF``) had them.
    """
    restore = _EXPANDABLE.search(_allocator_settings()) is not None
    _set_allocator_settings("expandable_segments:False")  # unconditionally: older torch cannot say what is set
    try:
        yield
    finally:
        if restore:
            _set_allocator_settings("expandable_segments:True")


def attach(spec: Any) -> torch.Tensor:
    """The worker's view of a buffer the parent made with :meth:`HandoverArena.new`."""
    if isinstance(spec, _FileSpec):
        numel = math.prod(spec.shape)
        dtype = _dtype(spec.dtype)
        return torch.from_file(spec.path, shared=True, size=max(numel, 1), dtype=dtype)[:numel].view(spec.shape)
    rebuild, args = spec
    return rebuild(*args)

