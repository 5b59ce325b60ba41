"""Single-query latency of several encoders, timed independently of sparsecse's own timing code.

Each model is loaded by sentence-transformers (a copy of each model directory without its ``*.py`` files, so
what is timed is what a user loads with no remote code: sparsecse, once imported, registers its shrunk model
classes with transformers). Then the distinct sentences of STS-B test (``--split dev``: STS-B dev, the sentences a
target's own timing draws from) are
encoded one request at a time (``--batch-size`` sentences per request, default 1), the models taking turns
(``--turn`` requests each, default 1; the order rotates, so a change in the machine's load touches every model alike), on
``--threads`` intra-op threads; with ``--alone`` each model is served by a process of its own (loaded there, kept for
the whole run, timing its own requests), the processes taking their turns as the models do in one process. It prints p50/p95 per model, each model's p50 and p95 speed-up over the first
(the reference) and the ratio of their summed request times (the throughput ratio, the figure to compare with a
throughput target), and for each model the largest absolute difference between sentence-transformers' embeddings
and sparsecse's own loader's (:meth:`sparsecse.modeling.encoder.SentenceEncoder.load`) on 256 of the sentences,
both L2-normalised (all-MiniLM-L6-v2's sentence-transformers pipeline ends in a Normalize module; sparsecse's
``encode`` normalises only when asked).

Example::

    python benchmarks/serving_latency.py --threads 2 --requests 1000 \\
        --model all-MiniLM-L6-v2 runs/l6-lat2x/model ../shared/models/paraphrase-MiniLM-L3-v2
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import os
import platform
import shutil
import statistics
import tempfile
import time
import multiprocessing
from pathlib import Path

import torch


def sts_sentences(data_dir: Path, split: str = "test") -> list[str]:
    """The distinct sentences of STS-B's ``split`` (test or dev), in file order."""
    seen: dict[str, None] = {}
    with open(data_dir / "STS" / "STSBenchmark" / f"sts-{split}.csv", encoding="utf-8") as f:
        for row in csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE):
            for text in row[5:7]:
                seen.setdefault(text, None)
    return list(seen)


