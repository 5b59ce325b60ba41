"""The model card (``README.md``) of every model directory sparsecse writes, in sentence-transformers' layout:
:mod:`~sparsecse.cards.facts` reads what a directory records, :mod:`~sparsecse.cards.sections` renders the
sections with tables, :mod:`~sparsecse.cards.citations` holds the BibTeX, and :mod:`~sparsecse.cards.model_card`
puts them together. A recipe's final evaluation, which adds its figures to the card, is
:mod:`sparsecse.recipes.card`."""
