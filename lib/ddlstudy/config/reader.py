"""The bounded YAML reader: a params file is read only within limits (size before parsing,
nodes after alias expansion, nesting depth), and layered files merge key by key. Bad input is a
one-line ParamsError naming the file and the fix.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from ddlstudy.config.bounds import MAX_DEPTH, MAX_FILE_BYTES, MAX_NODES, ParamsError, _short


def deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys, deep nesting and alias bombs before building
    anything: the composed node graph is measured as if every alias were expanded."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if isinstance(key, (dict, list)):
                raise ParamsError(f"line {key_node.start_mark.line + 1}: a key must be a "
                                  "plain name, not a mapping or list")
            if key in seen:
                raise ParamsError(f"line {key_node.start_mark.line + 1}: duplicate key "
                                  f"{_short(key)}; keep one")
            seen.add(key)
        return super().construct_mapping(node, deep=deep)

    def get_single_data(self) -> Any:
        node = self.get_single_node()
        if node is None:
            return None
        _expanded_size(node, 0, {}, set())
        return self.construct_document(node)


def _expanded_size(node: yaml.Node, depth: int, memo: dict[int, int], active: set[int]) -> int:
    """Nodes under `node` with aliases expanded (memoised per node, so the walk is linear)."""
    if depth > MAX_DEPTH:
        raise ParamsError(f"line {node.start_mark.line + 1}: nested more than {MAX_DEPTH} "
                          "levels deep; flatten it")
    if id(node) in memo:
        return memo[id(node)]
    if id(node) in active:
        raise ParamsError(f"line {node.start_mark.line + 1}: an alias refers to itself; "
                          "remove the recursive alias")
    active.add(id(node))
    total = 1
    if isinstance(node, yaml.SequenceNode):
        children = list(node.value)
    elif isinstance(node, yaml.MappingNode):
        children = [n for pair in node.value for n in pair]
    else:
        children = []
    for child in children:
        total += _expanded_size(child, depth + 1, memo, active)
        if total > MAX_NODES:
            raise ParamsError(f"expands to more than {MAX_NODES} values (YAML aliases?); a "
                              "params file is a few keys, write them out")
    active.discard(id(node))
    memo[id(node)] = total
    return total


def _read_text(path: Path) -> str:
    """The file as text, or one line on why it cannot be a params file."""
    if not path.exists():
        raise ParamsError(f"{path}: params file not found; pass an existing file, e.g. "
                          "params/default.yaml")
    if not path.is_file():
        raise ParamsError(f"{path}: not a regular file (a directory?); pass a YAML file")
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise ParamsError(f"{path}: {size} bytes is over the {MAX_FILE_BYTES}-byte limit "
                              "for a params file; is this the right file?")
        with path.open("rb") as f:
            raw = f.read(MAX_FILE_BYTES + 1)
    except OSError as err:
        raise ParamsError(f"{path}: cannot read ({err.strerror or err}); check the path and "
                          "permissions") from None
    if len(raw) > MAX_FILE_BYTES:
        raise ParamsError(f"{path}: over the {MAX_FILE_BYTES}-byte limit for a params file")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = "\0"
    if "\0" in text or any(ord(c) < 32 and c not in "\t\n\r" for c in text):
        raise ParamsError(f"{path}: binary data, not YAML text; pass a params .yaml file")
    return text


def _flow_depth(text: str) -> int:
    """Deepest [ / { nesting outside quotes and comments, in one linear pass: PyYAML's
    scanner is quadratic in it (20,000 brackets take minutes), so it is checked first."""
    depth = deepest = 0
    quote = ""
    prev = "\n"
    for ch in text:
        if quote:
            if ch == quote or (ch == "\n" and quote == "#"):
                quote = ""
        elif ch in "'\"" and prev in " \t\n[{,:":
            quote = ch
        elif ch == "#" and prev in " \t\n":
            quote = "#"
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth = max(0, depth - 1)
        prev = ch
    return deepest


def _read_yaml(path: Path) -> dict[str, Any]:
    text = _read_text(path)
    if _flow_depth(text) > MAX_DEPTH:
        raise ParamsError(f"{path}: brackets nested more than {MAX_DEPTH} levels deep; "
                          "flatten it")
    try:
        data = yaml.load(text, Loader=_BoundedLoader) or {}  # noqa: S506 - a SafeLoader
    except ParamsError as err:
        raise ParamsError(f"{path}: {err}") from None
    except RecursionError:
        raise ParamsError(f"{path}: nested too deeply to parse; flatten it") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise ParamsError(f"{path}:{where} is not valid YAML "
                          f"({_short(getattr(err, 'problem', err), 80)}); fix the syntax"
                          ) from None
    except (ValueError, TypeError) as err:  # e.g. an int of more than 4300 digits
        raise ParamsError(f"{path}: a value cannot be read ({_short(str(err), 80)}); fix it"
                          ) from None
    if not isinstance(data, dict):
        raise ParamsError(f"{path}: top level must be a mapping of keys (run_id:, cluster:, ...), "
                          f"not a {type(data).__name__}")
    return data
