"""Config validation: the JSON schema (with its defaults filled in) and the cross-references it cannot express.

Kept apart from brownformer.config (the dataclasses) so each stays one job; brownformer.config re-exports
ConfigError, validate_dict and apply_overrides.
"""
from __future__ import annotations

import copy
import difflib
import functools
from pathlib import Path
from typing import Any, Mapping

import yaml

from brownformer.config.tuned import SCHEDULE_KEYS

__all__ = ["ConfigError", "SCHEMA_PATH", "load_schema", "validate_dict", "apply_overrides", "config_problems"]

SCHEMA_PATH = Path(__file__).with_name("config.schema.yaml")



class ConfigError(ValueError):
    """A configuration problem; the message names the offending key."""


def _check_optimizer_keys(data: dict, source: str) -> None:
    """Every optimizer (and tuned) setting is one its type takes (brownformer.optim.registry)."""
    from brownformer.optim.registry import REGISTRY  # torch-free at import

    def check(key: str, type_: str, settings: Mapping[str, Any]) -> None:
        if type_ not in REGISTRY:  # the registry is the one list of optimizer types (the schema has no enum)
            raise ConfigError(f"{source}: key '{key}.type': unknown optimizer type {type_!r}; known: "
                              f"{', '.join(REGISTRY)}")
        extra = sorted(set(settings) - {"type", "lr"} - set(REGISTRY[type_].keys))
        if extra:
            raise ConfigError(f"{source}: key '{key}.{extra[0]}': not a setting of optimizer type {type_!r}; "
                              f"its settings: lr, {', '.join(REGISTRY[type_].keys)}")

    for name, o in data["optimizers"].items():
        check(f"optimizers.{name}", o["type"], o)
    for model, per_opt in (data.get("tuned") or {}).items():
        if model not in data["models"]:
            raise ConfigError(f"{source}: key 'tuned.{model}': unknown model; known: {sorted(data['models'])}")
        for name, settings in per_opt.items():
            if name not in data["optimizers"]:
                raise ConfigError(f"{source}: key 'tuned.{model}.{name}': unknown optimizer; "
                                  f"known: {sorted(data['optimizers'])}")
            check(f"tuned.{model}.{name}", data["optimizers"][name]["type"],
                  {k: v for k, v in settings.items() if k not in SCHEDULE_KEYS})


def _check_schedules(data: dict, source: str) -> None:
    """The warm-up ends before the cosine's horizon, in `train` and in every `tuned` entry as its runs resolve it
    (the entry's key, else train's; the horizon defaults to the model's steps)."""
    train = data["train"]
    where = [("train", train, train.get("steps"))]
    for model, per_opt in (data.get("tuned") or {}).items():
        steps = data["models"][model].get("steps") or train["steps"]
        where += [(f"tuned.{model}.{name}", {**train, **{k: s[k] for k in SCHEDULE_KEYS if k in s}}, steps)
                  for name, s in per_opt.items() if any(k in s for k in SCHEDULE_KEYS)]
    for key, sched, steps in where:
        warmup, horizon = sched.get("warmup_steps", 0), sched.get("horizon") or steps
        if warmup >= horizon:
            raise ConfigError(f"{source}: key '{key}.warmup_steps': warm-up {warmup} must end before the schedule's "
                              f"horizon {horizon} (the step at which the cosine reaches its floor)")


@functools.lru_cache(maxsize=1)
def _schema_text() -> str:
    return SCHEMA_PATH.read_text()


#: libyaml's safe loader where PyYAML has it: 10x faster than the pure-Python one on the schema (0.2 CPU-s of
#: every CLI call, i.e. of every pipeline job)
FAST_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_schema() -> dict:
    """The config schema (a fresh copy: callers may not change the cached one)."""
    return yaml.load(_schema_text(), Loader=FAST_SAFE_LOADER)


def _with_defaults(validator_cls):
    """Extend a jsonschema validator to fill in `default` values (as Snakemake's validate does)."""
    import jsonschema
    validate_props = validator_cls.VALIDATORS["properties"]

    def set_defaults(validator, properties, instance, schema):
        if isinstance(instance, dict):
            for prop, sub in properties.items():
                if "default" in sub and prop not in instance:
                    instance[prop] = copy.deepcopy(sub["default"])
        yield from validate_props(validator, properties, instance, schema)

    return jsonschema.validators.extend(validator_cls, {"properties": set_defaults})


