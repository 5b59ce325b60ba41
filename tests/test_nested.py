"""Nested phrases left out of a corpus: exact spans on hand-made lines, the same answer as comparing every pair of
lines, and a training stage's sample drawn from what is left."""

from __future__ import annotations

import random

from sparsecse.data.corpus import read_corpus
from sparsecse.data.nested import nested_spans, without_nested_spans
from sparsecse.recipes.spec import load_recipe
from sparsecse.recipes.stage_types import StageContext, sampled_corpus


def test_a_span_is_whole_words_in_order_and_contiguous_of_a_longer_line():
    lines = ["the cat sat on the mat", "cat sat", "The  CAT sat", "sat cat", "cat sa", "on the mat", "the mat .",
             "a dog", "a dog", "mat"]
    # "sat cat" is out of order, "cat sa" cuts a word, "the mat ." holds a word no line has; equal lines stay
    assert nested_spans(lines) == [1, 2, 5, 9]
    assert without_nested_spans(lines) == ["the cat sat on the mat", "sat cat", "cat sa", "the mat .", "a dog", "a dog"]
    assert nested_spans([]) == [] and nested_spans(["", "one"]) == []


def brute_force(lines: list[str]) -> list[int]:
    words = [line.lower().split() for line in lines]
    def inside(a, b):
        return len(b) > len(a) and any(b[i:i + len(a)] == a for i in range(len(b) - len(a) + 1))
    return [i for i, a in enumerate(words) if a and any(inside(a, b) for j, b in enumerate(words) if j != i)]


def test_the_rarest_word_index_finds_what_comparing_every_pair_finds():
    rng = random.Random(0)
    vocabulary = ["a", "b", "c", "d", "e", "the"]
    sentences = [" ".join(rng.choices(vocabulary, k=rng.randint(3, 9))) for _ in range(60)]
    spans = []
    for s in sentences[:30]:  # phrases cut from them, as a treebank's are
        w = s.split()
        i, j = sorted(rng.sample(range(len(w) + 1), 2))
        spans.append(" ".join(w[i:j]).upper() if rng.random() < 0.3 else " ".join(w[i:j]))
    lines = sentences + spans
    rng.shuffle(lines)
    found = nested_spans(lines)
    assert found == brute_force(lines) and len(found) >= 25


def test_a_training_stage_samples_from_the_lines_left(tmp_path):
    long = [f"sentence number {i} of the corpus" for i in range(40)]
    corpus = tmp_path / "c.txt"
    corpus.write_text("\n".join(long + [f"number {i} of" for i in range(40)] + ["the corpus"]) + "\n")
    ctx = StageContext(corpus=corpus, work=tmp_path / "run", data_dir=None, seed=0, models={})
    sample = read_corpus(sampled_corpus(ctx, 3, 25, drop_nested=True))
    assert len(sample) == 25 and set(sample) <= set(long)
    assert sorted(read_corpus(sampled_corpus(ctx, 3, None, drop_nested=True))) == sorted(long)
    kept = read_corpus(sampled_corpus(ctx, 3, 25))  # without it: a sample of every line, the spans among them
    assert len(kept) == 25 and not set(kept) <= set(long)
    assert sampled_corpus(ctx, 3, None) == corpus


def test_the_target_recipe_student_leaves_nested_phrases_out():
    student = next(s for s in load_recipe("target").stages if s.name == "student")
    assert student.drop_nested_spans is True and "nested phrases left out" in student.describe()
