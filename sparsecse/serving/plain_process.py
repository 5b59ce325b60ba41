"""A model directory loaded as a runtime without sparsecse loads it: in a fresh Python process that never imports
sparsecse, by transformers' ``AutoModel`` and by sentence-transformers, both with ``trust_remote_code=False``. A
stock-layout model (``--layout stock``) must load there and give sparsecse's own embeddings; the tests and
``benchmarks/plain_load.py`` check it through :func:`load_plainly`.

    >>> line, embeddings = load_plainly("runs/l6-stock/model", ["A man plays a guitar."], "e.npy")  # doctest: +SKIP
    >>> line  # doctest: +SKIP
    'BertModel False'
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np

from sparsecse.errors import SparseCSEError

PLAIN_LOAD = textwrap.dedent("""
    import json, sys
    import numpy as np
    from transformers import AutoModel
    from sentence_transformers import SentenceTransformer
    path, sentences = sys.argv[1], json.loads(sys.argv[2])
    model = AutoModel.from_pretrained(path, trust_remote_code=False)
    st = SentenceTransformer(path, device="cpu", trust_remote_code=False)
    np.save(sys.argv[3], st.encode(sentences, convert_to_numpy=True, batch_size=4))
    print(type(model).__name__, "sparsecse" in sys.modules)
""")


def load_plainly(model_dir: str | os.PathLike, sentences: list[str], out: str | os.PathLike,
                 timeout: float = 300) -> tuple[str, np.ndarray]:
    """Load ``model_dir`` in a fresh process that never imports sparsecse and embed ``sentences`` there.

    Args:
        model_dir: the model directory.
        sentences: what to embed (sentence-transformers' ``encode``, batch 4).
        out: the ``.npy`` file the process writes the embeddings to.
        timeout: seconds before the process is given up.

    Returns:
        (its last output line, ``"CLASS IMPORTED"``: the class ``AutoModel`` built and whether sparsecse was imported
        there, the embeddings).

    Raises:
        SparseCSEError: the process failed (its last error lines).
    """
    done = subprocess.run([sys.executable, "-c", PLAIN_LOAD, str(model_dir), json.dumps(sentences), str(out)],
                          capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise SparseCSEError(f"{model_dir} did not load without sparsecse and remote code: {done.stderr[-2000:]}")
    return done.stdout.strip().splitlines()[-1], np.load(out)
