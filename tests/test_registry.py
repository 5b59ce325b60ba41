"""Objectives found by name: built-ins, register_objective, and a package's entry point."""

import json
import textwrap

import pytest
from click.testing import CliRunner

from sparsecse.cli import main
from sparsecse.errors import SparseCSEError
from sparsecse.objectives import registry
from sparsecse.objectives.registry import (available_objectives, build_objective, get_objective,
                                           parse_objective_args, register_objective)
from sparsecse.objectives.simcse import SimCSE
from sparsecse.training.config import TrainingConfig


def test_simcse_is_built_in():
    assert get_objective("simcse") is SimCSE


def test_a_built_in_objective_that_fails_to_import_is_an_error_naming_it(monkeypatch):
    """A built-in whose module does not import is a broken installation: said with the objective's name and the
    import's own error, never a silently shorter list."""
    monkeypatch.setitem(registry.BUILTIN, "diffcse", "sparsecse.objectives.no_such_module:DiffCSE")
    expected = (r"^The built-in objective 'diffcse' \(sparsecse\.objectives\.no_such_module:DiffCSE\) failed to "
                r"import: ModuleNotFoundError: No module named 'sparsecse\.objectives\.no_such_module'\.$")
    with pytest.raises(SparseCSEError, match=expected):
        available_objectives()
    with pytest.raises(SparseCSEError, match=expected):
        get_objective("simcse")
    monkeypatch.setitem(registry.BUILTIN, "diffcse", "sparsecse.objectives.diffcse:NoSuchClass")
    with pytest.raises(SparseCSEError, match="'diffcse'.*failed to import: AttributeError: .*NoSuchClass"):
        available_objectives()


def test_unknown_objective_lists_the_known_ones():
    with pytest.raises(SparseCSEError, match="Unknown objective 'nope'; known objectives: .*simcse"):
        get_objective("nope")


def test_registered_objective_is_found_and_trains(monkeypatch, tiny_bert_dir, tmp_path):
    monkeypatch.setattr(registry, "_registered", {})

    @register_objective
    class Hotter(SimCSE):
        name = "hotter_simcse"
        defaults = {"temperature": 0.5, "mlp": False}

    assert get_objective("hotter_simcse") is Hotter
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(f"sentence number {i} is here" for i in range(16)))
    from sparsecse.training import train

    result = train(tiny_bert_dir, corpus, tmp_path / "out", objective="hotter_simcse", objective_args="temperature=0.2",
                   config=TrainingConfig(batch_size=4, max_steps=2, eval_steps=0, show_progress=False, device="cpu"))
    assert result.hyperparameters["objective_params"] == {"temperature": 0.2, "mlp": False}


def test_objective_parameters_are_checked():
    with pytest.raises(SparseCSEError, match="has no parameter tau; its parameters are mlp, temperature"):
        build_objective("simcse", encoder=None, tau=0.1)


def test_parse_objective_args():
    assert parse_objective_args("a=1, b=0.5,c=true,d=name,e=none") == {"a": 1, "b": 0.5, "c": True, "d": "name",
                                                                      "e": None}
    with pytest.raises(SparseCSEError, match="key=value"):
        parse_objective_args("temperature")


@pytest.fixture
def plugin_on_path(tmp_path, monkeypatch):
    """A fake installed distribution whose entry point adds the objective 'plugged'."""
    (tmp_path / "plugged_pkg").mkdir()
    (tmp_path / "plugged_pkg" / "__init__.py").write_text(textwrap.dedent('''
        from sparsecse.objectives.simcse import SimCSE

        class Plugged(SimCSE):
            name = "plugged"
            description = "A user's objective from another package."
            defaults = {"temperature": 0.1, "mlp": True, "extra": 3}
    '''))
    dist = tmp_path / "plugged_pkg-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: plugged-pkg\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[sparsecse.objectives]\nplugged = plugged_pkg:Plugged\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def test_entry_point_objective_is_found(plugin_on_path):
    cls = get_objective("plugged")
    assert cls.__module__ == "plugged_pkg" and cls.defaults["extra"] == 3
    assert "simcse" in available_objectives()


def test_objectives_command_lists_parameters_and_defaults(plugin_on_path):
    result = CliRunner().invoke(main, ["objectives"])
    assert result.exit_code == 0, result.output
    assert "simcse: Two dropout views" in result.output
    assert "parameters: temperature=0.05, mlp=True" in result.output
    assert "plugged: A user's objective" in result.output
    listed = json.loads(CliRunner().invoke(main, ["objectives", "--json"]).output)
    assert listed["plugged"]["parameters"] == {"temperature": 0.1, "mlp": True, "extra": 3}
