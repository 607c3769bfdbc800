"""Field checkers for `schema`: each returns the value (converted where noted) or raises
`BadFrame` with a reason that names the field, e.g. "Append.kind: expected str, got int 3"."""

from __future__ import annotations

from typing import Any

from ._errors import BadFrame

__all__ = ["MAX_DEPTH", "no_ext", "show", "fields", "wrong", "str_", "opt_str", "int_", "float_",
           "bool_", "bytes_", "list_", "strs", "ints", "pairs", "json_", "dict_", "opt_dict"]

MAX_DEPTH = 32


def no_ext(code: int, data: bytes) -> Any:
    raise BadFrame(f"msgpack extension type {code} is not allowed")


def show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def fields(obj: Any, n: int, cls: type) -> list:
    if type(obj) is not list:
        raise BadFrame(f"{cls.__name__}: fields must be an array, got {type(obj).__name__}")
    if len(obj) != n:
        raise BadFrame(f"{cls.__name__}: expected {n} fields, got {len(obj)}")
    return obj


def wrong(what: str, expected: str, value: Any) -> BadFrame:
    return BadFrame(f"{what}: expected {expected}, got {type(value).__name__} {show(value)}")


def str_(v: Any, what: str) -> str:
    if type(v) is not str:
        raise wrong(what, "str", v)
    return v


def opt_str(v: Any, what: str) -> str | None:
    return None if v is None else str_(v, what)


def int_(v: Any, what: str) -> int:
    if type(v) is not int:
        raise wrong(what, "int", v)
    return v


def float_(v: Any, what: str) -> float:
    if type(v) is float:
        return v
    if type(v) is int:
        return float(v)
    raise wrong(what, "float", v)


def bool_(v: Any, what: str) -> bool:
    if type(v) is not bool:
        raise wrong(what, "bool", v)
    return v


def bytes_(v: Any, what: str) -> bytes:
    if type(v) is not bytes:
        raise wrong(what, "bytes", v)
    return v


def list_(v: Any, what: str) -> list:
    if type(v) is not list:
        raise wrong(what, "array", v)
    return v


def strs(v: Any, what: str) -> list[str]:
    for item in list_(v, what):
        str_(item, what + "[]")
    return v


def ints(v: Any, what: str) -> list[int]:
    for item in list_(v, what):
        int_(item, what + "[]")
    return v


def pairs(v: Any, what: str) -> list[tuple[int, int]]:
    out = []
    for item in list_(v, what):
        if type(item) is not list or len(item) != 2 or type(item[0]) is not int or type(item[1]) is not int:
            raise wrong(what + "[]", "[int, int]", item)
        out.append((item[0], item[1]))
    return out


def json_(v: Any, what: str, depth: int = 0) -> Any:
    t = type(v)
    if t is str or t is int or t is float or t is bool or v is None:
        return v
    if depth >= MAX_DEPTH:
        raise BadFrame(f"{what}: nested deeper than {MAX_DEPTH} levels")
    if t is list:
        for item in v:
            json_(item, what, depth + 1)
        return v
    if t is dict:
        for key, item in v.items():
            if type(key) is not str:
                raise wrong(what + " key", "str", key)
            json_(item, what, depth + 1)
        return v
    raise wrong(what, "JSON-like value", v)


def dict_(v: Any, what: str) -> dict:
    if type(v) is not dict:
        raise wrong(what, "map", v)
    return json_(v, what)


def opt_dict(v: Any, what: str) -> dict | None:
    return None if v is None else dict_(v, what)
