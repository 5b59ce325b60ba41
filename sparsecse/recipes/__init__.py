"""Recipes: a compression run as one command (``sparsecse compress --recipe NAME``).

:mod:`~sparsecse.recipes.spec` reads and checks a recipe file, :mod:`~sparsecse.recipes.stages` runs each
stage type, :mod:`~sparsecse.recipes.runner` chains them with resume, and :mod:`~sparsecse.recipes.card`
evaluates the final model and writes its model card.
"""
