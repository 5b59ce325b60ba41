"""The one exception type that the command line turns into a one-sentence error."""


class SparseCSEError(Exception):
    """Bad input or an unusable artifact; the message is one sentence meant for the user."""
