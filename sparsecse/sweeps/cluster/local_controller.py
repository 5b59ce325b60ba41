"""The controller of one ``sweep --launcher local`` task: submitit's local controller, in its own session and
tied to the sweep that started it.

submitit starts each local task as ``python -m submitit.local._local FOLDER``, a controller that runs the
task's process and shares the terminal with the sweep. So a Ctrl-C reached every controller too (each printed a
traceback of its own after the sweep's one sentence), and a sweep killed with SIGKILL left them running. Here the
controller runs in a session of its own (the terminal's Ctrl-C reaches only the sweep, which stops the tasks and
says so), ends quietly when the sweep stops it (SIGINT: its task is stopped first), and stops its task itself when
the sweep is gone (its process no longer runs, checked twice a second).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import submitit
from submitit.local import local as submitit_local

from sparsecse.artifacts.locks import process_alive

PARENT_ENV = "SPARSECSE_SWEEP_PID"


def _watch(parent: int, first_ppid: int) -> None:
    """SIGINT to this process (its task is then stopped) once the sweep that started it has gone."""
    while process_alive(parent) and os.getppid() == first_ppid:
        time.sleep(0.5)
    os.kill(os.getpid(), signal.SIGINT)


def main(folder: str) -> int:
    """Run submitit's local controller on ``folder`` until it ends, stopping it if the launching process dies; the
    exit status."""
    parent = int(os.environ.get(PARENT_ENV) or os.getppid())
    threading.Thread(target=_watch, args=(parent, os.getppid()), daemon=True).start()
    try:
        submitit_local.Controller(Path(folder)).run()  # its finally block stops the task it started
    except KeyboardInterrupt:
        return 130
    return 0


class LocalExecutor(submitit.LocalExecutor):
    """submitit's LocalExecutor whose controllers are this module's (see the module's docstring)."""

    def _submit_command(self, command: str):
        ntasks = self.parameters.get("tasks_per_node", 1)
        env = dict(os.environ)
        env.update(
            SUBMITIT_LOCAL_NTASKS=str(ntasks), SUBMITIT_LOCAL_COMMAND=command,
            SUBMITIT_LOCAL_TIMEOUT_S=str(int(60 * self.parameters.get("timeout_min", 2.0))),
            SUBMITIT_LOCAL_SIGNAL_DELAY_S=str(int(self.parameters.get("signal_delay_s", 30))),
            SUBMITIT_LOCAL_NODEID="0", SUBMITIT_LOCAL_JOB_NUM_NODES="1",
            SUBMITIT_STDERR_TO_STDOUT="1" if self.parameters.get("stderr_to_stdout", False) else "",
            SUBMITIT_EXECUTOR="local", CUDA_VISIBLE_DEVICES="", SUBMITIT_LOCAL_WITH_SHELL="",
            **{PARENT_ENV: str(os.getpid())},
        )
        process = subprocess.Popen([sys.executable, "-m", __name__, str(self.folder)], env=env,
                                   stdin=subprocess.DEVNULL, start_new_session=True)
        return submitit_local.LocalJob(folder=self.folder, job_id=str(process.pid), process=process,
                                       tasks=list(range(ntasks)))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
