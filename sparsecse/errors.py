"""The one exception type that the command line turns into a one-sentence error."""


class SparseCSEError(Exception):
    """Bad input or an unusable artifact; the message is one sentence meant for the user."""


def exact_number(value: float) -> str:
    """``value`` as short as ``:g`` where that is exact, else every digit (``1.0000001``, never a rounded ``1``)."""
    short = f"{value:g}"
    return short if float(short) == float(value) else repr(float(value))