def without_python_files(model: str, work: Path) -> str:
    """A copy of the directory ``model`` with its ``*.py`` files deleted (a name is first found where sparsecse finds
    it, e.g. the default model's package; a hub name it does not know is returned as it is)."""
    from sparsecse.artifacts.model_names import resolve_model

    model = resolve_model(model)
    if not os.path.isdir(model):
        return model
    copy = work / f"{len(list(work.iterdir()))}-{Path(model).resolve().name}"  # two models may share a name
    shutil.copytree(model, copy, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    return str(copy)


def cpu_flags() -> str:
    """The CPU model and the vector features that decide matmul speed."""
    name, flags = platform.processor(), set()
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    except OSError:
        pass
    wanted = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8")
    return f"{name} ({' '.join(f for f in wanted if f in flags) or 'no AVX2'})"


def largest_difference(name: str, model, sentences: list[str]) -> float:
    """The largest absolute difference between ``model``'s (sentence-transformers) embeddings of ``sentences``
    and those of sparsecse's own loader of ``name``."""
    from sparsecse.modeling.encoder import SentenceEncoder

    ours = SentenceEncoder.load(name, device="cpu").encode(sentences, batch_size=32, normalize=True)
    theirs = model.encode(sentences, batch_size=32, convert_to_numpy=True, normalize_embeddings=True)
    return float(abs(ours - theirs).max())


def serve_alone(path: str, threads: int, batch_size: int, conn) -> None:
    """One model's serving process (``--alone``): load ``path``, then encode each list of requests it is sent and
    send back their seconds, until it is sent None."""
    from sentence_transformers import SentenceTransformer

    import sparsecse.modeling  # noqa: F401  (registers the shrunk model classes, as in the one-process mode)

    torch.set_num_threads(threads)
    model = SentenceTransformer(path, device="cpu")
    conn.send("ready")
    with torch.inference_mode():
        while (batch := conn.recv()) is not None:
            seconds = []
            for sentences in batch:
                t0 = time.perf_counter()
                model.encode(sentences, batch_size=batch_size, convert_to_numpy=True)
                seconds.append(time.perf_counter() - t0)
            conn.send(seconds)


class AloneServers:
    """A process per model (:func:`serve_alone`), as each model runs in a server of its own."""

    def __init__(self, paths: dict[str, str], threads: int, batch_size: int):
        spawn = multiprocessing.get_context("spawn")
        self.pipes, self.processes = {}, {}
        for name, path in paths.items():
            here, there = spawn.Pipe()
            self.processes[name] = spawn.Process(target=serve_alone, args=(path, threads, batch_size, there), daemon=True)
            self.processes[name].start()
            self.pipes[name] = here
        for pipe in self.pipes.values():
            assert pipe.recv() == "ready"

    def serve(self, name: str, requests: list[list[str]]) -> list[float]:
        self.pipes[name].send(requests)
        return self.pipes[name].recv()

    def close(self) -> None:
        for name, pipe in self.pipes.items():
            pipe.send(None)
            self.processes[name].join()


def schedule(order: list[str], requests: int, turn: int) -> list[tuple[str, int]]:
    """(model, request index) in the order they are timed: each model serves ``turn`` requests in its turn, the
    order of the models rotating from turn to turn."""
    timed = []
    for k, first in enumerate(range(0, requests, turn)):
        shift = k % len(order)
        for name in order[shift:] + order[:shift]:
            timed += [(name, i) for i in range(first, min(first + turn, requests))]
    return timed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", nargs="+", required=True, help="model names or directories; the first is the reference")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--requests", type=int, default=None,
                        help="requests per model (default: one per distinct STS-B test sentence, each once; the "
                             "file is ordered by genre, so its first thousand are mostly short image captions)")
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--data-dir", default=os.environ.get("SPARSECSE_DATA", "../shared/data/senteval"))
    parser.add_argument("--split", choices=("test", "dev"), default="test",
                        help="the STS-B split whose distinct sentences are the requests (default test; dev: the "
                             "sentences a target's own timing draws from, so the two figures share their requests)")
    parser.add_argument("--whole", action="store_true",
                        help="each request is every test sentence in one encode call (sentence-transformers sorts "
                             "them by length and cuts batches of --batch-size): the throughput of encoding a "
                             "collection, as a throughput target is timed; --requests is then the rounds")
    parser.add_argument("--turn", type=int, default=1, metavar="N",
                        help="requests each model serves in its turn before the next model takes over, the order "
                             "rotating (default 1: request by request; a server runs one model, so a larger turn is "
                             "closer to serving)")
    parser.add_argument("--alone", action="store_true",
                        help="serve each model from a process of its own (kept for the whole run), the processes "
                             "taking turns of --turn requests")
    parser.add_argument("--json", default=None, help="also write the results here")
    parser.add_argument("--store", default=None, metavar="DIR",
                        help="also write the results as one entry of this results store (docs/results/store)")
    parser.add_argument("--store-id", default=None, metavar="ID",
                        help="the entry's id (default: serving-latency.b<batch>.<machine>)")
    args = parser.parse_args()
    if args.threads < 1 or args.batch_size < 1 or (args.requests is not None and args.requests < 1) or args.turn < 1:
        parser.error("--threads, --batch-size, --requests and --turn must be at least 1")
    from sentence_transformers import SentenceTransformer

    import sparsecse.modeling.encoder  # noqa: F401 (registers the shrunk model classes with transformers' Auto*)

    torch.set_num_threads(args.threads)
    sentences = sts_sentences(Path(args.data_dir), args.split)
    if args.requests is None:
        args.requests = 1 if args.whole else -(-len(sentences) // args.batch_size)
    with tempfile.TemporaryDirectory() as tmp:
        models = {name: SentenceTransformer(without_python_files(name, Path(tmp)), device="cpu")
                  for name in args.model}
        times: dict[str, list[float]] = {name: [] for name in models}

        def request(i: int) -> list[str]:
            start = (i * args.batch_size) % len(sentences)
            return sentences if args.whole else (sentences + sentences)[start:start + args.batch_size]

        if args.alone:
            servers = AloneServers({name: without_python_files(name, Path(tmp)) for name in args.model}, args.threads,
                                   args.batch_size)
            for name in models:
                servers.serve(name, [request(i) for i in range(args.warmup)])
            for name, turn in itertools.groupby(schedule(list(models), args.requests, args.turn), key=lambda t: t[0]):
                times[name] += servers.serve(name, [request(args.warmup + i) for _, i in turn])  # one model's turn
            servers.close()
        with torch.inference_mode():
            for name, model in ({} if args.alone else models).items():
                for i in range(args.warmup):
                    model.encode(request(i), batch_size=args.batch_size, convert_to_numpy=True)
            for name, i in ([] if args.alone else schedule(list(models), args.requests, args.turn)):
                t0 = time.perf_counter()
                models[name].encode(request(args.warmup + i), batch_size=args.batch_size, convert_to_numpy=True)
                times[name].append(time.perf_counter() - t0)
        agreement = {name: largest_difference(name, model, sentences[:256]) for name, model in models.items()}
    reference = args.model[0]

    def quantile(values: list[float], q: float) -> float:
        return statistics.quantiles(values, n=100, method="inclusive")[round(q * 100) - 1]

    rows = []
    for name, values in times.items():
        p50, p95 = statistics.median(values), quantile(values, 0.95)
        rows.append({"model": name, "p50_ms": round(p50 * 1e3, 3), "p95_ms": round(p95 * 1e3, 3),
                     "p50_speedup": round(statistics.median(times[reference]) / p50, 3),
                     "p95_speedup": round(quantile(times[reference], 0.95) / p95, 3),
                     # the throughput ratio: requests differ in length, and the ratio of medians is not the ratio of
                     # the work (a smaller model gains most on short requests)
                     "total_speedup": round(sum(times[reference]) / sum(values), 3),
                     "max_abs_diff_vs_sparsecse": agreement[name]})
    result = {"cpu": cpu_flags(), "threads": args.threads, "batch_size": args.batch_size, "requests": args.requests,
              "sentences": (f"every distinct STS-B {args.split} sentence ({len(sentences)}) per request, in batches "
                            f"of {args.batch_size} sorted by length, models interleaved" if args.whole else
                            f"{args.batch_size} distinct STS-B {args.split} sentence(s) per request, in file order, "
                            "one request at a time, models interleaved"
                            + (" request by request" if args.turn == 1 else f" in turns of {args.turn} requests")
                            + (", each model served alone by a process of its own" if args.alone else "")),
              "turn": args.turn, "alone": args.alone, "split": args.split,
              "loader": "sentence-transformers, model directories without *.py files", "rows": rows}
    print(f"{result['cpu']}, {args.threads} threads, batch {args.batch_size}, {args.requests} requests per model")
    for row in rows:
        print(f"{row['model']}: p50 {row['p50_ms']:.2f} ms ({row['p50_speedup']:.2f}x), "
              f"p95 {row['p95_ms']:.2f} ms ({row['p95_speedup']:.2f}x), all requests {row['total_speedup']:.2f}x; "
              f"largest |ST - sparsecse| {row['max_abs_diff_vs_sparsecse']:.1e}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    if args.store:
        print(f"wrote {store_entry(result, args)}")


def store_entry(result: dict, args) -> Path:
    """The run as one results-store entry: per model its p50/p95 latency, speed-ups over the first model and the
    largest difference from sparsecse's loader, with the command, CPU, threads and batch."""
    from sparsecse.reporting.store import Entry, command_line, machine_slug, provenance, write_entry

    ident = args.store_id or f"serving-latency.b{args.batch_size}.{machine_slug()}"
    figures = {k: result[k] for k in ("rows", "requests", "sentences", "loader", "turn", "alone") if k in result}
    prov = provenance(command_line("benchmarks/serving_latency.py"), threads=args.threads, batch_size=args.batch_size,
                      engine="torch-fp32 (sentence-transformers)")
    title = (f"benchmarks/serving_latency.py: {result['sentences']}, loaded by sentence-transformers without their "
             "Python files")
    return write_entry(args.store, Entry(ident, title, figures, prov))


if __name__ == "__main__":
    main()
