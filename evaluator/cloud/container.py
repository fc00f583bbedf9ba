"""What a ranking container is, stated once: the image pins and the resources it asks for.

The image mirrors the contest's runner (gpu-mode/kernelbot ``src/runners/modal_runner.py``: an
``nvidia/cuda`` devel image on Ubuntu 24.04, Python 3.13, a CUDA 13 torch wheel). torch is pinned
to the build the golden H200 inputs and the README's figures were made with (2.11.0, CUDA 13.0)
and triton to the version that build ships with. :mod:`evaluator.cloud.modal_app` builds from these
values and :mod:`evaluator.cloud.pricing` bills the CPU and memory asked for here.
"""

from __future__ import annotations

CUDA_BASE_IMAGE = "nvidia/cuda:13.1.0-devel-ubuntu24.04"
PYTHON_VERSION = "3.13"
TORCH_VERSION = "2.11.0"
TORCH_INDEX_URL = "https://download.pytorch.org/whl/cu130"
TRITON_VERSION = "3.6.0"
# Installed from PyPI before torch, so torch's own index only has to serve torch and its CUDA wheels;
# kernelguard at the version pyproject pins, for the submission gates every container runs;
# nvidia-ml-py for the clocks read around every timed repeat (evaluator/measure/clocks.py).
PYPI_PACKAGES = (f"triton=={TRITON_VERSION}", "numpy~=2.3", "PyYAML~=6.0", "kernelguard==0.3.2",
                 "nvidia-ml-py>=12.535")

DEFAULT_GPU = "B200"
CPU_CORES = 4.0
MEMORY_MIB = 16 * 1024
# Pulling the image and importing torch happen before a job's own time limit starts.
STARTUP_TIMEOUT_S = 900
