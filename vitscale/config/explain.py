"""pydantic's errors in our words, for a config and a grid file alike: one line per rejected
key, naming the key, the value and what is allowed there, read from the key's declaration
(its type, its choices, its range). Rejected keys are dropped rather than fatal, so that
what is left is still checked: every problem is reported at once.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import types
import typing
from typing import Annotated, Any, Literal, NamedTuple

import annotated_types
from pydantic import BaseModel, ValidationError


class Rejected(NamedTuple):
    path: tuple  # where the key is in the data: ("optim", "lr"), ("blocks", 1, "axes", "seed")
    place: tuple  # the entry of a list or mapping of sections it is in: ("blocks", 1); ()
    message: str  # "optim.lr must be non-negative, got -0.1"


def validate(model: type[BaseModel], data: dict) -> tuple[dict, list[Rejected]]:
    """``(kept, rejected)``: ``data`` without the keys ``model`` rejects, and each of those."""
    try:
        model.model_validate(data)
        return data, []
    except ValidationError as e:  # one message per key, however many union members failed
        found = {r.path: r for r in (_explain(error, model, data) for error in e.errors())}
    kept = copy.deepcopy(data)
    for *parents, last in found:
        node = _value(kept, parents)
        if isinstance(node, dict):
            node.pop(last, None)
        elif isinstance(node, list):  # an entry that is no mapping: an empty one instead
            node[last] = {}
    return kept, list(found.values())


def _explain(error: dict, model: type[BaseModel], data: dict) -> Rejected:
    if "[key]" in error["loc"]:  # a mapping's key that is no string (YAML's 1:, true:)
        path = tuple(error["loc"][: error["loc"].index("[key]")])
        where = ".".join(map(str, path[:-1]))
        return Rejected(path, (), f"{where}: keys must be strings, got {path[-1]!r}")
    owner, hint, field, path, place = _walk(model, error["loc"])
    key, value, bare = ".".join(map(str, path[len(place) :])), _value(data, path), _bare(hint)
    if error["type"] == "extra_forbidden":
        *parents, last = key.split(".")
        if close := difflib.get_close_matches(last, list(owner.model_fields), n=1):
            said = f"unknown key {key!r}; did you mean {'.'.join((*parents, close[0]))}?"
        else:
            said = f"unknown key {key!r}; valid keys: {', '.join(owner.model_fields)}"
    elif _is_section(bare):
        said = f"{key} must be a section (mapping), got {value!r}".lstrip()
    elif error["type"] == "finite_number":
        said = f"{key}: expected finite numbers, got {value!r}"
    elif error["type"] in _OUT_OF_RANGE:
        said = f"{key} must be {_allowed(hint, field.metadata if field else ())}, got {value}"
    elif (choices := _choices(hint)) and isinstance(value, str):
        said = f"{key}: unknown value {value!r}; valid: {', '.join(map(repr, choices))}"
    else:
        said = f"{key}: expected {_type_name(hint)}, got {value!r}"
    return Rejected(path, place, said)


def _walk(model: type[BaseModel], loc: tuple) -> tuple:
    """``(owner, hint, field, path, place)`` of the key an error's ``loc`` is about: down
    through sections, entries of lists or mappings of sections (the last one entered is
    ``place``) and a mapping's keys (``axes.seed``), to the first plain value."""
    owner, hint, field, path, place = model, model, None, (), ()
    for part in loc:
        bare = _bare(hint)
        if _is_section(bare):
            owner, field, path = bare, bare.model_fields.get(part), (*path, part)
            hint = typing.get_type_hints(bare, include_extras=True).get(part)
            if hint is None:  # an unknown key
                break
        elif typing.get_origin(bare) in (dict, list):
            item = typing.get_args(bare)[-1]
            if typing.get_origin(bare) is list and not _is_section(_bare(item)):
                break  # an item of a plain list: the list is the key
            hint, field, path = item, None, (*path, part)
            place = path if _is_section(_bare(item)) else place
        else:
            break
    return owner, hint, field, path, place


