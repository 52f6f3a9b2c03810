"""config/README.md, generated from the schema's descriptions so that every key is documented once.

`python -m brownformer.config.readme > config/README.md` regenerates it; a test checks that the
committed file is what this renders and that every schema key carries a description.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Iterator

import yaml

__all__ = ["SCHEMA", "iter_keys", "undocumented", "render"]

SCHEMA = Path(__file__).resolve().parents[3] / "workflow" / "schemas" / "config.schema.yaml"

_INTRO = """# Configuration

Every stage reads one YAML config, validated against `workflow/schemas/config.schema.yaml`
(by Snakemake's `validate()` and by `brownformer` when a stage runs alone). The configs here:

| file | what it runs |
|---|---|
| `config.yaml` | the embedded default: CPU, no downloads (digits and pydoc text), about 12 minutes on 2 cores |
| `ci.yaml` | a tiny version of the default for the end-to-end test |
| `paper.yaml` | the paper's scale on a GPU (CIFAR-10, downloaded only with `download: true`) |
| `scaling.yaml`, `scaling_ci.yaml` | the depth and width scaling study, and its tiny test version |

Use another config with `snakemake --cores all --configfile config/<file>.yaml`, or override one key
with `--config key=value` (Snakemake) or `--set key=value` (the `brownformer` CLI).

This file is generated from the schema's descriptions (`python -m brownformer.config.readme >
config/README.md`); a test keeps them in step. `*` in a key path stands for a name you choose (a
dataset, a model, an optimizer); `[]` for an item of a list.
"""


def _resolve(node: dict, root: dict) -> dict:
    ref = node.get("$ref")
    if not ref:
        return node
    target: Any = root
    for part in ref.lstrip("#/").split("/"):
        target = target[part]
    merged = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
    if "properties" in node and "properties" in target:  # keys beside a $ref add to the referenced ones
        merged["properties"] = {**target["properties"], **node["properties"]}
    return merged


def _kind(node: dict) -> str:
    if "enum" in node:
        return " | ".join(_value(v) for v in node["enum"])
    t = node.get("type", "object" if "properties" in node else "")
    return " or ".join(t) if isinstance(t, list) else str(t)


def iter_keys(schema: dict, root: dict | None = None, prefix: str = "") -> Iterator[tuple[str, dict]]:
    """(dotted path, schema node) for every key the schema names, depth first."""
    root = root or schema
    node = _resolve(schema, root)
    for name, child in node.get("properties", {}).items():
        path = f"{prefix}{name}"
        child = _resolve(child, root)
        yield path, child
        yield from iter_keys(child, root, path + ".")
    extra = node.get("additionalProperties")
    if isinstance(extra, dict):
        yield from iter_keys(extra, root, prefix + "*.")
    items = node.get("items")
    if isinstance(items, dict) and "properties" in _resolve(items, root):
        yield from iter_keys(items, root, prefix.rstrip(".") + "[].")
    for alt in node.get("oneOf", []) + node.get("anyOf", []):
        yield from iter_keys(alt, root, prefix)


def undocumented(schema: dict) -> list[str]:
    """Key paths without a description."""
    return [path for path, node in iter_keys(schema) if not node.get("description")]


def _value(v: Any) -> str:
    """A default or enum value as YAML writes it (null, true, false)."""
    return "null" if v is None else str(v).lower() if isinstance(v, bool) else str(v)


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ").strip()


def render(schema: dict | None = None) -> str:
    """The README's text: the intro, then one table per top-level key."""
    schema = schema or yaml.safe_load(SCHEMA.read_text())
    out = [_INTRO]
    seen: set[str] = set()
    for path, node in iter_keys(schema):
        if path in seen:
            continue
        seen.add(path)
        top = path.split(".")[0].split("[")[0]
        default = node.get("default", "")
        if isinstance(default, list) and all(isinstance(v, (int, float, str)) for v in default) and default:
            default = "[" + ", ".join(map(_value, default)) + "]"  # a margin, a list of names: shown as written
        default = "" if isinstance(default, (dict, list)) else _value(default) if "default" in node else ""
        if "." not in path and "[" not in path:
            out.append(f"\n## `{top}`\n\n{_cell(node.get('description', ''))}\n")
            nested = any(k.startswith((path + ".", path + "[")) for k, _ in iter_keys(schema))
            out.append("| key | type | default | description |\n|---|---|---|---|" if nested
                       else f"Type: {_cell(_kind(node)) or 'see the schema'}" + (f"; default: `{default}`." if default else "."))
            continue
        out.append(f"| `{path}` | {_cell(_kind(node))} | {_cell(default)} | {_cell(node.get('description', ''))} |")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())
