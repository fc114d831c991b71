"""Typed, tracked reads of a Hugging Face config dict, and the shape rules several families share.

Every read is recorded, so a `--set` of a key that no normaliser reads is reported instead of
silently ignored; every error names the file (or `--set`) and the key.
"""

from __future__ import annotations

import builtins
from typing import Any, Mapping

from ..errors import MlsysError
from ..validate import MAX_DIM, MAX_LAYERS, finite

_MISSING = object()
_MAXIMUM = {"num_hidden_layers": MAX_LAYERS, "n_layer": MAX_LAYERS, "num_layers": MAX_LAYERS}
_WHY = {k: "the deepest published transformers have about 1,000 layers" for k in _MAXIMUM}
# the attention kinds a layer_types list may name (HF's names; calc.counts.attention.MASKS prices each)
ATTENTION_KINDS = ("full_attention", "sliding_attention", "chunked_attention")


class ConfigReader:
    """Typed, tracked access to a raw config dict; errors name the file and the key."""

    def __init__(self, raw: Mapping[str, Any], source: str, overridden: frozenset[str] = frozenset()):
        self.raw = raw
        self.source = source
        self.overridden = overridden  # keys given with --set: their errors name --set, not the file
        self.read: set[str] = set()

    def where(self, key: str) -> str:
        return f"--set {key}" if key in self.overridden else f"{self.source}: {key!r}"

    def blame(self, *keys: str) -> str:
        """Who to name for a problem between keys: the --set overrides among them, else the file."""
        given = [k for k in keys if k in self.overridden]
        return f"--set {', '.join(given)}" if given else self.source

    def has(self, key: str) -> bool:
        """The config sets key (to anything, null included); reading it this way counts as a read."""
        self.read.add(key)
        return key in self.raw

    def _get(self, key: str, default: Any) -> Any:
        self.read.add(key)
        value = self.raw.get(key, default)
        if value is _MISSING:
            raise MlsysError(f"{self.source}: missing key {key!r} (model_type {self.raw.get('model_type')!r})")
        return value

    def int(self, key: str, default: Any = _MISSING, *, minimum: int = 1) -> int:
        """An integer in [minimum, MAX_DIM] (layers: MAX_LAYERS), so no size overflows or takes minutes."""
        value = self._get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise MlsysError(f"{self.where(key)} must be an integer >= {minimum}, got {value!r}")
        maximum = _MAXIMUM.get(key, MAX_DIM)
        if value > maximum:
            raise MlsysError(f"{self.where(key)} = {value:,} is beyond what mlsyscalc models "
                             f"(at most {maximum:,}: {_WHY.get(key, 'a sane model size')})")
        return value

    def opt_int(self, key: str, default: builtins.int | None = None) -> builtins.int | None:
        value = self._get(key, default)
        return None if value is None else self.int(key, value)

    def bool(self, key: str, default: Any = _MISSING) -> bool:
        value = self._get(key, default)
        if not isinstance(value, bool):
            raise MlsysError(f"{self.where(key)} must be true or false, got {value!r}")
        return value

    def float(self, key: str, default: Any = _MISSING) -> float:
        value = self._get(key, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise MlsysError(f"{self.where(key)} must be a number, got {value!r}")
        return finite(value, self.where(key))

    def str(self, key: str, default: Any = _MISSING) -> str:
        value = self._get(key, default)
        if not isinstance(value, str):
            raise MlsysError(f"{self.where(key)} must be a string, got {value!r}")
        return value

    def any(self, key: builtins.str, default: Any = None) -> Any:
        return self._get(key, default)

    def int_list(self, key: builtins.str, layers: builtins.int, *, flags: builtins.bool = False) -> list[builtins.int] | None:
        """A list of layer indices (flags: one 0/1 entry per layer), or None where the key is absent or null."""
        value = self._get(key, None)
        if value is None:
            return None
        if not isinstance(value, list) or not all(isinstance(v, builtins.int) and not isinstance(v, builtins.bool)
                                                  for v in value):
            raise MlsysError(f"{self.where(key)} must be a list of integers, got {value!r}")
        if flags and (len(value) != layers or not set(value) <= {0, 1}):
            raise MlsysError(f"{self.blame(key, 'num_hidden_layers')}: {key} must hold one 0/1 flag per layer "
                             f"({layers}), got {len(value)} entries")
        if not flags and not all(0 <= v < layers for v in value):
            raise MlsysError(f"{self.blame(key, 'num_hidden_layers')}: {key} lists layers outside 0..{layers - 1}")
        return list(value)


def attention_heads(c: ConfigReader, hidden: int, heads_key: str = "num_attention_heads", *,
          head_dim_default: int | None = None, kv_required: bool = False,
          head_dim_required: bool = False) -> tuple[int, int, int]:
    """(query heads, KV heads, head dim). A missing KV head count means multi-head attention unless
    the family's config class leaves it unset (kv_required: transformers cannot build the model);
    a missing head_dim is head_dim_default, else hidden / heads (head_dim_required: no default)."""
    n = c.int(heads_key)
    kv = c.int("num_key_value_heads") if kv_required else (c.opt_int("num_key_value_heads") or n)
    head_dim = c.int("head_dim") if head_dim_required else c.opt_int("head_dim", head_dim_default)
    if head_dim is None:
        if hidden % n:
            raise MlsysError(f"{c.blame('hidden_size', heads_key)}: hidden size {hidden} is not divisible by {n} heads; set head_dim")
        head_dim = hidden // n
    if n % kv:
        raise MlsysError(f"{c.blame(heads_key, 'num_key_value_heads')}: {n} attention heads are not divisible by {kv} key/value heads")
    return n, kv, head_dim


def layer_types(c: ConfigReader, layers: int, default: list[str]) -> tuple[str, ...]:
    """The config's `layer_types` list (checked as transformers checks it), else the family's default."""
    listed = c.any("layer_types")
    if listed is None:
        return tuple(default)
    if not isinstance(listed, list) or not all(t in ATTENTION_KINDS for t in listed):
        raise MlsysError(f"{c.where('layer_types')} must be a list of {', '.join(ATTENTION_KINDS)}, got {listed!r}")
    if len(listed) != layers:
        raise MlsysError(f"{c.blame('layer_types', 'num_hidden_layers')}: layer_types lists {len(listed)} layers but "
                         f"num_hidden_layers is {layers} (transformers requires one entry per layer; --set both)")
    return tuple(listed)


def sliding(c: ConfigReader, layers: int, *, default: int | None = None, use_key: str | None = None,
            rule: Any = None) -> tuple[int | None, tuple[str, ...]]:
    """(window W, per-layer kinds) of a family whose layers may slide. use_key: a switch that must be
    true for any window (Qwen2's use_sliding_window); rule(i): the family's default kind of layer i
    where the config lists no layer_types (every layer slides when a window is set)."""
    c.read.add("sliding_window")
    if use_key is not None and not c.bool(use_key, False):
        c.any("layer_types")
        return None, ()
    window = c.opt_int("sliding_window", default)
    if window is None:
        c.any("layer_types")
        return None, ()
    kinds = layer_types(c, layers, [rule(i) if rule else "sliding_attention" for i in range(layers)])
    return window, kinds


def check_top_k(c: ConfigReader, top_k: int, experts: int, top_k_key: str, experts_key: str) -> None:
    """Each token is routed to top_k of the experts: never more than there are."""
    if top_k > experts:
        raise MlsysError(f"{c.blame(top_k_key, experts_key)}: {top_k_key} = {top_k} routes each token to more "
                         f"experts than the {experts} there are ({experts_key})")
