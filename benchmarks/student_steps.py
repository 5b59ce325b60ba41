"""Student-stage steps per second on the CPU: distil all-MiniLM-L6-v2 from itself for STEPS steps (batch 64, length 32).

Run it once per code version, alternating, on a quiet machine, to compare two commits side by side (the losses must
match to every digit: the arithmetic of a step does not depend on how its batch was prepared)::

    git worktree add /tmp/old d9bf805
    for i in 1 2; do
        PYTHONPATH=/tmp/old python benchmarks/student_steps.py 40 old-$i CORPUS
        PYTHONPATH=. python benchmarks/student_steps.py 40 new-$i CORPUS
    done

CORPUS: one sentence per line; the figures in the changelog used the first 8,000 lines of
../shared/data/wiki/wiki1m_sample.txt.
"""
import json
import os
import sys
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

import sparsecse  # noqa: E402
from sparsecse.artifacts.model_names import default_model_path  # noqa: E402
from sparsecse.training.api import train  # noqa: E402
from sparsecse.training.config import TrainingConfig  # noqa: E402


def main() -> None:
    steps, label, corpus = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    torch.set_num_threads(2)
    model = default_model_path()
    with tempfile.TemporaryDirectory() as tmp:
        t0, c0 = time.perf_counter(), time.process_time()
        result = train(model, corpus, os.path.join(tmp, "out"), objective="distill", objective_args={"teacher": model},
                       config=TrainingConfig(max_steps=steps, batch_size=64, max_length=32, eval_steps=0, save_steps=0,
                                             device="cpu", show_progress=False))
        print(json.dumps({"label": label, "code": os.path.dirname(sparsecse.__file__), "steps": steps,
                          "steps_per_second": round(result.steps_per_second, 4),
                          "wall_s": round(time.perf_counter() - t0, 1), "cpu_s": round(time.process_time() - c0, 1),
                          "final_loss": result.final_loss}), flush=True)


if __name__ == "__main__":
    main()
