"""benchmarks/deploy_speed.py --engines: the engines parsed in table order, bad ones refused in one
sentence, and only the exports the chosen engines need are made."""

from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.helpers import load_benchmark


@pytest.fixture(scope="module")
def deploy_speed():
    yield from load_benchmark("deploy_speed")


def test_engines_are_parsed_in_table_order(deploy_speed):
    assert deploy_speed.parse_engines("openvino-int8, torch-fp32", with_bf16=False) == ["torch-fp32", "openvino-int8"]
    every = deploy_speed.parse_engines("all", with_bf16=False)
    assert every[0] == "torch-fp32" and "torch-bf16" not in every and len(every) == 6
    assert "torch-bf16" in deploy_speed.parse_engines("all", with_bf16=True)


@pytest.mark.parametrize("text, message", [("torch-fp32,openvino-int9", "unknown engine 'openvino-int9'"),
                                           (",", "unknown engine ','"),
                                           ("openvino-int8", "must keep torch-fp32")])
def test_bad_engines_are_refused(deploy_speed, text, message):
    with pytest.raises(ValueError, match=message):
        deploy_speed.parse_engines(text, with_bf16=False)


def test_only_the_exports_the_engines_need_are_made(deploy_speed, monkeypatch, tmp_path):
    made = []

    def fake_export(source, out, format=None, *, config=None, overwrite=False):
        made.append((Path(out).name, format or config.format))
        Path(out).mkdir()

    monkeypatch.setattr(deploy_speed, "export", fake_export)
    args = SimpleNamespace(calibration="corpus.txt", calibration_size=300)
    rows = deploy_speed.build_rows("f2x", "/models/f2x", tmp_path, args, ["torch-fp32", "openvino-int8"])
    assert made == [("f2x-openvino", "openvino")]
    assert [(r["model"], r["source"], r["file"]) for r in rows] == [
        ("f2x torch fp32", "/models/f2x", None),
        ("f2x OpenVINO int8", str(tmp_path / "f2x-openvino"), deploy_speed.INT8_XML)]
    deploy_speed.build_rows("f2x", "/models/f2x", tmp_path, args, ["torch-fp32", "openvino-fp32", "openvino-int8"])
    assert len(made) == 1  # the OpenVINO folder exists: nothing exported again


def test_a_target_naming_no_row_is_refused_before_any_export(deploy_speed, monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(deploy_speed, "export", lambda *a, **k: pytest.fail("exported before the check"))
    work = tmp_path / "work"
    with pytest.raises(SystemExit) as refused:
        deploy_speed.main(["--work", str(work), "--engines", "torch-fp32,openvino-int8",
                           "--target", "6x-int8=f2x OpenVINO int8:L3 OpenVINO int8"])  # no --pruned f2x
    assert refused.value.code == 2 and "f2x OpenVINO int8" in capsys.readouterr().err
    assert not work.exists()


def test_the_side_by_side_table_holds_each_models_engines_and_recipe(deploy_speed, tmp_path):
    made = tmp_path / "f2x"
    made.mkdir()
    (made / "manifest.json").write_text('{"kind": "recipe_model", "params": {"name": "frontier-2x"}}')

    def row(name, engine, sts, speedup, model_dir):
        return {"model": f"{name} {engine}", "group": name, "avg_sts": sts, "ci": [sts - 0.5, sts + 0.5],
                "speedup": speedup, "model_dir": model_dir}

    rows = [row("dense", "torch fp32", 78.87, 1.0, str(tmp_path / "dense")),
            row("dense", "OpenVINO int8", 78.70, 3.0, str(tmp_path / "dense")),
            row("f2x", "torch fp32", 79.22, 2.0, str(made)), row("f2x", "OpenVINO int8", 79.10, 6.25, str(made))]
    lines = deploy_speed.side_by_side(rows, ["dense", "f2x"], ["torch fp32", "OpenVINO int8"])
    assert lines[0] == ("| model | made by | torch fp32 STS avg [95% CI] | torch fp32 speed-up | OpenVINO int8 STS avg "
                        "[95% CI] | OpenVINO int8 speed-up | OpenVINO int8 cost |")
    assert lines[2] == "| dense | download | 78.87 [78.37, 79.37] | 1.00x | 78.70 [78.20, 79.20] | 3.00x | +0.17 |"
    assert lines[3] == "| f2x | `frontier-2x` | 79.22 [78.72, 79.72] | 2.00x | 79.10 [78.60, 79.60] | 6.25x | +0.12 |"
    md, png = deploy_speed.write_side_by_side(rows, ["dense", "f2x"], ["torch fp32", "OpenVINO int8"],
                                              tmp_path / "out" / "engines", "header")
    assert md.read_text().splitlines()[2:] == lines and png.stat().st_size > 0


def test_a_pruned_row_is_named_by_its_name_or_directory(deploy_speed):
    assert deploy_speed.pruned_row_name("f2x=runs/f2x/model") == ("f2x", "runs/f2x/model")
    assert deploy_speed.pruned_row_name("runs/f35") == ("f35", "runs/f35")
    assert deploy_speed.pruned_row_name("=runs/f35") == ("f35", "=runs/f35")


def test_the_store_names_the_downloaded_models_as_the_user_named_them(deploy_speed):
    args = SimpleNamespace(model=None, small="/somewhere/models/paraphrase-MiniLM-L3-v2")
    assert deploy_speed.stored_name("dense", args) == "all-MiniLM-L6-v2"
    assert deploy_speed.stored_name("L3", args) == "paraphrase-MiniLM-L3-v2"
    assert deploy_speed.stored_name("frontier-2x", args) == "frontier-2x"
    assert deploy_speed.stored_name("dense", SimpleNamespace(model="runs/mine/model", small="")) == "model"
