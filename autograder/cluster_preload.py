"""What a worker of the Dask LocalCluster of ``autograder grade --engine dask`` does as it starts: Dask's hook
``dask_setup`` of a module that a worker preloads (:func:`autograder.cluster.local_cluster`).

The module imports the standard library only, so that the cluster starts at once; the grader's side of the worker
comes in a thread, which starts the worker's job server and checks its sandbox
(:func:`autograder.cluster.warm_up`) while the instructor's process prepares the course.
"""

import signal
import threading


def dask_setup(worker) -> None:
    """Ctrl-C in the instructor's terminal reaches every process of its group, these workers too, but the
    instructor's process stops them itself (each would print a traceback); the warm-up starts."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_warm_up, name="autograder-warm-up", daemon=True).start()


def _warm_up() -> None:
    from autograder.cluster import warm_up

    warm_up()
