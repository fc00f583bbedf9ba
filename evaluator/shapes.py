"""Shape sets: the cases a run covers, loaded from YAML files or data and validated field by field.

A shape file uses the schema of the contest's ``shapes.yaml``: ``name``, ``timeouts_s`` per mode,
``tests`` and ``benchmarks`` as lists of ``{batch, n, cond, seed[, case]}``, and free text in
``source``, ``description`` or ``ranking``. An optional ``timing`` section overrides the contest's
repeat counts and time budgets (docs/problem.md §4), which a CPU set needs to finish in
seconds. Every problem is reported as ``<file>: <entry>: <problem>``: unknown keys are refused
(a misspelt ``timing`` would otherwise run the contest's two-minute timed passes), and so is a
case whose input cannot fit on any device (:data:`MAX_INPUT_BYTES`), which would otherwise fail
as the kernel's out-of-memory error.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from evaluator.documents import read_yaml
from evaluator.modes import MODE_NAMES, Mode
from reference.inputs import CASES

__all__ = [
    "MAX_INPUT_BYTES",
    "SHAPES_DIR",
    "Case",
    "ShapeFileError",
    "ShapeSet",
    "Timing",
    "load_shapes",
    "resolve_shapes",
]

SHAPES_DIR = Path(__file__).resolve().parents[1] / "shapes"
_CASE_KEYS = ("batch", "n", "cond", "seed", "case")
_TEXT_KEYS = ("source", "description", "ranking")
_TOP_KEYS = ("name", *_TEXT_KEYS, "timeouts_s", "timing", "tests", "benchmarks")
# The largest input a case may have (batch * n * n FP32 values). A run holds the input, the
# output, fresh copies for the timed repeats and the checker's FP64 products, several times the
# input: beyond 16 GiB no GPU (H200 141 GB, B200 180 GB) can hold a case. The contest's largest
# is 640 x 512 x 512, 0.67 GB.
MAX_INPUT_BYTES = 16 * 1024**3


class ShapeFileError(ValueError):
    """A shape file that cannot be used; the message names the file, the entry and the problem."""


@dataclass(frozen=True)
class Case:
    """One spec of the problem. ``case`` is None when the spec leaves it out (dense)."""

    batch: int
    n: int
    cond: int
    seed: int
    case: str | None = None

    @property
    def kind(self) -> str:
        """The input distribution, with the contest's default filled in."""
        return self.case or "dense"

    @property
    def spec(self) -> str:
        """The spec line as the contest's runner writes it: ``batch: 20; n: 32; cond: 1; seed: 5``."""
        return "; ".join(f"{key}: {value}" for key, value in self.fields().items())

    @property
    def label(self) -> str:
        """Short name for tables: ``640x512 mixed``."""
        return f"{self.batch}x{self.n}" + (f" {self.case}" if self.case else "")

    @property
    def flops(self) -> float:
        """Householder QR work, 4/3 n^3 per matrix."""
        return 4.0 / 3.0 * self.n**3 * self.batch

    @property
    def min_bytes(self) -> int:
        """Least device traffic: read A and write H, 4 bytes each."""
        return 8 * self.n * self.n * self.batch

    @property
    def input_bytes(self) -> int:
        return 4 * self.n * self.n * self.batch

    def fields(self) -> dict[str, int | str]:
        """The spec as a dict, in the contest's key order, ``case`` only when given."""
        out: dict[str, int | str] = {"batch": self.batch, "n": self.n, "cond": self.cond, "seed": self.seed}
        if self.case is not None:
            out["case"] = self.case
        return out

    def generator_args(self) -> dict[str, int | str]:
        """Keyword arguments for ``reference.generate_input``."""
        return {"batch": self.batch, "n": self.n, "cond": self.cond, "seed": self.seed, "case": self.kind}

    def with_seed(self, seed: int) -> Case:
        return replace(self, seed=seed)


