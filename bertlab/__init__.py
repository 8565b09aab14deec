"""bertlab: the reference implementation of *Transformers, from attention to BERT*.

One module per topic of the course, in the order of the book:

- ``bertlab.attention``      scaled dot-product and multi-head attention (chapter 01, 02)
- ``bertlab.transformer``    feed-forward network, encoder and decoder layers (chapter 02)
- ``bertlab.positional``     sinusoidal, learned, T5, ALiBi and rotary positions (chapter 03)
- ``bertlab.norm``           LayerNorm, RMSNorm, pre- and post-norm residuals (chapter 04)
- ``bertlab.efficient``      sliding-window, grouped-query, flash and linear attention (chapter 05)
- ``bertlab.tokenization``   BERT's WordPiece tokenizer (chapter 06)
- ``bertlab.bert``           the BERT model and its heads (chapter 06)
- ``bertlab.pretraining``    masked language modelling and next sentence prediction (chapter 07), gathered
                             from ``pretraining_data`` (masking, NSP pairs), ``pretraining_loop``
                             (``pretrain``), ``pretraining_evaluation`` (held-out scores) and
                             ``course_model`` (the course's BERT, shipped with the package)
- ``bertlab.optimization``   AdamW's parameter groups and the linear learning-rate schedule
- ``bertlab.finetuning``     sequence classification (chapter 08)
- ``bertlab.distillation``   knowledge distillation into a smaller student (chapter 09)
- ``bertlab.gpt``            a GPT-2-style decoder, its KV cache and its samplers (chapter 11); ``pretrain``
                             trains it with ``objective="causal"``
- ``bertlab.ngram``          count-based language models (add-k unigram and bigram, Kneser-Ney bigram), the
                             baselines of a GPT's perplexity, and distinct-n (chapter 11)
- ``bertlab.data``           offline corpora and sentiment datasets
"""

__version__ = "0.1.0"
