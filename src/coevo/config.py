"""Configs as dataclasses: YAML files overlay the defaults, dotted overrides overlay the YAML.

    cfg = load(RunConfig, "configs/shop/eto.yaml", ["model.size=nano", "iterations=2"])

Every key is checked against the dataclass fields and every value against the field's type,
so a wrong key or value is one clear sentence naming it (with a suggestion for typos). A root
dataclass may list the keys it no longer has in `MOVED` (old dotted key -> new dotted key) and
`RETIRED` (old dotted key -> why it is gone), so an old recipe gets the new place by name.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import os
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal, TypeVar

import yaml

T = TypeVar("T")


def coevo_cache(part: str) -> Path:
    """Where coevo keeps what it builds once and reuses (catalogs, databases, converted models):
    `$COEVO_CACHE/<part>`, else `~/.cache/coevo/<part>` (not created here)."""
    base = os.environ.get("COEVO_CACHE")
    return (Path(base) if base else Path.home() / ".cache" / "coevo") / part


class ConfigError(ValueError):
    """A config key or value is wrong; the message names it and how to fix it."""


def _fields(cls: type) -> dict[str, tuple[Any, dataclasses.Field]]:
    hints = typing.get_type_hints(cls)
    return {f.name: (hints[f.name], f) for f in dataclasses.fields(cls) if f.init}


def _is_dataclass_type(tp: Any) -> bool:
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


def _coerce(value: Any, tp: Any, where: str) -> Any:
    """Check `value` against type `tp` (converting what is unambiguous, e.g. 1 -> 1.0)."""
    origin = typing.get_origin(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(tp)
        if value is None and type(None) in options:
            return None
        errors = []
        for option in options:
            if option is type(None):
                continue
            try:
                return _coerce(value, option, where)
            except ConfigError as exc:
                errors.append(str(exc))
        raise ConfigError(errors[0] if errors else f"{where}: cannot be {value!r}.")
    if origin is Literal:
        allowed = typing.get_args(tp)
        if value not in allowed:
            raise ConfigError(
                f"{where} must be one of {', '.join(map(repr, allowed))}, not {value!r}."
            )
        return value
    if origin in (list, tuple):
        if not isinstance(value, list | tuple):
            raise ConfigError(f"{where} must be a list, not {value!r}.")
        (item,) = typing.get_args(tp)[:1] or (Any,)
        items = [_coerce(v, item, f"{where}[{i}]") for i, v in enumerate(value)]
        return items if origin is list else tuple(items)
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{where} must be a mapping, not {value!r}.")
        return dict(value)
    if _is_dataclass_type(tp):
        if isinstance(value, tp):
            return value
        if not isinstance(value, dict):
            raise ConfigError(f"{where} must be a mapping of {tp.__name__} fields, not {value!r}.")
        return build(tp, value, prefix=f"{where}.")
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where} must be true or false, not {value!r}.")
        return value
    if tp is float:
        # PyYAML reads 1e-6 (no dot) as a string; a float field means the number.
        if isinstance(value, str):
            with contextlib.suppress(ValueError):
                value = float(value)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{where} must be a number, not {value!r}.")
        return float(value)
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where} must be an integer, not {value!r}.")
        return value
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{where} must be a string, not {value!r}.")
        return value
    return value


def check_value(value: Any, tp: Any, where: str) -> Any:
    """`value` checked against type `tp` as a recipe value is (converted where unambiguous,
    1 -> 1.0 for a float); a ConfigError naming `where` when it does not fit."""
    return _coerce(value, tp, where)


def _unknown(key: str, known: list[str], prefix: str) -> ConfigError:
    close = difflib.get_close_matches(key, known, n=1)
    hint = f" Did you mean '{prefix}{close[0]}'?" if close else f" Known keys: {', '.join(known)}."
    return ConfigError(f"Unknown config key '{prefix}{key}'.{hint}")


def _dotted(values: dict[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    for key, value in values.items():
        yield f"{prefix}{key}", value
        if isinstance(value, dict):
            yield from _dotted(value, f"{prefix}{key}.")


def _check_moved(cls: type, values: dict[str, Any]) -> None:
    moved: dict[str, str] = getattr(cls, "MOVED", {})
    retired: dict[str, str] = getattr(cls, "RETIRED", {})
    for key, value in _dotted(values):
        # A key that became a group of the same name (server -> server.url) is the group
        # when its value is a mapping.
        if key in moved and not (isinstance(value, dict) and moved[key].startswith(f"{key}.")):
            raise ConfigError(f"Config key '{key}' has moved to '{moved[key]}': write it there.")
        if key in retired:
            raise ConfigError(f"Config key '{key}' is gone: {retired[key]}.")


def upgrade(values: dict[str, Any], root: type) -> dict[str, Any]:
    """A config saved by an earlier coevo (a run directory's `config.yaml`) brought up to date
    by its root dataclass: every key of `root.MOVED` in its new place, every key of
    `root.RETIRED` left out. The one shim that lets older runs be resumed, compared and
    started from."""
    moved: dict[str, str] = getattr(root, "MOVED", {})
    retired: dict[str, str] = getattr(root, "RETIRED", {})
    out: dict[str, Any] = {}
    for key, value in _dotted(values):
        if isinstance(value, dict) and value:
            continue  # its leaves come on their own
        key = moved.get(key, key)
        if key not in retired:
            _set_dotted(out, key, value)
    return out


def build(cls: type[T], values: dict[str, Any], prefix: str = "") -> T:
    """An instance of dataclass `cls` from a (nested) mapping, checking keys and types."""
    if not prefix:
        _check_moved(cls, values)
    fields = _fields(cls)
    kwargs = {}
    for key, value in values.items():
        if key not in fields:
            raise _unknown(key, list(fields), prefix)
        tp, f = fields[key]
        nested = _is_dataclass_type(tp) and isinstance(value, dict)
        if nested and f.default_factory is not dataclasses.MISSING:
            # Over the field's own default (DpoConfig's optim has DPO's lr and schedule), not
            # over the defaults of the section's class.
            value = merge(to_dict(f.default_factory()), value)
        kwargs[key] = _coerce(value, tp, f"{prefix}{key}")
    try:
        instance = cls(**kwargs)
    except TypeError as exc:
        raise ConfigError(f"{prefix or cls.__name__}: {exc}") from exc
    validate = getattr(instance, "validate", None)
    if callable(validate):
        try:
            validate()
        except ConfigError:
            raise
        except ValueError as exc:  # a section's own check (e.g. a trainer config's)
            message = str(exc)
            own = f"{cls.__name__}."
            if prefix and message.startswith(own):  # name the recipe's key: sft.x, not SftConfig.x
                message = prefix + message[len(own) :]
            raise ConfigError(message) from None
    return instance


def to_dict(config: Any) -> dict[str, Any]:
    return dataclasses.asdict(config)


def _set_dotted(tree: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, leaf = dotted.split(".")
    node = tree
    for part in parents:
        child = node.get(part)
        if not isinstance(child, dict):
            child = {}
            node[part] = child
        node = child
    node[leaf] = value


def merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def parse_overrides(overrides: list[str]) -> dict[str, Any]:
    """`["sft.optim.lr=1e-6", "iterations=2"]` -> nested mapping, values read as YAML scalars."""
    tree: dict[str, Any] = {}
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(
                f"Override {item!r} is not of the form key=value (e.g. sft.optim.lr=1e-6)."
            )
        value = yaml.safe_load(raw) if raw.strip() else ""
        _set_dotted(tree, key.strip(), value)
    return tree


def read_yaml(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"Config file {str(path)!r} does not exist.")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"Config file {str(path)!r} is not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"Config file {str(path)!r} must hold a mapping at the top.")
    # A recipe can build on another: `base: ../demo.yaml` (relative to this file).
    base = data.pop("base", None)
    if base is not None:
        data = merge(read_yaml(path.parent / base), data)
    return data


def load(cls: type[T], path: str | Path | None = None, overrides: list[str] | None = None) -> T:
    """Defaults of `cls`, overlaid by the YAML file, overlaid by dotted overrides."""
    values = read_yaml(path) if path is not None else {}
    values = merge(values, parse_overrides(overrides or []))
    return build(cls, values)


def save(config: Any, path: str | Path) -> None:
    Path(path).write_text(yaml.safe_dump(to_dict(config), sort_keys=False))
