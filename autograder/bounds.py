"""Every bound of the grader, in one place, grouped by the threat it answers.

A submission is code and files written by someone who may want to flood, stall or exhaust the
grader (``instructors.md``, "Threat model", names each threat with its bounds and the tests that
prove them). Each bound below says what it bounds; the modules that enforce it import it from here.
Where one word would mean two things, the names say which: a reply's nesting
(:data:`MAX_REPLY_DEPTH`) is not a folder's (:data:`MAX_FOLDER_DEPTH`), and the message of the
student's exception as the grader rebuilds it (:data:`MAX_STUDENT_EXCEPTION_CHARS`) is not the
message of a test's outcome (:data:`MAX_OUTCOME_MESSAGE_CHARS`).

The resource limits of a notebook's sandbox, which the command line may change, are a
:class:`Limits`; the rest are fixed.

This module uses the standard library only: the student process imports it too.
"""

from dataclasses import dataclass
from datetime import timedelta

# --------------------------------------------------------------------------------------------------
# Submissions too large, too many or too deep (autograder.collect.submissions, which reads SUBMISSIONS)
# --------------------------------------------------------------------------------------------------

MAX_NOTEBOOK_BYTES = 50 * 1024 * 1024  # of one notebook file or zip member, read no further
MAX_STUDENT_BYTES = 200 * 1024 * 1024  # all of a student's files and zip members together
MAX_CELLS = 5_000  # of one notebook, counted before anything is built from it
MAX_ZIP_MEMBERS = 1_000  # of one zip file, read member by member
MAX_ZIP_DIRECTORY_BYTES = 1024 * 1024  # of one zip file's list of members, checked before it is read
MAX_FOLDER_DEPTH = 6  # levels of folders walked under a student's folder
MAX_ENTRIES = 10_000  # files and folders listed per student folder
MAX_SKIPPED_KEPT_PER_STUDENT = 2_000  # entries not graded kept per student (> a zip file's), then one counting the rest
MAX_SKIPPED_SHOWN_PER_STUDENT = 5  # of those, listed in the summary of the run, then how many more
MAX_NAME_CHARS = 300  # of a name given out (an origin, a skipped path, a student's name in a note)
MAX_REASON_CHARS = 200  # of an exception's message in the reason a file was skipped or failed
TIMESTAMP_SLACK = timedelta(days=1)  # how far in the future a timestamp.txt may be (clocks differ)
MAX_TIMESTAMP_BYTES = 100  # of a timestamp.txt, read no further
MAX_TIMESTAMP_REASON_CHARS = 40  # of why a timestamp.txt was ignored, in the note that says so
MAX_ID_CHARS = 64  # of a student id made from a folder's or a file's name

# --------------------------------------------------------------------------------------------------
# Replies of the student process too large or too deep to decode (autograder.run.wire, student_side)
# --------------------------------------------------------------------------------------------------

MAX_REPLY_BYTES = 256 * 1024 * 1024  # of one reply, checked before it is read
MAX_DECODED_ITEMS = 2_000_000  # values a reply decodes into, counting shared ones each time they appear
MAX_REPLY_DEPTH = 100  # nesting of lists, tuples and dicts in a reply the grader decodes
MAX_LABEL_CHARS = 80  # of a handle's label (a function's name, an object's type), for messages only
MAX_ENCODED_DEPTH = 32  # nesting the student process encodes as data; deeper values become handles
MAX_LIST_ITEMS = 1_000_000  # of an iterator the student process lists for the grader
MAX_UNREADABLE_REPLY_CHARS = 500  # of why a reply cannot be read, in the message that ends the student process

# --------------------------------------------------------------------------------------------------
# Output flooding: what the student's cells and the tests print or display
# --------------------------------------------------------------------------------------------------

