"""Task names of the evaluation suite and how a ``--tasks`` value selects them."""

from __future__ import annotations

from sparsecse.errors import SparseCSEError

STS_TASKS = ("STS12", "STS13", "STS14", "STS15", "STS16", "STSBenchmark", "SICKRelatedness")
TRANSFER_TASKS = ("MR", "CR", "SUBJ", "MPQA", "SST2", "TREC", "MRPC")
ALL_TASKS = STS_TASKS + TRANSFER_TASKS
GROUPS = {"sts": STS_TASKS, "transfer": TRANSFER_TASKS, "all": ALL_TASKS}
# Spellings people use for the same tasks (case is ignored everywhere).
ALIASES = {"STSB": "STSBenchmark", "STS-B": "STSBenchmark", "SICK-R": "SICKRelatedness", "SICKR": "SICKRelatedness",
           "SICK": "SICKRelatedness", "SST-2": "SST2", "SST": "SST2"}


def resolve_tasks(spec: str | list[str] | tuple[str, ...] | None) -> list[str]:
    """``sts``, ``transfer``, ``all`` or comma-separated task names -> task names in suite order."""
    if spec is None:
        spec = "sts"
    items = spec.split(",") if isinstance(spec, str) else list(spec)
    by_lower = {name.lower(): name for name in ALL_TASKS}
    by_lower.update({alias.lower(): name for alias, name in ALIASES.items()})
    chosen: set[str] = set()
    for item in (str(x).strip() for x in items):
        if not item:
            raise SparseCSEError(f"The task list {spec!r} has an empty item; separate task names by single commas.")
        if item.lower() in GROUPS:
            chosen.update(GROUPS[item.lower()])
        elif item.lower() in by_lower:
            chosen.add(by_lower[item.lower()])
        else:
            raise SparseCSEError(
                f"Unknown task {item!r}; choose sts, transfer, all or any of {', '.join(ALL_TASKS)}."
            )
    if not chosen:
        raise SparseCSEError(f"No task given; choose sts, transfer, all or any of {', '.join(ALL_TASKS)}.")
    return [name for name in ALL_TASKS if name in chosen]
