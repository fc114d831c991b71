"""Find a model: a built-in name or alias (exact, case-insensitive), a config.json, or a folder.

Built-ins are the real public HF config.json files in model_specs/models/, each with `_name`,
`_aliases` and `_source` keys added. Unlike a substring match, a miss never picks a neighbour:
it fails with "did you mean" suggestions.
"""

from __future__ import annotations

import difflib
import json
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping

from ..errors import MlsysError
from ..readers import files
from .hf import from_hf_config
from .model import ModelSpec

if TYPE_CHECKING:
    from importlib.abc import Traversable


def _data_dir(kind: str) -> Traversable:
    return resources.files("mlsyscalc.model_specs").joinpath(kind)


def read_json(path: Any, what: str) -> Any:
    """Read a JSON file; a missing, unreadable or malformed file (or one holding NaN or an infinity) is an
    MlsysError naming it (mlsyscalc.readers.files)."""
    return files.read_json(path, what)


def load_spec_dir(kind: str, parse: Callable[[Any, str], Any], what: str) -> dict[str, Any]:
    """Parse every JSON file of model_specs/<kind>/ into name -> spec (specs with `.name`)."""
    specs = {}
    for entry in sorted(_data_dir(kind).iterdir(), key=lambda p: p.name):
        if entry.name.endswith(".json"):
            spec = parse(read_json(entry, what), entry.name)
            specs[spec.name] = spec
    return specs


def find_named(specs: Mapping[str, Any], ref: str) -> Any | None:
    """The spec whose name or one of whose aliases equals ref (case-insensitive), else None."""
    wanted = str(ref).strip().lower()
    for spec in specs.values():
        if wanted == spec.name.lower() or wanted in (a.lower() for a in spec.aliases):
            return spec
    return None


def all_names(specs: Mapping[str, Any]) -> list[str]:
    return [n for s in specs.values() for n in (s.name, *s.aliases)]


@lru_cache(maxsize=None)
def builtin_configs() -> dict[str, dict[str, Any]]:
    """Built-in name -> its stored config (with the `_` keys)."""
    configs = {}
    for entry in sorted(_data_dir("models").iterdir(), key=lambda p: p.name):
        if entry.name.endswith(".json"):
            config = read_json(entry, "built-in model")
            configs[config["_name"]] = config
    return dict(sorted(configs.items()))


@lru_cache(maxsize=None)
def _index() -> dict[str, str]:
    """Lower-cased name, alias or an alias's repository name without its organisation -> built-in
    name (`Llama-2-7b-chat-hf` finds the alias `meta-llama/Llama-2-7b-chat-hf`); an exact name or
    alias wins over a shortened one."""
    index: dict[str, str] = {}
    short: dict[str, str] = {}
    for name, config in builtin_configs().items():
        for key in (name, *config.get("_aliases", ())):
            index[key.lower()] = name
            if "/" in key:
                short.setdefault(key.rsplit("/", 1)[1].lower(), name)
    return {**short, **index}


def _known_names() -> list[str]:
    """Every name and alias, as spelled in the built-ins (the choices of "did you mean")."""
    return [n for name, config in builtin_configs().items() for n in (name, *config.get("_aliases", ()))]


def suggest(word: str, choices: Iterable[str], n: int = 3) -> str:
    """' (did you mean: a, b?)' or ''."""
    choices = list(choices)
    lowered = {c.lower(): c for c in choices}
    close = difflib.get_close_matches(word.lower(), list(lowered), n=n, cutoff=0.5)
    if not close:
        close = [c for c in lowered if word.lower() in c or c in word.lower()][:n]
    return f" (did you mean: {', '.join(lowered[c] for c in close)}?)" if close else ""


def resolve_config(ref: str) -> tuple[dict[str, Any], str, str, tuple[str, ...]]:
    """(raw config, name, source, aliases) for a built-in name/alias or a path."""
    if not str(ref).strip():
        raise MlsysError("empty model name: give a built-in name (`mlsys models`), a config.json or a folder")
    name = _index().get(str(ref).strip().lower())
    if name is not None:
        stored = builtin_configs()[name]
        raw = {k: v for k, v in stored.items() if not k.startswith("_")}
        return raw, name, stored.get("_source", "built-in"), tuple(stored.get("_aliases", ()))
    path = Path(ref).expanduser()
    if path.is_dir():
        path = path / "config.json"
        if not path.is_file():
            raise MlsysError(f"{ref}: folder has no config.json")
    if path.is_file():
        raw = read_json(path, "model config")
        if not isinstance(raw, dict):
            raise MlsysError(f"{path}: a config.json must hold a JSON object")
        stem = path.parent.name if path.name == "config.json" else path.stem
        return raw, raw.get("_name", stem), str(path), ()
    if "/" in str(ref) or "\\" in str(ref) or str(ref).lower().endswith(".json") or str(ref).startswith("."):
        raise MlsysError(f"{ref}: no such file or folder, nor a built-in name or alias"
                         f"{suggest(str(ref), _known_names())}")
    raise MlsysError(f"unknown model {ref!r}: not a built-in name or alias, nor a config.json path"
                     f"{suggest(str(ref), _known_names())}")


def load_model(ref: str, overrides: Mapping[str, Any] | None = None) -> ModelSpec:
    """A ModelSpec for a built-in name/alias, a config.json path or a folder holding one.

    `overrides` replaces config keys before normalisation (what-if questions), e.g.
    {"num_hidden_layers": 48}; a key the model family does not read is an error.
    """
    raw, name, source, aliases = resolve_config(ref)
    raw = {k: v for k, v in raw.items() if not k.startswith("_")}
    return from_hf_config(raw, name=name, source=source, aliases=aliases, overrides=overrides)


def parse_overrides(items: Iterable[str]) -> dict[str, Any]:
    """['num_hidden_layers=48', 'tie_word_embeddings=true'] -> dict (values parsed as JSON)."""
    overrides: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise MlsysError(f"--set {item!r}: expected KEY=VALUE")
        try:
            overrides[key] = json.loads(value)
        except json.JSONDecodeError:
            overrides[key] = value
    return overrides
