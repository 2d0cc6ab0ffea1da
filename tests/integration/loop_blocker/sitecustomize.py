"""For the tests only, on a replicator's ``PYTHONPATH``: SIGUSR2 blocks the process's main thread,
which runs its event loop, for ``LOOP_BLOCK_S`` seconds (a callback that never yields, as a
long CPU-bound step or a blocking call would), while its sockets and the kernel go on."""

import os
import signal
import time


def _block(_signum: int, _frame: object) -> None:
    time.sleep(float(os.environ["LOOP_BLOCK_S"]))


if os.environ.get("LOOP_BLOCK_S"):
    signal.signal(signal.SIGUSR2, _block)
