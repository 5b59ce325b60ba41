"""A recipe: a named list of stages and their settings, read from a small YAML or TOML file.

A recipe says everything a compression run needs besides the model and the corpus, so the settings
that belong together travel together (llm-compressor's recipes are the model: a list of stages, each
with its modifiers). Three stage types chain, each taking the previous stage's model:

``distill``
    ``sparsecse train --objective distill``: the model learns a teacher's embeddings of (a seeded sample
    of) the corpus, and the best STS-B dev checkpoint is kept. ``teacher`` is a model, an ensemble
    ``A+B``, or ``@NAME``: the model an earlier stage made (a teacher assistant).
``prune``
    ``sparsecse compress``: prune to ``keep_flops`` (or ``keep_params``) in ``steps`` steps with
    reconstruction on the corpus (or the file ``reconstruct`` names), then shrink.
``export``
    ``sparsecse export``: an ONNX or OpenVINO copy of the final model beside it.

A stage type is one class, a :class:`~sparsecse.recipes.stage_types.Stage` subclass (a frozen dataclass whose
fields are the stage's settings, ``name`` first; defining it registers it in ``STAGE_TYPES`` under its ``type``).
This module, the runner (:mod:`sparsecse.recipes.runner`) and the card (:mod:`sparsecse.recipes.card`) call its
members and never ask for its type:

- ``check(where) -> self``: every setting checked; ``where`` (``"recipe.yaml, stage 2 (prune)"``) starts the
  one sentence a bad value raises as :class:`~sparsecse.errors.SparseCSEError`;
- ``makes_model``: whether the stage makes the model the next stage takes;
- ``describe() -> str``: one line for ``--list-recipes`` and the model card;
- ``run(index, model, out, ctx)`` and ``card_section(record, figures)``: what it does and what the card says
  of it; ``model_refs``, ``budget_ref``, ``comes_last``, ``needs_target``, ``makes_budget``: what it takes from
  and gives to the other stages, which this module checks.

Example (``sparsecse compress --list-recipes`` prints the shipped ones)::

    name: my-recipe
    stages:
      - {name: prune, type: prune, keep_flops: 0.5, steps: 2}
      - {name: student, type: distill, teacher: "@input", loss: mse, epochs: 1}
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparsecse.data.eval_data import KNOWN_TASKS, is_pairs_file, known_task
from sparsecse.data.text_files import what_is
from sparsecse.errors import SparseCSEError
# registers the stage types sparsecse ships (refusals list them sorted, whichever module registered one first)
from sparsecse.recipes import stages as _shipped_stages, budget_stage as _budget_stage  # noqa: F401, I001
from sparsecse.recipes.stage_types import INPUT_REF, STAGE_TYPES, check_text
from sparsecse.targets.spec import Target

SHAPE_DEFAULTS = {f.name: f.default for f in dataclasses.fields(Target)
                  if f.name in ("threads", "metric", "timing_sentences", "max_spread", "when_busy")}

SHIPPED_DIR = Path(__file__).resolve().parent / "shipped"
EVALUATION_GROUPS = ("sts", "transfer")  # the task groups a recipe's test figures may cover
EVALUATION_ONLY = ("test", "tasks", "transfer_fasttest")  # evaluation settings that make no other model
SUFFIXES = (".yaml", ".yml", ".toml")




@dataclass(frozen=True)
class Evaluation:
    """The final model's evaluation: the 7 STS tasks with ``bootstrap`` replicates, paired against
    ``compare_with`` (a model, optional), and its encode speed against the input model. ``test: false``
    stops at STS-B dev (and speed): for the runs that choose settings, so that test figures are computed
    once, for the setting chosen (``--set evaluation.test=false``). ``tasks`` names the task groups the
    test figures cover: ``sts`` (the 7 STS tasks) and ``transfer`` (the 7 SentEval transfer tasks, accuracy
    with intervals, paired against ``compare_with`` too); both by default, as every card reports both.
    ``transfer_fasttest`` (default true) runs the transfer tasks with SentEval's fast settings (SimCSE's
    ``fasttest``: 5 folds, RMSprop); false runs the papers' 10-fold protocol (about 20 minutes per model
    on 2 cores)."""

    bootstrap: int = 1000
    compare_with: str | None = None
    speed: bool = True
    test: bool = True
    tasks: list = field(default_factory=lambda: list(EVALUATION_GROUPS))
    transfer_fasttest: bool = True

    def check(self, where: str) -> "Evaluation":
        """The evaluation block with every setting checked (``where`` starts the one sentence a bad one raises)."""
        if isinstance(self.bootstrap, bool) or not isinstance(self.bootstrap, int) or not 0 <= self.bootstrap <= 100_000:
            raise SparseCSEError(f"{where}: bootstrap must be a whole number in [0, 100000], not {self.bootstrap!r}.")
        if self.compare_with is not None:
            check_text("compare_with", self.compare_with, where)
        for name in ("speed", "test", "transfer_fasttest"):
            if not isinstance(getattr(self, name), bool):
                raise SparseCSEError(f"{where}: {name} must be true or false, not {getattr(self, name)!r}.")
        if (not isinstance(self.tasks, list) or not self.tasks or len(set(map(str, self.tasks))) != len(self.tasks)
                or not set(self.tasks) <= set(EVALUATION_GROUPS)):
            raise SparseCSEError(f"{where}: tasks must be a list of distinct task groups out of "
                                 f"{', '.join(EVALUATION_GROUPS)} (e.g. [sts, transfer]), not {self.tasks!r}.")
        return self


@dataclass(frozen=True)
class Data:
    """The recipe's own dev and test sets (``data: {dev: FILE_OR_TASK, test: FILE_OR_TASK}``): each a pairs
    file (``.tsv``/``.csv``/``.jsonl``, :mod:`sparsecse.data.pairs_files`) or a task name (STSBenchmark,
    SICKRelatedness, STS12..STS16). ``dev`` replaces STS-B in the distill stages' checkpoint choice and in
    the prune stages' scoring pairs; ``test`` is scored in the final evaluation beside the tasks. A relative
    file path in a recipe file is relative to that file's folder; one given with ``--set data.dev=...`` or
    ``run_recipe(dev=...)`` is relative to the working directory."""

    dev: str | None = None
    test: str | None = None

    def check(self, where: str) -> "Data":
        """The data block with its dev and test sets checked (``where`` starts the one sentence a bad one raises)."""
        for role in ("dev", "test"):
            value = getattr(self, role)
            if value is not None:
                spec = check_text(role, value, where)
                if known_task(spec) is None and not is_pairs_file(spec):
                    raise SparseCSEError(f"{where}: {role} must be a pairs file (.tsv, .csv or .jsonl) or a task "
                                         f"name ({', '.join(KNOWN_TASKS)}), not {value!r}.")
        return self


@dataclass(frozen=True)
class Recipe:
    """A parsed, checked recipe (see the module's docstring); ``source`` is the file it came from."""

    name: str
    stages: tuple
    description: str = ""
    model: str | None = None  # the model the recipe was made for (the default of --model)
    seed: int = 0
    evaluation: Evaluation = field(default_factory=Evaluation)
    target: Target | None = None  # what a budget stage aims at (compress --speedup / --max-drop)
    data: Data = field(default_factory=Data)  # the user's dev and test sets (default: STS-B dev, the STS tasks)
    reached: dict = field(default_factory=dict)  # the figures a run of this recipe reached, for --list-recipes
    source: str = ""

    def to_dict(self) -> dict[str, Any]:
        """The recipe as data (what the run records and fingerprints); ``source`` left out."""
        data = dataclasses.asdict(self)
        data.pop("source")
        data["stages"] = [dataclasses.asdict(s) for s in self.stages]
        return data

    def digest(self) -> str:
        """sha256 of the settings that make the model (not the description or the figures reached)."""
        data = {k: v for k, v in self.to_dict().items() if k not in ("description", "reached")
                and not (k == "target" and v is None)}  # runs from before targets resume
        if self.target is not None:  # runs from before serving shapes resume: a shape at its defaults is left out
            data["target"] = {**{k: v for k, v in data["target"].items()
                                 if k not in SHAPE_DEFAULTS or v != SHAPE_DEFAULTS[k]}, "batch_size": self.target.batch}
        # the dev set chooses checkpoints and scoring pairs; the test set changes no model (runs from before resume)
        data.pop("data")
        if self.data.dev is not None:
            data["data"] = {"dev": self.data.dev}
        # whether and which test figures are computed changes no model and no cached file (runs from before resume)
        data["evaluation"] = {k: v for k, v in data["evaluation"].items() if k not in EVALUATION_ONLY}
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()

    def stage(self, name: str):
        """The stage called ``name``."""
        return next(s for s in self.stages if s.name == name)


# ------------------------------------------------------------------------------------------- parsing
@functools.lru_cache(maxsize=None)
def _yaml_loader():
    """PyYAML's SafeLoader with YAML 1.2's numbers and booleans: ``1e-4`` is a number (its 1.1 rules need
    ``1.0e-4``) and only true/false are booleans (1.1 also reads yes/no/on/off, so ``mixed_precision: no`` became
    False)."""
    import yaml

    class Loader(yaml.SafeLoader):
        pass

    bool_tag, int_tag, float_tag = "tag:yaml.org,2002:bool", "tag:yaml.org,2002:int", "tag:yaml.org,2002:float"
    Loader.yaml_implicit_resolvers = {first: [(tag, regexp) for tag, regexp in resolvers
                                              if tag not in (bool_tag, int_tag, float_tag)]
                                      for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
    Loader.add_implicit_resolver(bool_tag, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))
    # numbers as users write them: no underscores (1.1 reads 1_5 as 15), no sexagesimal 1:30
    Loader.add_implicit_resolver(int_tag, re.compile(r"^(?:[-+]?[0-9]+|0x[0-9a-fA-F]+)$"), list("-+0123456789"))
    Loader.add_implicit_resolver(float_tag, re.compile(r"^(?:[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?"
                                                       r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"),
                                 list("-+0123456789."))
    return Loader


def _load_yaml(text: str) -> Any:
    """``yaml.safe_load`` with :func:`_yaml_loader`'s numbers."""
    import yaml

    return yaml.load(text, Loader=_yaml_loader())  # noqa: S506 (a SafeLoader)


def _read(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SparseCSEError(f"The recipe {path} cannot be read ({getattr(exc, 'strerror', None) or exc}).") from None
    try:
        if path.suffix == ".toml":
            import tomllib

            return tomllib.loads(text)
        return _load_yaml(text)
    except Exception as exc:  # yaml.YAMLError, tomllib.TOMLDecodeError
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise SparseCSEError(f"The recipe {path} is not valid {'TOML' if path.suffix == '.toml' else 'YAML'} "
                             f"({first}).") from None


def _build(cls, data: Any, where: str, fixed: dict[str, Any] | None = None):
    if not isinstance(data, dict):
        raise SparseCSEError(f"{where} must be a mapping of settings, not {type(data).__name__}.")
    names = [f.name for f in dataclasses.fields(cls) if f.name not in (fixed or {})]
    unknown = sorted(set(data) - set(names))
    if unknown:
        raise SparseCSEError(f"{where} has no setting {unknown[0]!r}; its settings are {', '.join(names)}.")
    required = [f.name for f in dataclasses.fields(cls) if f.default is dataclasses.MISSING
                and f.default_factory is dataclasses.MISSING and f.name not in (fixed or {})]
    missing = [n for n in required if n not in data]
    if missing:
        raise SparseCSEError(f"{where} needs the setting {missing[0]!r}.")
    return cls(**data, **(fixed or {}))


def parse_recipe(data: Any, source: str) -> Recipe:
    """A checked :class:`Recipe` from the parsed file ``data``; every mistake is one sentence naming
    ``source`` and the stage."""
    if not isinstance(data, dict):
        raise SparseCSEError(f"The recipe {source} must be a mapping with a list of stages, not "
                             f"{type(data).__name__}.")
    data = dict(data)
    stages_data = data.pop("stages", None)
    if not isinstance(stages_data, list) or not stages_data:
        raise SparseCSEError(f"The recipe {source} needs a non-empty list of stages.")
    stages, names = [], set()
    for i, raw in enumerate(stages_data, 1):
        where = f"Stage {i} of the recipe {source}"
        if not isinstance(raw, dict):
            raise SparseCSEError(f"{where} must be a mapping of settings, not {type(raw).__name__}.")
        raw = dict(raw)
        kind = raw.pop("type", None)
        if kind not in STAGE_TYPES:
            raise SparseCSEError(f"{where} has an unknown type {kind!r}; the stage types are "
                                 f"{', '.join(sorted(STAGE_TYPES))}.")
        raw.setdefault("name", kind)
        name = raw["name"]
        if not isinstance(name, str) or not name.isidentifier() and not name.replace("-", "_").isidentifier():
            raise SparseCSEError(f"{where} has the name {name!r}; a stage name is a word (letters, digits, - or _).")
        if name in names or name == INPUT_REF[1:]:
            raise SparseCSEError(f"{where} is named {name!r}, {'a reserved name' if name == INPUT_REF[1:] else 'like an earlier stage'}.")
        stage = _build(STAGE_TYPES[kind], raw, f"{where} ({name})", fixed={"type": kind})
        stage.check(f"{where} ({name})")
        earlier = {s.name for s in stages if s.makes_model} | {INPUT_REF[1:]}
        for ref in stage.model_refs:
            if ref not in earlier:
                raise SparseCSEError(f"{where} ({name}) takes {stage.takes} from @{ref}, which is not the input or an "
                                     f"earlier stage that makes a model ({', '.join(sorted(earlier))}).")
        stages.append(stage)
        names.add(name)
    if not any(s.makes_model for s in stages):
        raise SparseCSEError(f"The recipe {source} has no stage that makes a model (train, distill or prune).")
    if any(s.comes_last for s in stages[:-1]) and not stages[-1].comes_last:
        last = " and ".join(sorted({s.type for s in stages if s.comes_last}))
        raise SparseCSEError(f"In the recipe {source}, {last} stages come last.")
    evaluation = _build(Evaluation, data.pop("evaluation", {}) or {}, f"The evaluation of the recipe {source}")
    evaluation.check(f"The evaluation of the recipe {source}")
    target = data.pop("target", None)
    if target is not None:
        target = _build(Target, target, f"The target of the recipe {source}").check(f"The recipe {source}")
        if target.speedup_of is not None and target.speedup is not None:
            raise SparseCSEError(f"The recipe {source}'s target gives a speed-up ({target.speedup:g}) and another "
                                 f"model's (speedup_of: {target.speedup_of}); give one (--set target.speedup=null "
                                 "leaves the recipe's speed-up out).")
    _check_budget_refs(stages, target, source)
    sets = _build(Data, data.pop("data", None) or {}, f"The data block of the recipe {source}")
    check_sets(stages, sets.check(f"The data block of the recipe {source}"), source)
    recipe = _build(Recipe, {**data, "stages": tuple(stages), "evaluation": evaluation, "target": target,
                             "data": sets},
                    f"The recipe {source}", fixed={"source": source})
    check_text("name", recipe.name, f"The recipe {source}")
    if isinstance(recipe.seed, bool) or not isinstance(recipe.seed, int) or not 0 <= recipe.seed < 2 ** 32:
        raise SparseCSEError(f"The recipe {source}: seed must be a whole number in [0, 2**32), not {recipe.seed!r}.")
    if not isinstance(recipe.reached, dict):
        raise SparseCSEError(f"The recipe {source}: reached must be a mapping of figures.")
    return recipe


def check_sets(stages, data: Data, source: str) -> Data:
    """``data`` once no stage contradicts it: a dev set picks each training stage's best checkpoint, so a train or
    distill stage with ``eval_steps: 0`` (no checkpoint chosen) is refused with it, before any stage runs."""
    if data.dev is not None:
        for stage in stages:
            if getattr(stage, "eval_steps", None) == 0:  # a training stage that keeps no checkpoint
                raise SparseCSEError(f"The recipe {source}'s stage {stage.name} has eval_steps 0, so the dev set "
                                     f"{data.dev} would choose nothing there; set {stage.name}.eval_steps to N or leave "
                                     "the dev set out.")
    return data


def _check_budget_refs(stages: list, target: Target | None, source: str) -> None:
    """A stage's budget reference (a prune stage's ``keep_flops: "@NAME"``) names an earlier stage that makes a
    budget, and a stage that needs a target (a budget stage) has one."""
    budgets = set()
    if target is not None and not any(s.makes_budget for s in stages):
        raise SparseCSEError(f"The recipe {source} has no budget stage, so a target (--speedup, --speedup-of, "
                             "--max-drop or its target: block) has nothing to set; add a `type: budget` stage and a "
                             "prune stage with keep_flops: \"@budget\", or run the shipped target recipe.")
    for stage in stages:
        if stage.needs_target and target is None:
            raise SparseCSEError(f"The recipe {source} has a {stage.type} stage ({stage.name}) but no target; give one "
                                 "(--speedup X, --speedup-of MODEL or --max-drop D, or a target: block).")
        if stage.makes_budget:
            budgets.add(stage.name)
        if stage.budget_ref is not None and stage.budget_ref not in budgets:
            raise SparseCSEError(f"The recipe {source}'s stage {stage.name} spends the budget of @{stage.budget_ref}, "
                                 f"which is not an earlier budget stage ({', '.join(sorted(budgets)) or 'none'}).")


def shipped_recipes() -> dict[str, Path]:
    """{name: file} of the recipes that come with sparsecse."""
    return {p.stem: p for p in sorted(SHIPPED_DIR.iterdir()) if p.suffix in SUFFIXES}


def recipe_path(name_or_path: str | os.PathLike) -> Path:
    """The file of a shipped recipe's name, or the recipe file given."""
    text = str(name_or_path)
    shipped = shipped_recipes()
    if text in shipped:
        return shipped[text]
    path = Path(text)
    if path.suffix in SUFFIXES or os.sep in text or path.exists():
        if not path.is_file():
            raise SparseCSEError(f"The recipe file {text} {what_is(path)}.")
        if path.suffix not in SUFFIXES:
            raise SparseCSEError(f"The recipe file {text} must end in .yaml, .yml or .toml.")
        return path
    raise SparseCSEError(f"No shipped recipe is called {text!r} and no such file exists; the shipped recipes are "
                         f"{', '.join(shipped) or 'none'} (`sparsecse compress --list-recipes`).")


def apply_overrides(data: dict, overrides: dict[str, Any] | None, source: str) -> dict:
    """``data`` with ``overrides`` ({"STAGE.KEY": value, "KEY": value}) set; an unknown stage is refused
    (an unknown key is refused later, by the stage's own check)."""
    data = json.loads(json.dumps(data, default=str))
    for key, value in (overrides or {}).items():
        stage, dot, setting = key.rpartition(".")
        if not dot:
            data[setting] = value
            continue
        if stage in ("evaluation", "target", "data"):
            data[stage] = {**(data.get(stage) or {}), setting: value}
            continue
        matches = [s for s in data.get("stages", []) if isinstance(s, dict) and s.get("name", s.get("type")) == stage]
        if not matches:
            raise SparseCSEError(f"--set {key}: the recipe {source} has no stage called {stage!r}.")
        matches[0][setting] = value
    return data


def load_recipe(name_or_path: str | os.PathLike, overrides: dict[str, Any] | None = None) -> Recipe:
    """A shipped recipe by name, or a recipe file, parsed and checked (``overrides``: see
    :func:`apply_overrides`).

    >>> load_recipe("frontier-2x").stages[1].keep_flops
    0.45
    """
    path = recipe_path(name_or_path)
    data = _read(path)
    if isinstance(data, dict) and isinstance(data.get("data"), dict):  # the file's own paths: beside the file
        data = {**data, "data": _beside(data["data"], path.resolve().parent)}
    if overrides:
        if not isinstance(data, dict):
            raise SparseCSEError(f"The recipe {path} must be a mapping with a list of stages.")
        data = apply_overrides(data, overrides, str(path))
    return parse_recipe(data, str(path))


def _beside(block: dict, folder: Path) -> dict:
    """A data block's relative file paths made relative to ``folder`` (task names and other values unchanged)."""
    return {role: str(folder / spec) if (role in ("dev", "test") and isinstance(spec, str) and spec.strip()
                                         and known_task(spec) is None and not Path(spec).is_absolute())
            else spec for role, spec in block.items()}


def parse_set_options(items: tuple[str, ...] | list[str]) -> dict[str, Any]:
    """``--set STAGE.KEY=VALUE`` items as {"STAGE.KEY": value}, each value read as YAML (numbers, true,
    null, text); a key given twice is refused."""
    import yaml

    result: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise SparseCSEError(f"--set {item!r} is not of the form STAGE.KEY=VALUE (e.g. student.epochs=2).")
        if key in result:
            raise SparseCSEError(f"--set gives {key} twice.")
        try:
            result[key] = _load_yaml(value) if value.strip() else None
        except yaml.YAMLError:
            result[key] = value
    return result
