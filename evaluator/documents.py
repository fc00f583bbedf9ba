"""Reading the files users hand qrbench (shape files, axes files, results files): a file that
cannot be read or parsed is an error of the caller's type that names the file and what is wrong."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

__all__ = ["read_json", "read_yaml"]


def _read(path: Path, error: type[Exception], parse: Callable[[str], Any], parse_error: type[Exception],
          expected: str) -> Any:
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise error(f"{path}: cannot read: {exc.strerror or exc}") from exc
    try:
        return parse(text)
    except parse_error as exc:
        raise error(f"{path}: not valid {expected}: {exc}") from exc


def read_yaml(path: Path, error: type[Exception]) -> Any:
    """The YAML (or JSON, a subset of it) document in ``path``; ``error`` when it cannot be had."""
    return _read(path, error, yaml.safe_load, yaml.YAMLError, "YAML")


def read_json(path: Path, error: type[Exception]) -> Any:
    """The JSON document in ``path``; ``error`` when it cannot be had."""
    return _read(path, error, json.loads, json.JSONDecodeError, "JSON")