@dataclass(frozen=True)
class Timing:
    """Repeat counts and budgets of the timed modes (docs/problem.md §4); the defaults are
    the contest's."""

    max_inputs: int = 50
    input_bytes_target: int = 256 * 1024 * 1024
    benchmark_warmup_repeats: int = 200
    benchmark_warmup_s: float = 0.1
    benchmark_repeats: int = 200
    benchmark_budget_s: float = 10.0
    leaderboard_warmup_repeats: int = 1000
    leaderboard_warmup_s: float = 0.5
    leaderboard_repeats: int = 1000
    leaderboard_budget_s: float = 30.0

    def input_count(self, case: Case) -> int:
        """How many distinct inputs a benchmark case cycles through."""
        return max(1, min(self.max_inputs, self.input_bytes_target // max(1, case.input_bytes)))


@dataclass(frozen=True)
class ShapeSet:
    name: str
    path: Path
    tests: tuple[Case, ...]
    benchmarks: tuple[Case, ...]
    timeouts_s: dict[str, float]
    timing: Timing = field(default_factory=Timing)
    description: str = ""
    timing_given: bool = False  # the file has a ``timing`` section (else the contest's protocol)

    def cases(self, mode: str) -> tuple[Case, ...]:
        """The cases a mode runs: tests for ``test``, benchmarks for the others."""
        return self.tests if mode == Mode.TEST else self.benchmarks

    def sizes(self) -> set[int]:
        """Every matrix size n of its cases."""
        return {case.n for case in (*self.tests, *self.benchmarks)}

    def timeout_s(self, mode: str) -> float:
        """Wall-time limit of a whole run in ``mode`` (profile shares the benchmark limit)."""
        return self.timeouts_s.get(mode, self.timeouts_s.get("benchmark", 480.0))

    def timing_note(self, device: str) -> str | None:
        """A one-line note for a CPU run of a file without ``timing``: its timed passes follow the
        contest's GPU protocol (up to 1000 repeats and 30 s a case), which on a CPU takes minutes."""
        if device != "cpu" or self.timing_given:
            return None
        return (f"note: {self.path} has no timing section, so its timed passes use the contest's GPU protocol "
                "(up to 1000 repeats, 30 s a case); on a CPU add one as shapes/smoke.yaml does")

    def to_dict(self) -> dict[str, Any]:
        """The set as plain JSON data in the shape file's schema, plus its ``path``: how a worker,
        a container or a one-off set gets its cases (as data, never as a file it could rewrite).
        ``timing`` is written when the set has one of its own (given, or changed from the contest's)."""
        out: dict[str, Any] = {
            "name": self.name,
            "path": str(self.path),
            "description": self.description,
            "timeouts_s": dict(self.timeouts_s),
            "tests": [case.fields() for case in self.tests],
            "benchmarks": [case.fields() for case in self.benchmarks],
        }
        if self.timing_given or self.timing != Timing():
            out["timing"] = asdict(self.timing)
        return out

    @classmethod
    def from_dict(cls, data: object) -> ShapeSet:
        """The inverse of :meth:`to_dict`, validated as :func:`load_shapes` validates a file (same
        parser, same messages, unknown keys refused); ``path`` names the set in those messages."""
        if not isinstance(data, dict):
            raise ShapeFileError(f"shape set: expected a mapping, got {type(data).__name__}")
        path = data.get("path", "<data>")
        if not isinstance(path, str):
            raise ShapeFileError(f"shape set: path: expected a string, got {path!r}")
        return _parse_set(Path(path), {key: value for key, value in data.items() if key != "path"})


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _parse_case(where: str, raw: object) -> Case:
    if not isinstance(raw, dict):
        raise ShapeFileError(f"{where}: expected a mapping like {{batch: 4, n: 64, cond: 1, seed: 7}}, got {raw!r}")
    unknown = sorted(set(raw) - set(_CASE_KEYS))
    if unknown:
        allowed = ", ".join(_CASE_KEYS)
        raise ShapeFileError(f"{where}: unknown key(s) {', '.join(map(str, unknown))} (allowed: {allowed})")
    missing = [key for key in _CASE_KEYS[:4] if key not in raw]
    if missing:
        raise ShapeFileError(f"{where}: missing key(s) {', '.join(missing)}")
    for key in _CASE_KEYS[:4]:
        if not _is_int(raw[key]):
            raise ShapeFileError(f"{where}: {key} must be an integer, got {raw[key]!r}")
    for key in ("batch", "n"):
        if raw[key] <= 0:
            raise ShapeFileError(f"{where}: {key} must be positive, got {raw[key]}")
    size = 4 * raw["batch"] * raw["n"] ** 2
    if size > MAX_INPUT_BYTES:
        raise ShapeFileError(f"{where}: batch {raw['batch']} x n {raw['n']} is a {size / 1024**3:.3g} GiB input, "
                             f"over the {MAX_INPUT_BYTES // 1024**3} GiB any device can hold with its checks")
    if raw["cond"] < 0:
        raise ShapeFileError(f"{where}: cond must be non-negative, got {raw['cond']}")
    case = raw.get("case")
    if case is not None:
        if not isinstance(case, str):
            raise ShapeFileError(f"{where}: case must be a string, got {case!r}")
        if case.lower() not in CASES:
            raise ShapeFileError(f"{where}: unknown case {case!r} (known: {', '.join(CASES)})")
    return Case(raw["batch"], raw["n"], raw["cond"], raw["seed"], case)


def _parse_cases(path: Path, doc: dict[str, Any], key: str) -> tuple[Case, ...]:
    raw = doc.get(key)
    if not isinstance(raw, list) or not raw:
        raise ShapeFileError(f"{path}: {key}: expected a non-empty list of cases")
    return tuple(_parse_case(f"{path}: {key}[{i}]", entry) for i, entry in enumerate(raw))


def _parse_timeouts(path: Path, raw: object) -> dict[str, float]:
    if not isinstance(raw, dict):
        raise ShapeFileError(f"{path}: timeouts_s: expected a mapping of mode to seconds, got {raw!r}")
    out: dict[str, float] = {}
    for mode, seconds in raw.items():
        if mode not in MODE_NAMES:
            raise ShapeFileError(f"{path}: timeouts_s.{mode}: unknown mode (known: {', '.join(MODE_NAMES)})")
        if not isinstance(seconds, int | float) or isinstance(seconds, bool) or seconds <= 0:
            raise ShapeFileError(f"{path}: timeouts_s.{mode}: expected positive seconds, got {seconds!r}")
        out[mode] = float(seconds)
    return out


def _parse_timing(path: Path, raw: object) -> Timing:
    if raw is None:
        return Timing()
    if not isinstance(raw, dict):
        raise ShapeFileError(f"{path}: timing: expected a mapping, got {raw!r}")
    defaults = Timing()
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if not hasattr(defaults, key):
            known = ", ".join(f.name for f in Timing.__dataclass_fields__.values())
            raise ShapeFileError(f"{path}: timing.{key}: unknown setting (known: {known})")
        want_int = isinstance(getattr(defaults, key), int)
        ok = (_is_int(value) if want_int else isinstance(value, int | float) and not isinstance(value, bool))
        if not ok or value <= 0:
            kind = "a positive integer" if want_int else "a positive number"
            raise ShapeFileError(f"{path}: timing.{key}: expected {kind}, got {value!r}")
        values[key] = value if want_int else float(value)
    return replace(defaults, **values)


def _parse_set(path: Path, doc: object) -> ShapeSet:
    """Validate one set's document (a shape file's or :meth:`ShapeSet.to_dict`'s), named ``path``."""
    if not isinstance(doc, dict):
        raise ShapeFileError(f"{path}: expected a mapping with name, timeouts_s, tests and benchmarks")
    unknown = sorted(map(str, set(doc) - set(_TOP_KEYS)))
    if unknown:
        raise ShapeFileError(f"{path}: unknown key(s) {', '.join(unknown)} (allowed: {', '.join(_TOP_KEYS)})")
    name = doc.get("name", path.stem)
    if not isinstance(name, str) or not name:
        raise ShapeFileError(f"{path}: name: expected a non-empty string, got {name!r}")
    return ShapeSet(
        name=name,
        path=path,
        tests=_parse_cases(path, doc, "tests"),
        benchmarks=_parse_cases(path, doc, "benchmarks"),
        timeouts_s=_parse_timeouts(path, doc.get("timeouts_s", {})),
        timing=_parse_timing(path, doc.get("timing")),
        description=str(doc.get("source", doc.get("description", ""))),
        timing_given=doc.get("timing") is not None,
    )


def load_shapes(path: str | Path) -> ShapeSet:
    """Read and validate one shape file."""
    path = Path(path)
    return _parse_set(path, read_yaml(path, ShapeFileError))


def resolve_shapes(name_or_path: str | Path) -> ShapeSet:
    """A bundled set by name (``qr_v2``, ``smoke``) or a shape file by path."""
    candidate = Path(name_or_path)
    if candidate.suffix in (".yaml", ".yml") or candidate.exists():
        return load_shapes(candidate)
    bundled = SHAPES_DIR / f"{name_or_path}.yaml"
    if bundled.exists():
        return load_shapes(bundled)
    known = ", ".join(sorted(p.stem for p in SHAPES_DIR.glob("*.yaml")))
    raise ShapeFileError(f"{name_or_path}: no such shape file or bundled set (bundled: {known})")
