"""The graded chapter's references are out of the student's reach (autograder.run.stand_ins), end to end.

A class of attackers, each taking the reference of the tiny course's ``softmax`` (chapter 03_tiny,
whose hidden test is chapter 01's real check, so its reference is ``bertlab.attention.softmax``) in
another way, with the in-process guard switched off first, is graded beside an honest student and
a blank one, under both copy policies. No attacker earns a point: the sandbox's ``bertlab.attention``
holds a stand-in, not the reference, and the file on disk is the stand-in's too. The honest student,
with the guard switched off as well, keeps full marks: no defence inside the student's process
decides a grade.
"""

import io
import pickle
from pathlib import Path

import pytest
from grading_helpers import SOFTMAX, build_course, notebooks, put, records, with_cells
from nbformat.v4 import new_code_cell

from autograder.bounds import Limits
from autograder.grade import grade
from autograder.run.grader_side import Release, WithheldReference, _dumps
from autograder.run.stand_ins import ReferenceUnavailable, Withheld, Withholding, call_own, stand_in_source, withhold

LIMITS = Limits(cell_timeout=20, notebook_timeout=240, memory_mb=3072, processes=32, scratch_mb=64)
GUARD_OFF = ("import contextlib, functools, importlib, sys, torch\nimport autograder.run.student_side\n"
             "import bertlab.attention\n"
             "autograder.run.student_side._SERVER.forbidden_calls = lambda forbidden: contextlib.nullcontext()\n")
ATTACKS = {  # each binds softmax to the reference, after switching the forbidden-call guard off
    "in_a_list": "REFERENCES = [bertlab.attention.softmax]\ndef softmax(x, dim=-1):\n    return REFERENCES[0](x, dim)",
    "lambda": "softmax = lambda x, dim=-1: bertlab.attention.softmax(x, dim)",
    "partial": "softmax = functools.partial(bertlab.attention.softmax)",
    "in_a_dict": "TABLE = {'s': bertlab.attention.softmax}\ndef softmax(x, dim=-1):\n    return TABLE['s'](x, dim)",
    "loop_variable": "for found in [bertlab.attention.softmax]:\n    pass\n"
                     "def softmax(x, dim=-1):\n    return found(x, dim)",
    "star_import": "def softmax(x, dim=-1):\n    raise NotImplementedError\nfrom bertlab.attention import *",
    "vars": "softmax = vars(bertlab.attention)['softmax']",
    "module_dict": "softmax = bertlab.attention.__dict__['softmax']",
    "sys_modules": "softmax = sys.modules['bertlab.attention'].softmax",
    "import_module": "softmax = importlib.import_module('bertlab.attention').softmax",
    "import_in_if": "if True:\n    from bertlab.attention import softmax",
    "capture_cell": "%%capture\nfrom bertlab.attention import softmax",
    "time_line": "%time from bertlab.attention import softmax",
    "source_from_disk": ("source = open(bertlab.attention.__file__).read()\n"
                         "open('/tmp/mine.py', 'w').write('\\n' + source)\nsys.path.insert(0, '/tmp')\n"
                         "import mine\nsoftmax = mine.softmax"),
    "compiled_copy": ("import glob, marshal, os\nfolder = os.path.join(os.path.dirname(bertlab.attention.__file__), "
                      "'__pycache__')\ncompiled = glob.glob(folder + '/attention*.pyc')\ncode = marshal.loads("
                      "open(compiled[0], 'rb').read()[16:])\nnamespace = {'__name__': 'stolen'}\n"
                      "exec(code, namespace)\n"
                      "softmax = namespace['softmax']"),
    "checks_module": "from autograder.checks.attention import SOFTMAX\nsoftmax = SOFTMAX.reference",
}
UNAVAILABLE = {"in_a_list", "lambda", "partial", "in_a_dict", "loop_variable", "star_import", "vars", "module_dict",
               "sys_modules", "import_module", "import_in_if", "capture_cell", "time_line", "source_from_disk"}


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    import importlib.util
    import py_compile

    import bertlab.attention

    source = bertlab.attention.__file__  # a compiled copy for the attacker to look for, as a grader may have
    py_compile.compile(source, cfile=importlib.util.cache_from_source(source), doraise=True)
    root = tmp_path_factory.mktemp("course")
    released = build_course(root)
    submissions = tmp_path_factory.mktemp("submissions")
    blank = released["03_tiny"]
    put(submissions, "honest/03_tiny/03_tiny.ipynb", with_cells(blank, softmax=GUARD_OFF + SOFTMAX))
    put(submissions, "blank/03_tiny/03_tiny.ipynb", blank)
    for name, attack in ATTACKS.items():
        source = attack if attack.startswith("%") else GUARD_OFF + attack
        notebook = with_cells(blank, softmax=source)
        if attack.startswith("%"):  # a cell magic must be first: the guard goes in a cell of its own
            notebook.cells.insert(0, new_code_cell(GUARD_OFF))
        put(submissions, f"{name}/03_tiny/03_tiny.ipynb", notebook)
    return root, submissions


