"""qrbench's evaluator: runs contestants' kernels on shape sets, times, checks, scores, reports."""

__version__ = "0.1.0"