MAX_CELL_OUTPUT_CHARS = 1_000_000  # of one cell's outputs, as the student process sends them
MAX_ERROR_LINES = 200  # of a cell's traceback, as the student process sends it
MAX_ERROR_LINE_CHARS = 10_000  # of each line of that traceback, and of its message
MAX_OUTPUT_CHARS = 100_000  # of one output's text the grader keeps (a stream, a display's text, a traceback)
MAX_IMAGE_CHARS = 2_000_000  # of one image the grader keeps (base64)
MAX_NOTEBOOK_OUTPUT_CHARS = 5_000_000  # of all the outputs of a notebook the grader keeps
MAX_NOTEBOOK_OUTPUTS = 10_000  # outputs of a notebook the grader keeps, however small (the rest are dropped)
MAX_ERROR_NAME_CHARS = 200  # of an error output's name
MAX_TEST_OUTPUT_CHARS = 20_000  # of what a test cell prints, kept for the feedback

# --------------------------------------------------------------------------------------------------
# Messages: what of the student's exceptions reaches results, feedback and the summary
# --------------------------------------------------------------------------------------------------

MAX_STUDENT_EXCEPTION_CHARS = 5_000  # of the message (and each argument) of an exception the grader rebuilds
MAX_STUDENT_TRACEBACK_CHARS = 5_000  # of the traceback of the student's code that comes with it
MAX_OUTCOME_MESSAGE_CHARS = 10_000  # of a test's message in results.json and the feedback
SUMMARY_MESSAGE_CHARS = 120  # of a test's message (its first line), in the summary's line of its student
SUMMARY_HINT_CHARS = 300  # of the hint of a known mistake that follows it there
MAX_EXCEPTION_TYPE_CHARS = 100  # of the name of a student's exception type the grader does not know
MAX_CONTEXT_ERROR_CHARS = 500  # of the error of the instructor code a test needs, where the student's made it fail
MAX_FEEDBACK_PROBLEM_CHARS = 500  # of why a feedback page is the plain one
MAX_REBOUND_SOURCE_CHARS = 100  # of the code quoted in a copy's reason (a name bound to the reference)
# The grader's own failures, where a submission's text may be part of them: a job's (the first line in the run's
# report, the traceback's end a worker sends), the gradebook's, the messages the command prints.
MAX_JOB_FAILURE_CHARS = 300
MAX_WORKER_TRACEBACK_CHARS = 2_000
MAX_GRADEBOOK_ERROR_CHARS = 500
MAX_NBGRADER_LOG_CHARS = 3_000
MAX_PRINTED_MESSAGE_CHARS = 2_000

# --------------------------------------------------------------------------------------------------
# The grader's own work on a submission's text: reading its code for copies (autograder.run.reference_copies),
# sanitizing its Markdown and HTML (sanitize, cell_outputs) and its feedback page (feedback)
# --------------------------------------------------------------------------------------------------

MAX_RUN_CELL_CHARS = 1_000_000  # of one code cell sent to the student's process; a longer one is not run, and says so
MAX_COPY_READ_CELL_CHARS = 100_000  # of one code cell the copy reader parses; a longer one is not read, and flagged
# Of all the code cells of a notebook the copy reader parses, each counted once more for each line of IPython's
# syntax (%magic, !shell, obj?), for which IPython's transformation reads the whole cell again.
MAX_COPY_READ_CHARS = 200_000  # the cells past it are not read, and flagged
# Start tags of one Markdown cell's HTML, or of one HTML output, the sanitizer parses: html5lib's work grows with the
# square of how deep or how wide they nest. A cell with more is shown as written; an output with more, as its text.
MAX_HTML_TAGS = 1_000
MAX_NOTEBOOK_HTML_TAGS = 10_000  # of a page's Markdown cells together, and of a notebook's HTML outputs together
MAX_RICH_OUTPUT_CHARS = 200_000  # of a notebook's HTML and Markdown outputs kept as such; past it, their text only
# Of one cell's source a page shows: a longer code cell is cut, a longer Markdown cell is shown as written (not
# rendered) and cut, each with a line that says how much was cut.
MAX_SHOWN_CELL_CHARS = 20_000
# Of all the cells' sources one page shows (a feedback page; the Markdown of the notebook kept for the formgrader):
# the cells past it are replaced by a line that says so.
MAX_SHOWN_CHARS = 150_000
MAX_SHOWN_CELLS = 1_000  # cells of the notebook's own one page shows (each costs it its frame, however short)
MAX_SHOWN_OUTPUT_CHARS = 2_000_000  # of the outputs of the student's cells a feedback page shows
MAX_SHOWN_OUTPUTS = 1_000  # outputs a feedback page shows (each costs it its frame, whatever its size)
MAX_FEEDBACK_PAGE_BYTES = 5_000_000  # of one feedback page; a larger one is replaced by the plain page of the grades