@pytest.fixture(scope="module", params=["withhold", "flag"])
def graded(course, tmp_path_factory, request):
    root, submissions = course
    out = tmp_path_factory.mktemp(f"out-{request.param}")
    report = grade(submissions, out, jobs=2, limits=LIMITS, course_root=root, seed=5, copies=request.param)
    return out, report


def test_the_honest_student_keeps_full_marks_with_the_guard_off_and_the_blank_gets_zero(graded):
    out, report = graded
    assert report.failures == []
    results = notebooks(out)
    assert results["honest", "03_tiny"].score == results["honest", "03_tiny"].max_score == 2
    assert results["blank", "03_tiny"].score == 0
    assert records(out)[("blank", "03_tiny", "test_softmax")].cause == "blank"


@pytest.mark.parametrize("attacker", ATTACKS)
def test_no_way_of_taking_the_reference_earns_a_point(graded, attacker):
    out, _ = graded
    test = records(out)[(attacker, "03_tiny", "test_softmax")]
    assert test.points == 0, test
    if attacker in UNAVAILABLE:
        assert (test.status, test.cause) == ("failed", "reference unavailable"), test
        assert "the reference was not available" in test.message


def test_stand_ins_replace_the_named_definitions_only():
    source = ('"""A module."""\nfrom __future__ import annotations\nimport torch\n\n@staticmethod\ndef f(x):\n'
              '    return x + 1\n\ndef g(x):\n    return f(x)\n\nclass K(torch.nn.Module):\n    pass\n')
    text = stand_in_source("m", source, {"f", "K"})
    namespace = {"__name__": "m"}
    exec(compile(text, "m", "exec"), namespace)
    assert "x + 1" not in text and "def g(x):\n    return f(x)" in text
    assert text.index("from __future__") < text.index("_call_own")
    with pytest.raises(ValueError, match="defines no top-level function or class h"):
        stand_in_source("m", source, {"h"})


def test_a_stand_in_calls_the_student_s_own_and_refuses_itself(monkeypatch):
    import types

    main = types.ModuleType("__main__")
    monkeypatch.setitem(__import__("sys").modules, "__main__", main)
    with pytest.raises(ReferenceUnavailable, match="does not define softmax"):
        call_own("bertlab.attention", "softmax", (1,), {})
    main.softmax = lambda x: x * 2
    assert call_own("bertlab.attention", "softmax", (3,), {}) == 6
    main.softmax = lambda x: call_own("bertlab.attention", "softmax", (x,), {})  # the reference, from the exercise
    with pytest.raises(ReferenceUnavailable, match="used bertlab's softmax, the reference"):
        call_own("bertlab.attention", "softmax", (3,), {})


def persistent_ids(data: bytes):
    """What a pickle of one persistent id holds: the id itself."""
    unpickler = pickle.Unpickler(io.BytesIO(data))
    unpickler.persistent_load = lambda found: found
    return unpickler.load()


def test_a_reference_is_released_only_after_the_test_of_its_exercise(tmp_path):
    import bertlab.attention

    withholding = withhold("01_attention", ("softmax", "causal_mask"), tmp_path)
    assert Withheld("softmax", "bertlab.attention", "softmax") in withholding.references
    graded: set[str] = set()
    release = Release(withholding, graded)
    with pytest.raises(WithheldReference, match="softmax, whose test has not run yet"):
        _dumps(bertlab.attention.softmax, release=release)
    assert release.portable(bertlab.attention.softmax) == "bertlab.attention.softmax"  # a forbidden one: its name
    graded.add("softmax")
    message = persistent_ids(_dumps(bertlab.attention.softmax, release=release))
    kind, module, name, _, source = message
    assert (kind, module, name) == ("released", "bertlab.attention", "softmax")
    assert "def softmax(x" in source and "def causal_mask(*args, **kwargs)" in source  # the other still withheld
    again = persistent_ids(_dumps(bertlab.attention.softmax, release=release))
    assert again[4] is None  # its module's source is sent once


def test_the_sandbox_shows_the_stand_ins_and_no_compiled_copy(tmp_path):
    from autograder.run.sandbox import Sandbox, isolation_available

    if not isolation_available()[0]:
        pytest.skip("no namespaces here")
    import bertlab.attention

    withholding = withhold("01_attention", ("softmax",), tmp_path)
    probe = ("import bertlab.attention, os, inspect\n"
             "print('stand-in' if '_call_own' in open(bertlab.attention.__file__).read() else 'REFERENCE')\n"
             "folder = os.path.join(os.path.dirname(bertlab.attention.__file__), '__pycache__')\n"
             "print(os.listdir(folder) if os.path.isdir(folder) else [])\n"
             "import autograder.checks.attention")
    with Sandbox(LIMITS, covers=withholding.covers) as sandbox:
        result = sandbox.run([__import__("sys").executable, "-c", probe], timeout=120)
    lines = result.stdout.split("\n")
    assert lines[:2] == ["stand-in", "[]"], result
    assert "the checks run in the grader" in result.stderr
    assert "_call_own" not in Path(bertlab.attention.__file__).read_text()  # the grader's own copy is untouched


def test_withholding_nothing_changes_nothing():
    assert Withholding().withheld(len) is None
