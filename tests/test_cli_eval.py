import json


from tests.helpers import cli



def test_eval_json_shape_and_results_file(tiny_bert_dir, fake_senteval, tmp_path):
    out = tmp_path / "results.json"
    result = cli("eval", "--model", tiny_bert_dir, "--data-dir", fake_senteval, "--tasks", "STS12,STSBenchmark,TREC",
                 "--fasttest", "--json", "--quiet", "--out", out, "--device", "cpu")
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert list(payload["scores"]) == ["STS12", "STSBenchmark", "TREC"]
    assert all(isinstance(v, float) for v in payload["scores"].values())
    assert {"avg_sts", "avg_transfer", "alignment", "uniformity", "settings", "details"} <= set(payload)
    assert payload["settings"]["fasttest"] is True
    written = json.loads(out.read_text())
    assert written["scores"] == payload["scores"]
    manifest = written["manifest"]
    assert manifest["kind"] == "eval" and manifest["seed"] == 0
    assert manifest["inputs"]["model"]["sha256"] and manifest["params"]["tasks"] == ["STS12", "STSBenchmark", "TREC"]
    again = cli("eval", "--model", tiny_bert_dir, "--data-dir", fake_senteval, "--tasks", "STS12", "--quiet", "--out", out)
    assert again.exit_code == 1 and "already exists" in again.output


def test_eval_table_output(tiny_bert_dir, fake_senteval):
    result = cli("eval", "--model", tiny_bert_dir, "--data-dir", fake_senteval, "--tasks", "STS13,SICKRelatedness",
                 "--quiet", "--sts-aggregation", "wmean", "--device", "cpu")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].split()[0] == "STS13" and lines[1].split()[0] == "SICKRelatedness"
    assert any(line.startswith("STS avg") for line in lines)
    assert "'wmean'" in lines[-1]


def test_eval_bad_input_is_one_line_error(tiny_bert_dir, fake_senteval, tmp_path):
    unknown = cli("eval", "--model", tiny_bert_dir, "--data-dir", fake_senteval, "--tasks", "STS12,Nope")
    assert unknown.exit_code == 1
    assert "Error: Unknown task 'Nope'" in unknown.output and "SICKRelatedness" in unknown.output
    assert "Traceback" not in unknown.output
    missing = cli("eval", "--model", tiny_bert_dir, "--data-dir", tmp_path, "--tasks", "STS14")
    assert missing.exit_code == 1 and "STS14" in missing.output and "STS14-en-test" in missing.output
