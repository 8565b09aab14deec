"""What the checks hand to the student's code: functions and classes the student's process can import.

While a chapter is graded, the topic modules of checks cannot be imported in the student's process
(:mod:`autograder.run.stand_ins`), and a function or a class travels there by its name. So what a case
passes to the student's code (a sublayer that prints as its code, the loss function of a training
epoch) is defined here, in a module the sandbox keeps, and holds no reference of an exercise.
"""

from collections.abc import Callable

import torch
from torch import nn

DROPOUT_SEED = 1234


class Written:
    """A plain function of a case that prints as the code that defines it, so a failing case reads well."""

    def __init__(self, function: Callable, source: str):
        self.function = function
        self.source = source

    def __call__(self, *args):
        return self.function(*args)

    def __repr__(self) -> str:
        return self.source


def seeded_classification_loss(model: nn.Module, batch: dict) -> torch.Tensor:
    """:func:`bertlab.finetuning.classification_loss`, with the dropout masks drawn from the global
    generator seeded by the batch's first index: the student's run and the reference's, in any
    process, see the same masks for the same batch."""
    from bertlab.finetuning import classification_loss

    torch.manual_seed(DROPOUT_SEED + int(batch["index"][0]))
    return classification_loss(model, batch)
