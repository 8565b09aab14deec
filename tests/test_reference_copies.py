"""The grader's static reading of a submission for the reference's code (autograder.run.reference_copies).

Each case has an honest student and a blank one beside the copier: only the copier is flagged."""

import ast
import inspect
import re
import textwrap

import bertlab.attention
import bertlab.norm
from autograder.run.reference_copies import find_copies, normalized

BLANK = "def {name}(*args, **kwargs):\n    raise NotImplementedError()\n"


def renamed_copy(function, **names) -> str:
    """The reference's source with its docstring gone and some names changed, as a copier would hand it in."""
    source = textwrap.dedent(inspect.getsource(function))
    source = source.replace(function.__doc__, "retyped") if function.__doc__ else source
    for old, new in names.items():
        source = re.sub(rf"\b{old}\b", new, source)
    return source


HONEST_SOFTMAX = """
import torch

def softmax(scores, dim=-1):
    shifted = scores - scores.amax(dim=dim, keepdim=True)
    exponentials = torch.exp(shifted)
    return exponentials / exponentials.sum(dim=dim, keepdim=True)
"""

# The natural one-line answer, which is also the reference's: too short to tell a copy by.
HONEST_CAUSAL_MASK = """
import torch

def causal_mask(size, other=None, device=None):
    other = size if other is None else other
    return torch.ones(size, other, dtype=torch.bool, device=device).tril()
"""


def flagged(source: str, exercise: str) -> list[str]:
    return [copy.reason for copy in find_copies([source], [exercise])]


def test_the_reference_s_code_renamed_is_flagged_and_an_honest_or_blank_answer_is_not():
    copy = renamed_copy(bertlab.norm.layer_norm, x="inputs", eps="epsilon")
    reasons = flagged(copy, "layer_norm")
    assert len(reasons) == 1 and "its code is the reference's" in reasons[0]
    assert flagged(HONEST_SOFTMAX, "softmax") == []
    assert flagged(BLANK.format(name="layer_norm"), "layer_norm") == []


def test_a_one_line_formula_equal_to_the_reference_is_not_flagged_but_calling_the_reference_is():
    reference = ast.parse(textwrap.dedent(inspect.getsource(bertlab.attention.causal_mask))).body[0]
    honest = next(node for node in ast.parse(HONEST_CAUSAL_MASK).body if isinstance(node, ast.FunctionDef))
    assert normalized(honest) == normalized(reference)  # the honest answer has the reference's very shape
    assert flagged(HONEST_CAUSAL_MASK, "causal_mask") == []
    assert flagged(BLANK.format(name="causal_mask"), "causal_mask") == []
    calling = ("import bertlab.attention as A\n\n"
               "def causal_mask(n, m=None, device=None):\n    return A.causal_mask(n, m, device)\n")
    reasons = flagged(calling, "causal_mask")
    assert len(reasons) == 1 and "it uses bertlab.attention.causal_mask" in reasons[0]


def test_no_name_in_a_submission_imports_a_module_or_stops_the_reading():
    """``bertlab.__main__`` runs the command line when imported; 600 shell commands make IPython's
    transformation give up. The reading imports nothing a submission names and skips what it cannot
    read, and still flags the copier beside them."""
    import sys

    sys.modules.pop("bertlab.__main__", None)
    names_the_command_line = "from bertlab import __main__\ndef softmax(x, dim=-1):\n    return __main__.main(x)"
    shell = "\n".join(["!true"] * 600)
    copier = "import bertlab.attention\ndef softmax(x, dim=-1):\n    return bertlab.attention.softmax(x, dim)"
    assert find_copies([shell, names_the_command_line], ["softmax"]) == []
    assert "bertlab.__main__" not in sys.modules
    assert find_copies([shell, HONEST_SOFTMAX], ["softmax"]) == []
    assert find_copies([BLANK.format(name="softmax"), shell], ["softmax"]) == []
    assert [copy.exercise for copy in find_copies([shell, copier], ["softmax"])] == ["softmax"]


def test_each_flag_states_its_certainty():
    """Naming the reference is certain; the reference's shape and code built at run time are suspicions."""
    calls = "import bertlab.attention\ndef softmax(x, dim=-1):\n    return bertlab.attention.softmax(x, dim)"
    bound = "import bertlab.attention\ndef softmax(x, dim=-1):\n    pass\nsoftmax = bertlab.attention.softmax"
    reexecutes = ("import inspect, bertlab.attention\nnamespace = {}\n"
                  "exec(inspect.getsource(bertlab.attention.softmax), namespace)\nsoftmax = namespace['softmax']")
    evaluates = "def softmax(x, dim=-1):\n    return eval('x.softmax(dim)')"
    retyped = renamed_copy(bertlab.norm.layer_norm, x="inputs")
    certainty = {name: [(copy.exercise, copy.certainty) for copy in find_copies([source], [exercise])]
                 for name, source, exercise in [("calls", calls, "softmax"), ("bound", bound, "softmax"),
                                                ("reexecutes", reexecutes, "softmax"),
                                                ("evaluates", evaluates, "softmax"),
                                                ("retyped", retyped, "layer_norm"),
                                                ("honest", HONEST_SOFTMAX, "softmax"),
                                                ("blank", BLANK.format(name="softmax"), "softmax")]}
    assert certainty == {"calls": [("softmax", "certain")], "bound": [("softmax", "certain")],
                         "reexecutes": [("softmax", "certain")], "evaluates": [("softmax", "suspected")],
                         "retyped": [("layer_norm", "suspected")], "honest": [], "blank": []}
