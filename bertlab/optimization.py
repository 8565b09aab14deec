"""BERT's optimiser settings: AdamW's parameter groups and the linear warm-up and decay of the rate.

Pretraining (``bertlab.pretraining``), fine-tuning (``bertlab.finetuning``) and distillation
(``bertlab.distillation``) all use them.
"""

import torch
from torch import nn
from torch.optim.lr_scheduler import LambdaLR


def weight_decay_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """AdamW parameter groups: decay the weight matrices, not the biases nor the LayerNorm weights.

    As in BERT's optimizer, which excludes "bias" and "LayerNorm" parameters from weight decay
    (Loshchilov and Hutter's decoupled weight decay, 2019). Biases and normalization gains/shifts are
    exactly the 1-D parameters, so the rule is: decay if the parameter has 2 or more dimensions
    (matrices and embedding tables). Frozen parameters (requires_grad False) are left out.
    """
    parameters = [parameter for parameter in model.parameters() if parameter.requires_grad]
    return [{"params": [parameter for parameter in parameters if parameter.ndim >= 2], "weight_decay": weight_decay},
            {"params": [parameter for parameter in parameters if parameter.ndim < 2], "weight_decay": 0.0}]


def get_linear_schedule(optimizer: torch.optim.Optimizer, warmup_steps: int, total_steps: int) -> LambdaLR:
    """Linear warm-up then linear decay to 0, BERT's learning-rate schedule.

    lr(t) = lr * t / warmup_steps                                for t < warmup_steps
    lr(t) = lr * max(0, (total_steps - t) / (total_steps - warmup_steps))   afterwards,

    for the optimizer step t = 0, 1, ... (call ``scheduler.step()`` after each ``optimizer.step()``).
    """
    if total_steps < 1:
        raise ValueError(f"total_steps must be positive, got {total_steps}")
    if not 0 <= warmup_steps <= total_steps:
        raise ValueError(f"warmup_steps must be in [0, total_steps = {total_steps}], got {warmup_steps}")

    def factor(step: int) -> float:
        if step < warmup_steps:
            return step / warmup_steps
        return max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))

    return LambdaLR(optimizer, factor)
