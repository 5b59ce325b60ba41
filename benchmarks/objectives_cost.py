"""Cost of one training step of each plug-in objective relative to plain SimCSE, side by side in one run.

On all-MiniLM-L6-v2 (the embedded default model), a batch of 64 sentences from the wiki sample padded
to exactly 32 tokens, on the CPU. A step is what the training loop does: objective forward, backward,
``after_backward`` and an AdamW step over the encoder and the objective's train-only modules.

No pretrained masked LM is available offline, so the masked LMs are randomly initialised with
realistic shapes and MiniLM's vocabulary (their weights do not change the cost):

* DiffCSE generator: DistilBERT-base-shaped ``DistilBertForMaskedLM`` (6 layers, width 768, FFN 3072),
  the paper's generator; the discriminator is a copy of MiniLM.
* InfoCSE auxiliary MLM: MiniLM-shaped ``BertForMaskedLM`` (6 layers, width 384, FFN 1536): the paper's
  auxiliary network has the encoder's shape (6 frozen layers + 2 trainable copies).

Steps interleave (one of each objective per round) so background load hits all alike; the figure per
objective is the median step time over ``--rounds`` rounds of ``--steps`` steps after ``--warmup``
steps, and the ratio is against SimCSE's median from the same rounds.

    python benchmarks/objectives_cost.py [--rounds 4] [--steps 3] [--warmup 2] [--threads N] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

from sparsecse.data.corpus import read_corpus  # noqa: E402
from sparsecse.modeling.encoder import SentenceEncoder  # noqa: E402
from sparsecse.objectives.registry import build_objective  # noqa: E402

DEFAULT_CORPUS = Path(__file__).resolve().parents[2] / "shared" / "data" / "wiki" / "wiki1m_sample.txt"
BATCH, LENGTH = 64, 32

# label -> (objective name, params); "{generator}" / "{mlm}" are filled with the random masked LMs
CASES = {
    "simcse": ("simcse", {}),
    "diffcse": ("diffcse", {"generator": "{generator}"}),
    "infocse": ("infocse", {"mlm": "{mlm}"}),
    "noise_negatives": ("noise_negatives", {}),
    "input_noise (gaussian)": ("input_noise", {"noise": "gaussian"}),
    "input_noise (gaussian_dropout)": ("input_noise", {"noise": "gaussian_dropout"}),
    "weight_perturbation": ("weight_perturbation", {}),
    "weight_perturbation + fgsm": ("weight_perturbation", {"fgsm": True}),
}


def save_random_masked_lms(root: Path, tokenizer) -> dict[str, str]:
    from transformers import BertConfig, BertForMaskedLM, DistilBertConfig, DistilBertForMaskedLM

    vocab = len(tokenizer)
    torch.manual_seed(0)
    generator = DistilBertForMaskedLM(DistilBertConfig(vocab_size=vocab, dim=768, n_layers=6, n_heads=12,
                                                       hidden_dim=3072, pad_token_id=tokenizer.pad_token_id))
    mlm = BertForMaskedLM(BertConfig(vocab_size=vocab, hidden_size=384, num_hidden_layers=6,
                                     num_attention_heads=12, intermediate_size=1536))
    paths = {}
    for name, model in (("generator", generator), ("mlm", mlm)):
        paths[name] = str(root / name)
        model.save_pretrained(paths[name], safe_serialization=True)
        tokenizer.save_pretrained(paths[name])
    return paths


def make_batch(encoder, corpus: Path) -> dict[str, torch.Tensor]:
    sentences = [s for s in read_corpus(corpus) if len(s.split()) >= 40][:BATCH]
    if len(sentences) < BATCH:
        raise SystemExit(f"{corpus} has fewer than {BATCH} sentences of 40+ words.")
    batch = encoder.tokenizer(sentences, padding="max_length", truncation=True, max_length=LENGTH,
                              return_tensors="pt")
    assert batch["input_ids"].shape == (BATCH, LENGTH)
    return dict(batch)


class Runner:
    """One encoder + objective + optimizer; ``step()`` is one training step, timed."""

    def __init__(self, name: str, params: dict):
        self.encoder = SentenceEncoder.load(None, device="cpu")
        self.encoder.train()
        self.objective = build_objective(name, self.encoder, **params)
        self.objective.train()
        extra = [p for m in self.objective.trainable_extra_modules() for p in m.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW([*self.encoder.parameters(), *extra], lr=3e-5)
        self.times: list[float] = []

    def step(self, batch, record: bool) -> None:
        start = time.perf_counter()
        out = self.objective(batch)
        out.loss.backward()
        self.objective.after_backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        if record:
            self.times.append(time.perf_counter() - start)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--steps", type=int, default=3, help="timed steps per objective per round")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--corpus", default=str(DEFAULT_CORPUS))
    parser.add_argument("--only", default=None, help="comma-separated case labels (simcse is always run)")
    parser.add_argument("--json", dest="json_out", default=None, help="also write the results to this JSON file")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    from tqdm.auto import tqdm

    cases = dict(CASES)
    if args.only:
        keep = {"simcse", *(s.strip() for s in args.only.split(","))}
        cases = {k: v for k, v in cases.items() if k in keep}
    with tempfile.TemporaryDirectory() as tmp:
        probe = SentenceEncoder.load(None, device="cpu")
        paths = save_random_masked_lms(Path(tmp), probe.tokenizer)
        batch = make_batch(probe, Path(args.corpus))
        del probe
        runners = {}
        for label, (name, params) in tqdm(cases.items(), desc="building", file=sys.stderr):
            filled = {k: v.format(**paths) if isinstance(v, str) else v for k, v in params.items()}
            torch.manual_seed(0)
            runners[label] = Runner(name, filled)
        total = len(runners) * (args.warmup + args.rounds * args.steps)
        with tqdm(total=total, desc="steps", file=sys.stderr) as bar:
            for runner in runners.values():
                for _ in range(args.warmup):
                    runner.step(batch, record=False)
                    bar.update()
            for _ in range(args.rounds):
                for runner in runners.values():
                    for _ in range(args.steps):
                        runner.step(batch, record=True)
                        bar.update()

    reference = statistics.median(runners["simcse"].times)
    results = {label: {"median_step_s": statistics.median(r.times), "min_step_s": min(r.times),
                       "ratio_to_simcse": statistics.median(r.times) / reference} for label, r in runners.items()}
    print(f"all-MiniLM-L6-v2, batch {BATCH} x {LENGTH} tokens, {torch.get_num_threads()} CPU threads, "
          f"{args.rounds} rounds x {args.steps} steps (median)")
    print(f"{'objective':34s} {'s/step':>8s} {'x SimCSE':>9s}")
    for label, row in results.items():
        print(f"{label:34s} {row['median_step_s']:8.3f} {row['ratio_to_simcse']:9.2f}")
    report = {"model": "all-MiniLM-L6-v2", "batch": BATCH, "length": LENGTH, "threads": torch.get_num_threads(),
              "rounds": args.rounds, "steps": args.steps, "warmup": args.warmup, "results": results}
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(report, indent=2) + "\n")
    return report


if __name__ == "__main__":
    main()