# --------------------------------------------------------------------------------------------------
# Time: code that never ends, or a process that never answers
# --------------------------------------------------------------------------------------------------

STARTUP_SECONDS = 180.0  # for the student process to import torch and IPython (slow on a busy machine)
INTERRUPT_GRACE_SECONDS = 3.0  # after SIGINT, how long the student process has to give up before it is killed
MAX_RESTARTS = 2  # student processes restarted per notebook after one ended
FEEDBACK_SECONDS = 120.0  # to render one feedback page; then a plain page is written
JOB_MARGIN_SECONDS = 300.0  # of a job, past its notebook, starts and feedback, before its worker is killed
CONNECT_SECONDS = 15  # to reach a PostgreSQL gradebook before giving up
REAP_SECONDS = 10.0  # to wait for a killed process (a sandbox's, a job's worker) to end
GIT_SECONDS = 60  # for git to say whether it ignores the output folder
SANDBOX_PROBE_SECONDS = 120  # for the first sandbox to import the course's packages, or grading does not start
CGROUP_REMOVAL_SECONDS = 5.0  # to empty and remove a sandbox's cgroup

# --------------------------------------------------------------------------------------------------
# A Dask cluster (autograder.cluster): workers that never come, a scheduler that never answers, a queue
# --------------------------------------------------------------------------------------------------

IN_FLIGHT_PER_SLOT = 2  # jobs handed to the cluster per admitted worker thread: one running, one waiting
WORKERLESS_SECONDS = 600.0  # the run stops (what was graded is kept) after so long without an admitted worker
SCHEDULER_SECONDS = 30  # to reach a running scheduler

# --------------------------------------------------------------------------------------------------
# Memory, processes, disk and CPU of the student's code (autograder.run.sandbox)
# --------------------------------------------------------------------------------------------------

CPU_PERIOD = 0.2  # seconds between two looks at a sandbox's CPU time (without cgroup v2's cpu.max)
CPU_BURST = 1.0  # seconds of CPU credit per core a sandbox may bank (its share is averaged over it)
MEMORY_PERIOD = 0.1  # seconds between two looks at a sandbox's memory (without cgroup v2's memory.max)
MEMORY_MARGIN_MB = 512  # how far past --memory a sandbox may get between two looks (tests/test_sandbox.py)


@dataclass(frozen=True)
class Limits:
    """Resource limits of one sandboxed notebook (``autograder grade --timeout/--notebook-timeout/--memory``)."""

    cell_timeout: float = 60.0  # seconds per cell, and per call of a student's function
    notebook_timeout: float = 600.0  # seconds for one execution of a whole notebook
    memory_mb: int = 4096  # of the whole process tree with cgroup v2, else per process (RLIMIT_AS)
    processes: int = 64  # processes and threads (pids.max, else RLIMIT_NPROC)
    scratch_mb: int = 512  # its writable space: working folder, $HOME, /tmp and /dev/shm together
    scratch_files: int = 10_000  # files and folders in that space
    file_size_mb: int = 64  # largest file it may write (RLIMIT_FSIZE)
    open_files: int = 512  # RLIMIT_NOFILE
    threads: int = 1  # torch / OpenMP threads, and the cores all its processes may use together