def _key_path(error) -> str:
    return ".".join(str(p) for p in error.absolute_path) or "<top level>"


#: longest schema message quoted (a type error repeats the whole offending value, e.g. a model's mapping)
_MAX_MESSAGE = 160
#: at most this many problems are listed (then a count of the rest): a reader's screen, not a dump
MAX_PROBLEMS = 20


def _problem_lines(error, source: str) -> list[str]:
    """One line per problem of a schema error: an unknown key with the allowed keys at its level and the close
    matches (difflib), else the key and the schema's message, shortened."""
    path = _key_path(error)
    if error.validator == "additionalProperties" and error.schema.get("additionalProperties") is False \
            and isinstance(error.instance, dict):
        allowed = sorted(error.schema.get("properties") or {})
        lines = []
        for key in sorted(set(error.instance) - set(allowed)):
            where = key if path == "<top level>" else f"{path}.{key}"
            close = difflib.get_close_matches(str(key), allowed, n=3)
            hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
            lines.append(f"{source}: key '{where}': unknown key {str(key)!r}{hint} "
                         f"(allowed here: {', '.join(allowed)})")
        return lines
    msg = error.message if len(error.message) <= _MAX_MESSAGE else error.message[:_MAX_MESSAGE - 3] + "..."
    return [f"{source}: key '{path}': {msg}"]


def _schema_errors(raw: Mapping[str, Any]):
    import jsonschema  # imported here so models/optimizers import on machines without it

    data = copy.deepcopy(dict(raw))
    validator = _with_defaults(jsonschema.Draft202012Validator)(load_schema())
    return data, sorted(validator.iter_errors(data), key=lambda e: list(e.absolute_path))


def config_problems(raw: Mapping[str, Any], *, source: str = "config") -> list[str]:
    """Every schema problem of a config mapping, one line each (at most MAX_PROBLEMS, then a count), then the
    first cross-reference problem once the schema holds; empty when the config is valid. For the workflow, which
    prints these before (instead of) Snakemake's own schema dump."""
    data, errors = _schema_errors(raw)
    lines = [line for e in errors for line in _problem_lines(e, source)]
    if not lines:
        try:
            _check_references(data, source)
        except ConfigError as exc:
            lines.append(str(exc))
    if len(lines) > MAX_PROBLEMS:
        lines = lines[:MAX_PROBLEMS - 1] + [f"... and {len(lines) - MAX_PROBLEMS + 1} more problems"]
    return lines


def validate_dict(raw: Mapping[str, Any], *, source: str = "config") -> dict:
    """Validate a config mapping against the schema, fill defaults, check cross-references.

    Raises:
        ConfigError: naming the key and what was expected (the first problem, in one line).
    """
    data, errors = _schema_errors(raw)
    if errors:
        raise ConfigError(_problem_lines(errors[0], source)[0])
    _check_references(data, source)
    return data


