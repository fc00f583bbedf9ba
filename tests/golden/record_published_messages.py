"""Record the published checker's messages on the corpus for this machine's arithmetic.

Usage: python tests/golden/record_published_messages.py PROBLEM_DIR [--commit SHA]

PROBLEM_DIR is the contest's ``problems/linalg/qr_v2`` from a checkout of
gpu-mode/reference-kernels (its ``reference.py`` and ``task.py``); nothing of it is copied here.
Writes ``tests/golden/published_messages/<fingerprint>.json``, which tests/test_checker_corpus.py
holds our checker's messages to on every machine with that fingerprint (tests/corpus_arithmetic.py).
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import platform
import re
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.corpus_arithmetic import RECORDS, fingerprint, torch_threads

CORPUS = Path(__file__).parent / "check_corpus_public.pt"


def _published_checker(problem: Path):
    """The contest's reference module, loaded under its own name beside our ``reference`` package."""
    sys.path.append(str(problem))  # its ``from task import ...``
    spec = importlib.util.spec_from_file_location("published_reference", problem / "reference.py")
    if spec is None or spec.loader is None:
        raise SystemExit(f"{problem / 'reference.py'}: not a loadable Python file")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.check_implementation


def _cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def _blas() -> str:
    found = re.search(r"(Intel\(R\) oneAPI Math Kernel Library Version [^\n]*|OpenBLAS[^\n]*)", torch.__config__.show())
    return found[1].strip() if found else "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("problem", type=Path, help="the published problems/linalg/qr_v2 directory")
    parser.add_argument("--commit", default="unknown", help="the reference-kernels commit it was read at")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads(),
                        help="torch's CPU threads while recording (LAPACK rounds by thread count)")
    args = parser.parse_args()
    with torch_threads(args.threads):
        _record(args.problem, args.commit, args.threads)


def _record(problem: Path, commit: str, threads: int) -> None:
    """Runs the published checker on every corpus entry and writes its messages under the fingerprint."""
    check = _published_checker(problem)
    entries = torch.load(CORPUS, weights_only=True)["entries"]
    messages = [list(check(e["A"], e["output"])) for e in entries]
    verdicts_differ = [i for i, (m, e) in enumerate(zip(messages, entries, strict=True)) if m[0] != e["passed"]]
    if verdicts_differ:
        raise SystemExit(f"the published checker's verdicts differ from the corpus's at entries {verdicts_differ}")
    differing = sum(m[1] != e["message"] for m, e in zip(messages, entries, strict=True))
    print_ = fingerprint(entries)
    record = {
        "fingerprint": print_,
        "recorded": datetime.date.today().isoformat(),
        "cpu": _cpu_model(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "blas": _blas(),
        "threads": threads,
        "torch": torch.__version__,
        "published_checker": f"gpu-mode/reference-kernels@{commit} problems/linalg/qr_v2/reference.py",
        "messages": messages,
    }
    RECORDS.mkdir(exist_ok=True)
    out = RECORDS / f"{print_}.json"
    out.write_text(json.dumps(record, indent=1) + "\n")
    print(f"{out}: fingerprint {print_}, {differing} of {len(entries)} messages differ from the corpus's")


if __name__ == "__main__":
    main()
