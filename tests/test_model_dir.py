"""sparsecse_config.json has one owner (sparsecse.artifacts.model_dir): what it writes, the encoder reads."""

import json

from sparsecse.artifacts.model_dir import SPARSECSE_CONFIG, model_lineage, read_model_config, write_model_config
from sparsecse.modeling.encoder import SentenceEncoder


def test_config_round_trip_and_absent_or_damaged_files(tmp_path):
    write_model_config(tmp_path, {"pooling": "mean", "lineage": {"stage": "shrink", "parent": {"stage": "train"}}})
    assert read_model_config(tmp_path)["pooling"] == "mean"
    assert model_lineage(tmp_path) == {"stage": "shrink", "parent": {"stage": "train"}}
    assert read_model_config(tmp_path / "elsewhere") == {} and model_lineage(None) is None
    (tmp_path / SPARSECSE_CONFIG).write_text("[1, 2]")
    assert read_model_config(tmp_path) == {}
    (tmp_path / SPARSECSE_CONFIG).write_text("{not json")
    assert read_model_config(tmp_path) == {}


def test_a_saved_encoder_is_read_back_through_the_owner(tiny_bert_dir, tmp_path):
    encoder = SentenceEncoder.load(tiny_bert_dir, pooling="mean", device="cpu")
    encoder.save(tmp_path / "m", extra_config={"lineage": {"stage": "train", "init": "x"}})
    config = json.loads((tmp_path / "m" / SPARSECSE_CONFIG).read_text())
    assert config == read_model_config(tmp_path / "m")
    assert (config["pooling"], model_lineage(tmp_path / "m")["init"]) == ("mean", "x")
    again = SentenceEncoder.load(tmp_path / "m", device="cpu")
    assert (again.pooling, again.pooling_source, again.extra_config["lineage"]["stage"]) == ("mean", SPARSECSE_CONFIG,
                                                                                              "train")