def _check_references(data: dict, source: str) -> None:
    for name, m in data["models"].items():
        if m["dataset"] not in data["datasets"]:
            raise ConfigError(f"{source}: key 'models.{name}.dataset': unknown dataset {m['dataset']!r}; "
                              f"known: {sorted(data['datasets'])}")
        if m["d_model"] % m["n_heads"]:
            raise ConfigError(f"{source}: key 'models.{name}.n_heads': {m['n_heads']} does not divide "
                              f"d_model={m['d_model']}")
        kind = data["datasets"][m["dataset"]]["source"]
        if (m["arch"] == "vit") != (kind in ("digits", "cifar10")):
            raise ConfigError(f"{source}: key 'models.{name}.arch': {m['arch']!r} does not fit dataset source {kind!r} "
                              "(vit needs images, lm needs text)")
    for name, ds in data["datasets"].items():
        if ds.get("augment") and ds["source"] != "cifar10":
            raise ConfigError(f"{source}: key 'datasets.{name}.augment': crop+flip augmentation is only defined "
                              f"for cifar10 (flipping {ds['source']} changes what the input means)")
        if ds["source"] == "textfile" and not ds.get("path"):
            raise ConfigError(f"{source}: key 'datasets.{name}.path': a textfile dataset needs the path of a UTF-8 file")
        if ds["source"] == "cifar10" and not ds.get("data_dir"):
            raise ConfigError(f"{source}: key 'datasets.{name}.data_dir': cifar10 needs the folder holding "
                              "cifar-10-python.tar.gz (set download: true to fetch it there)")
    for i, block in enumerate(data["grid"]):
        for m in block["models"]:
            if m not in data["models"]:
                raise ConfigError(f"{source}: key 'grid.{i}.models': unknown model {m!r}; known: {sorted(data['models'])}")
        for o in block["optimizers"]:
            if o not in data["optimizers"]:
                raise ConfigError(f"{source}: key 'grid.{i}.optimizers': unknown optimizer {o!r}; "
                                  f"known: {sorted(data['optimizers'])}")
        if block.get("stop_at_target"):
            if block.get("probes", True):
                raise ConfigError(f"{source}: key 'grid.{i}.stop_at_target': a block that stops at the target must "
                                  "set probes: false (probes need the whole run)")
            targets = (data.get("report") or {}).get("targets") or {}
            missing = [m for m in block["models"] if m not in targets]
            if missing:
                raise ConfigError(f"{source}: key 'grid.{i}.stop_at_target': report.targets has no target for "
                                  f"{', '.join(missing)}")
    for i, block in enumerate(data.get("replicas") or []):
        for key, known in (("models", data["models"]), ("optimizers", data["optimizers"])):
            for name in block[key]:
                if name not in known:
                    raise ConfigError(f"{source}: key 'replicas.{i}.{key}': unknown {key[:-1]} {name!r}; "
                                      f"known: {sorted(known)}")
    report = data.get("report") or {}
    both = sorted(set(report.get("screened_baselines") or ()) & set(report.get("baselines") or ()))
    if both:
        raise ConfigError(f"{source}: key 'report.screened_baselines': {', '.join(both)} also in report.baselines "
                          "(a baseline is either evaluated or screened out at tuning, not both)")
    _check_optimizer_keys(data, source)
    _check_schedules(data, source)
    for key, (low, high) in data.get("stats", {}).get("margins", {}).items():
        if low > high:
            raise ConfigError(f"{source}: key 'stats.margins.{key}': low {low} is above high {high}")
    for name in list(data["models"]) + list(data["optimizers"]):
        if "__" in name or "/" in name:
            raise ConfigError(f"{source}: name {name!r} may not contain '__' or '/' (used in run ids and paths)")


def apply_overrides(raw: dict, overrides: list[str] | None) -> dict:
    """Apply `key.sub=value` overrides (value parsed as YAML) to a raw config mapping."""
    data = copy.deepcopy(raw)
    for item in overrides or []:
        if "=" not in item:
            raise ConfigError(f"--set {item!r}: expected key=value")
        key, value = item.split("=", 1)
        node = data
        parts = key.split(".")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
            if not isinstance(node, dict):
                raise ConfigError(f"--set {item!r}: {p!r} is not a mapping")
        node[parts[-1]] = yaml.safe_load(value)
    return data


# Pre-registered equivalence margins: a value inside counts as "Brownian" (or supports the claim). Their
# one home is the schema (`stats.margins`, each key's default and the reason for it); read once here
# (brownformer.config re-exports them).
DEFAULT_MARGINS: dict[str, tuple[float, float]] = {
    key: tuple(prop["default"]) for key, prop in load_schema()["properties"]["stats"]["properties"]["margins"]
    ["properties"].items() if "default" in prop}


# Claim 3's fitting window, fixed before the data (stats/diffusion/local_slope.py): displacements start at the first capture at
# or after `start_step` (None: train.warmup_steps), and only lags of at least the run's momentum time are used
# (stats.momentum_times x 1/(1 - beta) of its own optimizer: ExperimentConfig.analysis_window).
DEFAULT_WINDOW: dict[str, Any] = {
    key: prop["default"] for key, prop in load_schema()["properties"]["stats"]["properties"]["window"]
    ["properties"].items()}
