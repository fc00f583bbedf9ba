"""The Modal app: a contest-like image and one GPU function that runs one job per container.

Importing this module defines the image, the app and the function without contacting Modal, so
it needs no credentials; only :meth:`ModalDispatcher.session` (``app.run()``) does. The function's
body is :func:`evaluator.cloud.remote.execute`, the same code ``--local`` calls in-process. Each
call gets a fresh container (``single_use_containers``), no network (``block_network``), no access
to other Modal objects (``restrict_modal_access``), and a time limit covering its stages
(``with_options(timeout=...)`` per job, from the shape file's limits).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

import modal
import modal.exception

from evaluator.cloud import container
from evaluator.cloud.dispatch import DispatchError, InfrastructureError
from evaluator.cloud.jobs import RunRequest
from evaluator.cloud.remote import execute
from evaluator.shapes import SHAPES_DIR

__all__ = ["FUNCTION_OPTIONS", "ModalDispatcher", "app", "image", "run_on_gpu"]

image = (
    modal.Image.from_registry(container.CUDA_BASE_IMAGE, add_python=container.PYTHON_VERSION)
    .uv_pip_install(*container.PYPI_PACKAGES)
    .uv_pip_install(f"torch=={container.TORCH_VERSION}", index_url=container.TORCH_INDEX_URL)
    # Packages land in /root, so evaluator.shapes.SHAPES_DIR is /root/shapes in the container.
    .add_local_dir(SHAPES_DIR, remote_path="/root/shapes")
    .add_local_python_source("reference", "evaluator", "reference_kernels")
)

app = modal.App("qrbench", image=image, include_source=False)

# The decorator's options, kept as data so a test can read what the function asks for.
FUNCTION_OPTIONS: dict[str, Any] = {
    "gpu": container.DEFAULT_GPU,
    "cpu": container.CPU_CORES,
    "memory": container.MEMORY_MIB,
    "timeout": 3600,  # replaced per job by ModalDispatcher
    "startup_timeout": container.STARTUP_TIMEOUT_S,
    "block_network": True,
    "restrict_modal_access": True,
    "single_use_containers": True,
}


@app.function(**FUNCTION_OPTIONS)
def run_on_gpu(request: RunRequest) -> dict[str, Any]:
    """One job in one fresh container; the runner inside spawns the isolated workers."""
    return execute(request)


# Failures of Modal's machinery rather than of the job: a lost or preempted container
# (InternalFailure, RemoteError), the service or the connection to it, a quota, a container
# that outlived its limit (the runner inside stops a hung kernel well before that).
_INFRASTRUCTURE = (
    InfrastructureError,
    ConnectionError,
    modal.exception.ConnectionError,
    modal.exception.InternalFailure,
    modal.exception.InternalError,
    modal.exception.ServiceError,
    modal.exception.RemoteError,
    modal.exception.ResourceExhaustedError,
    modal.exception.FunctionTimeoutError,
    modal.exception.OutputExpiredError,
)


class ModalDispatcher:
    """Runs each job in its own container of :data:`run_on_gpu` on ``gpu``, up to
    ``max_parallel`` at once (Modal's Starter plan allows 10 GPUs at a time)."""

    def __init__(self, gpu: str = container.DEFAULT_GPU, max_parallel: int = 10, show_output: bool = False) -> None:
        self.gpu = gpu
        self.max_parallel = max_parallel
        self.name = f"Modal {gpu}"
        self.show_output = show_output
        self._variants: dict[int, modal.Function] = {}
        self._lock = threading.Lock()

    def function(self, timeout_s: int) -> modal.Function:
        """The function on this GPU with this time limit (one variant per limit, made once)."""
        with self._lock:
            if timeout_s not in self._variants:
                self._variants[timeout_s] = run_on_gpu.with_options(gpu=self.gpu, timeout=timeout_s)
            return self._variants[timeout_s]

    @contextmanager
    def session(self) -> Iterator[None]:
        """An ephemeral run of the app; leaving it stops every container still running."""
        with modal.enable_output() if self.show_output else nullcontext():
            try:
                with app.run():
                    yield
            except modal.exception.AuthError as exc:
                raise DispatchError(f"Modal refused the credentials here ({exc}); run `modal setup` "
                                    "or set MODAL_TOKEN_ID and MODAL_TOKEN_SECRET") from exc

    def run(self, request: RunRequest, timeout_s: int) -> dict[str, Any]:
        function = self.function(timeout_s)
        with self._lock:  # the first call of a variant loads it, once, not from every thread at once
            function.hydrate()
        return function.remote(request)

    def is_infrastructure(self, error: BaseException) -> bool:
        # An image that fails to build fails the same way on every attempt.
        return isinstance(error, _INFRASTRUCTURE) and not isinstance(error, modal.exception.ImageBuildError)
