"""Where a grading run writes: the layout of its output folder, in one record every writer uses.

``DIR`` (``autograder grade --out DIR``)::

    results.json, grades.csv, gradebook.db          the class's grades (the instructor's only)
    feedback/<student>/<chapter>/<notebook>.html    each student's feedback page (handed to them)
    .work/                                          the grader's own
        lock                                        one grading run at a time
        key, results/<student>/<chapter>.json       the signed results (autograder.core.results.ResultStore)
        files/<chapter>/                            the chapter's files but its notebook (data it reads)
        course/                                     the private nbgrader course
            source/<chapter>/                       a copy of solutions/<chapter>
            submitted/<student>/<chapter>/submission.bin    the submission's bytes, as collected
            autograded/<student>/<chapter>/<notebook>.ipynb  the graded notebook, for the formgrader
        jobs/<student>/<chapter>/                   a job's folder while it runs (:class:`JobFolder`)
"""

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class JobFolder:
    """The private folder of one job, deleted when its files are in place."""

    root: Path

    @property
    def graded(self) -> Path:
        """The graded notebook the job writes."""
        return self.root / "graded.ipynb"

    @property
    def feedback(self) -> Path:
        """The feedback page the job writes."""
        return self.root / "feedback.html"

    @property
    def files(self) -> Path:
        """The worker's working folder: the chapter's files, as beside the notebook."""
        return self.root / "files"


@dataclass(frozen=True)
class OutputLayout:
    """The paths of an output folder (see the module's docstring)."""

    root: Path

    @property
    def results_json(self) -> Path:
        return self.root / "results.json"

    @property
    def grades_csv(self) -> Path:
        return self.root / "grades.csv"

    @property
    def gradebook(self) -> Path:
        """The SQLite gradebook, unless ``--db`` names another."""
        return self.root / "gradebook.db"

    @property
    def feedback(self) -> Path:
        return self.root / "feedback"

    def feedback_page(self, student: str, chapter: str, notebook: str) -> Path:
        return self.feedback / student / chapter / f"{notebook}.html"

    @property
    def work(self) -> Path:
        return self.root / ".work"

    @property
    def lock(self) -> Path:
        return self.work / "lock"

    @property
    def result_key(self) -> Path:
        return self.work / "key"

    @property
    def results(self) -> Path:
        """The folder of the signed results."""
        return self.work / "results"

    def result(self, student: str, chapter: str) -> Path:
        return self.results / student / f"{chapter}.json"

    def chapter_files(self, chapter: str) -> Path:
        """The chapter's files other than its notebook, which each job's worker and sandbox start with."""
        return self.work / "files" / chapter

    def stand_ins(self, chapter: str) -> Path:
        """The files a sandbox of the chapter shows in place of its references (autograder.run.stand_ins)."""
        return self.work / "stand-ins" / chapter

    @property
    def nbgrader_course(self) -> Path:
        return self.work / "course"

    @property
    def sources(self) -> Path:
        return self.nbgrader_course / "source"

    def source(self, chapter: str) -> Path:
        return self.sources / chapter

    def submitted(self, student: str, chapter: str) -> Path:
        return self.nbgrader_course / "submitted" / student / chapter / "submission.bin"

    def autograded(self, student: str, chapter: str, notebook: str) -> Path:
        return self.nbgrader_course / "autograded" / student / chapter / f"{notebook}.ipynb"

    @property
    def jobs(self) -> Path:
        return self.work / "jobs"

    def job_folder(self, student: str, chapter: str) -> JobFolder:
        return JobFolder(self.jobs / student / chapter)
