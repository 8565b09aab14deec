"""What the checks of the attention exercises (chapters 01, 02 and 05) share: the functions that compute
attention for the student, which no attention exercise may call, and the tolerances of attention
outputs. The topic modules of checks import these from here, never from one another.
"""

import torch
import torch.nn.functional as F

from autograder.checks.framework import DEFAULT_TOLERANCES, Tolerance
from bertlab import attention as reference

ATTENTION_FORBIDDEN = (
    reference.scaled_dot_product_attention,
    reference.fused_attention,
    reference.MultiHeadAttention.forward,
    F.scaled_dot_product_attention,
    F.multi_head_attention_forward,
    torch.nn.MultiheadAttention.forward,
    torch.ops.aten.scaled_dot_product_attention,
    torch.ops.aten._scaled_dot_product_attention_math,
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu,
    "bertlab.efficient.grouped_query_attention",
    "bertlab.efficient.sliding_window_attention",
    "bertlab.efficient.flash_attention",
    "transformers.integrations.sdpa_attention.sdpa_attention_forward",
    "transformers.models.bert.modeling_bert.eager_attention_forward",
)

#: Scores of about 300 make float32 rounding of q k^T visible in the weights: slightly looser.
ATTENTION_TOLERANCES = {**DEFAULT_TOLERANCES, torch.float32: Tolerance(atol=2e-5, rtol=2e-4)}
