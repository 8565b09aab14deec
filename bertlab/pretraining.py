"""Pretraining BERT: masked language modelling and next sentence prediction (chapter 07).

BERT (Devlin et al., 2019) learns from unlabelled text with two tasks at once:

- masked language modelling (MLM): 15% of the tokens are chosen, hidden, and predicted back from
  both sides of their context; ``mask_tokens`` implements the recipe;
- next sentence prediction (NSP): given two segments A and B, predict whether B followed A in the
  text (IsNext, label 0) or was drawn from another document (NotNext, label 1);
  ``make_nsp_examples`` builds the pairs.

RoBERTa (Liu et al., 2019) kept MLM, dropped NSP for segments of contiguous full sentences, and drew
new masks every time a sequence is fed to the model ("dynamic masking") where BERT masked its data
once, offline ("static masking"). ``PretrainingDataset`` offers both choices, and ``pretrain`` runs
the training loop (AdamW, linear warm-up and decay, gradient clipping and accumulation, mixed
precision on CUDA, checkpoints that resume exactly, a metrics log and a loss curve), on one device or
on several with ``torchrun`` (DistributedDataParallel).

Scale: BERT trained 1M steps at batch 256 (sequences of up to 512 tokens); RoBERTa trained 500K steps
at batch 8K. The course's BERT (``course_bert``), which the later chapters fine-tune and distil, was
pretrained once with this code on a GPU (``tools/course_bert.py``) and ships with the package;
``evaluate_masked_lm`` and ``unigram_masked_lm`` score it on held-out text.

This module gathers the chapter's names in one place; the code lives in one module per job:

- ``bertlab.pretraining_data``        masking, NSP pairs, full-sentence segments, ``PretrainingDataset``
- ``bertlab.optimization``            AdamW's parameter groups, the linear warm-up and decay
- ``bertlab.pretraining_loop``        ``pretrain``: the training loop, its checkpoints and metrics log
- ``bertlab.pretraining_evaluation``  masked-token prediction on held-out text, the unigram baseline; a
                                      GPT's next-token prediction and its count-based baselines
- ``bertlab.course_model``            the course's BERT, shipped with the package
"""

from bertlab.course_model import (
    COURSE_BERT_FOLDER,
    TOKEN_COUNTS_FILE,
    course_bert,
    course_bert_folder,
    course_bert_sha256,
    course_bert_token_counts,
    read_course_bert_results,
)
from bertlab.optimization import get_linear_schedule, weight_decay_groups
from bertlab.pretraining_data import (
    IGNORE_INDEX,
    IS_NEXT,
    MASKING_KINDS,
    NOT_NEXT,
    PackedSegments,
    PretrainingDataset,
    make_nsp_examples,
    mask_tokens,
    pack_full_sentences,
)
from bertlab.pretraining_evaluation import (
    CausalLMScores,
    MaskedLMScores,
    causal_masked_lm,
    evaluate_causal_lm,
    evaluate_masked_lm,
    token_frequencies,
    unigram_masked_lm,
)
from bertlab.pretraining_loop import (
    CHECKPOINT_FILE,
    METRICS_FILE,
    PLOT_FILE,
    SETTINGS_FILE,
    PretrainingRecipe,
    load_metrics,
    plot_metrics,
    pretrain,
)

__all__ = [
    # data: bertlab.pretraining_data
    "IGNORE_INDEX", "IS_NEXT", "NOT_NEXT", "MASKING_KINDS",
    "mask_tokens", "make_nsp_examples", "pack_full_sentences", "PackedSegments",
    "PretrainingDataset",
    # optimisation: bertlab.optimization
    "weight_decay_groups", "get_linear_schedule",
    # the training loop: bertlab.pretraining_loop
    "CHECKPOINT_FILE", "METRICS_FILE", "PLOT_FILE", "SETTINGS_FILE", "PretrainingRecipe", "pretrain",
    "load_metrics", "plot_metrics",
    # evaluation: bertlab.pretraining_evaluation
    "MaskedLMScores", "evaluate_masked_lm", "token_frequencies", "unigram_masked_lm",
    "CausalLMScores", "evaluate_causal_lm", "causal_masked_lm",
    # the course's BERT: bertlab.course_model
    "COURSE_BERT_FOLDER", "TOKEN_COUNTS_FILE", "course_bert_folder", "course_bert", "course_bert_token_counts",
    "course_bert_sha256", "read_course_bert_results",
]
