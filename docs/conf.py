"""Sphinx configuration: MyST Markdown pages, the CLI from the click commands, the API from the docstrings."""

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import sparsecse  # noqa: E402

project = "sparsecse"
author = "the sparsecse developers"
release = version = sparsecse.__version__

extensions = ["myst_nb", "sphinx.ext.autodoc", "sphinx.ext.autosummary", "sphinx.ext.napoleon",
              "sphinx.ext.viewcode", "sphinx_click"]
source_suffix = {".rst": "restructuredtext", ".md": "myst-nb", ".ipynb": "myst-nb"}  # .rst first: autosummary writes rST
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store", "figures/**/*.md", "_figures/*.md", "*/_figures/*.md", "brief*"]
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3
nb_execution_mode = "off"  # the notebook is shown with the outputs it was saved with

html_theme = "furo"
smartquotes = False  # "--option" must stay two hyphens
html_title = f"sparsecse {release}"

autosummary_generate = True
# optional extras need not be installed to document the modules that use them
autodoc_mock_imports = ["submitit", "openvino", "nncf", "onnx", "onnxruntime", "model2vec", "skeletoken"]
autodoc_typehints = "none"  # signatures stay readable; types are in the docstrings
autodoc_member_order = "bysource"
autodoc_default_options = {"members": True, "undoc-members": False, "show-inheritance": False,
                           "ignore-module-all": True}  # a package documents what it defines, not what it re-exports

# Every cross-reference must resolve (sphinx-build -n -W); names outside sparsecse have no inventory offline.
nitpicky = True
nitpick_ignore_regex = [
    (r"py:.*", r"(torch|transformers|numpy|np|pandas|pd|click|safetensors|onnxruntime|openvino|nncf|submitit|"
               r"huggingface_hub|sklearn|scipy|matplotlib|tqdm|pathlib|os|typing|collections|dataclasses|enum|"
               r"concurrent|json|abc|mteb|datasets)(\..*)?"),
    (r"py:.*", r"(Path|PathLike|Any|Callable|Sequence|Iterable|Mapping|Iterator|Literal|Optional|Union|Tensor|"
               r"ndarray|DataFrame|nn\.Module|Module|optional|callable|array-like|str|int|float|bool|dict|list|tuple|"
               r"None|bytes|type|object)"),
    # names a module re-exports from another (documented there), listed by autosummary under both
    (r"py:obj", r"sparsecse\.modeling\.register_auto_classes"),
    (r"py:class", r"'?(dict|list|tuple|set|frozenset|type)\[.*"),  # attribute annotations such as dict[str, Any]
]


def _escape_stars(app, ctx, lines):
    """click help texts are plain text: '*.py' would open rST emphasis, `x` would be a title reference."""
    import re

    for i, line in enumerate(lines):
        line = line.replace("*", r"\*")
        lines[i] = re.sub(r"(?<!`)`([^`]+)`(?!`)", r"``\1``", line)


def setup(app):
    for event in ("sphinx-click-process-description", "sphinx-click-process-options",
                  "sphinx-click-process-arguments", "sphinx-click-process-epilog"):
        app.connect(event, _escape_stars)