def _bare(hint: Any) -> Any:
    """``Annotated[X, ...]`` -> X; ``X | None`` -> X; others unchanged."""
    if typing.get_origin(hint) is Annotated:
        return _bare(typing.get_args(hint)[0])
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    union = typing.get_origin(hint) in (typing.Union, types.UnionType)
    return _bare(args[0]) if union and len(args) == 1 else hint


def _is_section(hint: Any) -> bool:
    return isinstance(hint, type) and issubclass(hint, BaseModel)


def _value(data: Any, path: Any) -> Any:
    for part in path:
        if isinstance(data, dict):
            data = data.get(part)
        elif isinstance(data, list) and isinstance(part, int) and part < len(data):
            data = data[part]
        else:
            return None
    return data


_OUT_OF_RANGE = {
    "greater_than", "greater_than_equal", "less_than", "less_than_equal", "too_short", "too_long"
}  # fmt: skip


def _allowed(hint: Any, metadata: Any) -> str:
    """A key's declared range in words: "positive", "in [0, 1)", "a list of 2 values, each
    in [0, 1)"."""
    limits = _limits(hint, metadata)
    if list not in (_bare(hint), typing.get_origin(_bare(hint))):
        return _range(limits)
    low, high = limits.get("min_length"), limits.get("max_length")
    count = f"{low} values" if low and low == high else f"at least {low} value" if low else "values"
    each = f", each {_range(limits['item'])}" if _range(limits.get("item", {})) else ""
    return f"a list of {count}{'s' if low and low > 1 and low != high else ''}{each}"


def _limits(hint: Any, metadata: Any = ()) -> dict[str, Any]:
    """The limits a key's type states (``{"ge": 0, "lt": 1}``), its list items' as "item"."""
    found: dict[str, Any] = {}
    for item in metadata:  # a Field(...) inside Annotated carries its own
        for limit in getattr(item, "metadata", [item]):
            if isinstance(limit, annotated_types.BaseMetadata):
                found.update(dataclasses.asdict(limit))
    if typing.get_origin(hint) is Annotated:
        return found | _limits(typing.get_args(hint)[0], hint.__metadata__)
    if typing.get_origin(hint) is list:
        return found | {"item": _limits(typing.get_args(hint)[0])}
    for arg in typing.get_args(hint):  # X | None
        found |= _limits(arg)
    return found


def _range(limits: dict[str, Any]) -> str:
    low = next(((k, limits[k]) for k in ("gt", "ge") if k in limits), None)
    high = next(((k, limits[k]) for k in ("lt", "le") if k in limits), None)
    if low and high:
        return f"in {'(' if low[0] == 'gt' else '['}{low[1]}, {high[1]}{')' if high[0] == 'lt' else ']'}"
    words = {("gt", 0): "positive", ("ge", 0): "non-negative"}
    if low:
        return words.get(low, f"{'greater than' if low[0] == 'gt' else 'at least'} {low[1]}")
    return f"{'below' if high[0] == 'lt' else 'at most'} {high[1]}" if high else ""


def _choices(hint: Any) -> tuple[str, ...]:
    """The values a ``Literal`` key (or ``Literal | None``) allows; () for other keys."""
    if typing.get_origin(hint) is Literal:
        return typing.get_args(hint)
    return next((_choices(h) for h in typing.get_args(hint) if _choices(h)), ())


_TYPE_WORDS = {
    int: "a whole number",
    float: "a number",
    str: "a string",
    bool: "true or false",
    list: "a list",
    dict: "a mapping",
}


def _type_name(hint: Any) -> str:
    """``int | None`` -> "a whole number or null": what the user may write there."""
    hint = hint if typing.get_origin(hint) is not Annotated else typing.get_args(hint)[0]
    args, origin = typing.get_args(hint), typing.get_origin(hint)
    if origin is Literal:
        return "a string"
    if origin is list:
        return f"a list of {_type_name(args[0]).removeprefix('a ')}s"
    if origin is dict or _is_section(hint):
        return "a mapping"
    if not args:
        return _TYPE_WORDS.get(hint, "a value")
    words = " or ".join(_type_name(a) for a in args if a is not type(None))
    return words + (" or null" if type(None) in args else "")
