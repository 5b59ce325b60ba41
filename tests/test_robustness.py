"""Bad input on the command line and in the Python API (issue 16): every case ends in one sentence,
before any model is loaded, and leaves nothing behind."""

from __future__ import annotations

import json
import os
import stat

import pytest
import torch
from click.testing import CliRunner

from sparsecse.cli import main
from sparsecse.errors import SparseCSEError
from sparsecse.objectives.registry import available_objectives, get_objective


def run_cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def one_sentence_error(result, *fragments):
    assert result.exit_code == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.output
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


@pytest.fixture()
def corpus(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text("\n".join(f"sentence number {i} is here" for i in range(40)) + "\n")
    return path


# ---------------------------------------------------------------------------------- objective parameters
@pytest.mark.parametrize("args, fragment", [
    ("temperature=abc", "temperature must be a number"),
    ("temperature=0", "temperature must be positive"),
    ("temperature=nan", "finite"),
    ("temperature=-1", "temperature must be positive"),
    ("mlp=3", "mlp must be true or false"),
])
def test_objective_args_checked_before_the_model_loads(tmp_path, corpus, args, fragment):
    # the model does not exist: a check that ran after loading it would report that instead
    result = run_cli("train", "--model", tmp_path / "no-such-model", "--corpus", corpus, "--out", tmp_path / "o",
                     "--objective-args", args)
    one_sentence_error(result, fragment)
    assert not (tmp_path / "o").exists() and not (tmp_path / "o.partial").exists()


@pytest.mark.parametrize("name, params, fragment", [
    ("diffcse", {"generator": "g", "mask_ratio": 1.5}, "mask_ratio"),
    ("diffcse", {"generator": 3}, "generator"),
    ("infocse", {"mlm": "m", "extra_layers": 0}, "extra_layers"),
    ("infocse", {"mlm": "m", "sentence_vector": "max"}, "sentence_vector"),
    ("input_noise", {"sigma": "big"}, "sigma"),
    ("noise_negatives", {"num_samples": 2.5}, "num_samples"),
    ("weight_perturbation", {"fgsm": "yes"}, "fgsm"),
])
def test_each_objective_declares_its_parameter_checks(name, params, fragment):
    with pytest.raises(SparseCSEError, match=fragment):
        get_objective(name).check_params(params)


def test_every_builtin_objective_checks_every_parameter_and_accepts_its_defaults():
    for name, cls in available_objectives().items():
        if cls.__module__.startswith("sparsecse."):
            assert set(cls.parameter_checks()) == set(cls.defaults), name
            required = {key: "x" for key in cls.requires}
            assert cls.check_params(required) == {**cls.defaults, **required}


def test_non_finite_learning_rate_is_refused_before_loading(tmp_path, corpus):
    result = run_cli("train", "--model", tmp_path / "none", "--corpus", corpus, "--out", tmp_path / "o",
                     "--lr", "inf", "--max-steps", "1")
    one_sentence_error(result, "lr")
    assert not (tmp_path / "o").exists() and not (tmp_path / "o.partial").exists()
