"""BERT's four task types as records: single sentences, sentence pairs, tagging and spans.

Devlin et al. (2019, section 4 and figure 4) fine-tune one pretrained BERT four ways. Each way is a
:class:`~bertlab.finetuning.TaskType` record, and one path reads them all:
:func:`~bertlab.finetuning.finetune_task` (BERT's recipe, :func:`~bertlab.finetuning.finetune_batches`:
AdamW, warm-up and linear decay, clipping), :func:`~bertlab.finetuning.task_evaluation` (and its views
:func:`~bertlab.finetuning.evaluate_task` and :func:`~bertlab.finetuning.task_example_scores`) and
:func:`~bertlab.finetuning.choose_learning_rate`, all in :mod:`bertlab.finetuning` beside the sentence
task (chapter 08), and re-exported here. This module declares the three others and :data:`TASKS`, the
four by name. What differs from one task type to another is data, one record each:

=========  =======================  ==========================================  =============================
task type  examples                 input -> output                             loss; metric
=========  =======================  ==========================================  =============================
sentence   (text, label) (MR)       [CLS] sentence [SEP] -> one of 2 labels     cross-entropy of the label;
                                                                                accuracy, macro-F1
pairs      ``SentencePair`` (SNLI)  [CLS] premise [SEP] hypothesis [SEP]        cross-entropy of the label;
                                    -> one of 3 labels                          accuracy, macro-F1
tagging    ``TaggedSentence``       [CLS] word pieces [SEP] -> a tag on the     cross-entropy on first pieces;
           (UD EWT, UPOS)           first piece of each word                    word accuracy
spans      ``SquadQuestion``        [CLS] question [SEP] context window [SEP]   (CE(start) + CE(end)) / 2;
           (SQuAD v1.1)             -> the answer's first and last tokens       exact match, F1
=========  =======================  ==========================================  =============================

Each record also names its dataset, reads its splits (``load_splits``) and trains and scores its
simple baselines (``baselines``, :mod:`bertlab.task_baselines`).

Use::

    task = TASKS["tagging"]                        # SENTENCES, PAIRS, TAGGING, SPANS; span_task(stride=...)
    splits = task.load_splits(data_folder, seed=0)
    labels = task.labels(splits.train) if task.labels else None   # the tag names, from the training split
    model = task_model(task, "path/to/pretrained", labels)
    history = finetune_task(task, model, tokenizer, splits.train, splits.dev, labels=labels)
    test_scores = evaluate_task(task, model, tokenizer, splits.test, labels=labels)
"""

import dataclasses
import functools
import warnings
from collections.abc import Sequence

import torch
from torch import nn

from bertlab.bert import (
    IGNORE_INDEX,
    BertForQuestionAnswering,
    BertForSequenceClassification,
    BertForTokenClassification,
)
from bertlab.finetuning import (  # the task type's record and the path that reads it (re-exported here)
    SENTENCES,
    Batch,
    ExampleScores,
    LabelVocabulary,
    PaddedBatches,
    SentimentBatches,
    TaskEvaluation,
    TaskType,
    TunedRun,
    check_label_ids,
    choose_learning_rate,
    classification_loss,
    evaluate_task,
    evaluation_mode,
    finetune_task,
    label_evaluation,
    model_device,
    model_inputs,
    task_evaluation,
    task_example_scores,
    task_model,
)
from bertlab.task_baselines import pair_baselines, span_baselines, tagging_baselines
from bertlab.task_data import (
    SNLI_LABELS,
    SentencePair,
    SquadQuestion,
    TaggedSentence,
    load_ewt_splits,
    load_snli_splits,
    load_squad_splits,
    squad_references,
)
from bertlab.tasks import (
    align_labels_to_word_pieces,
    best_span,
    squad_f1,
    squad_scores,
    squad_windows,
    word_accuracy,
    words_tagged_right,
)
from bertlab.tokenization import BertTokenizer
from bertlab.utils import autocast



# --------------------------------------------------------------------------------------------------
# Label names
# --------------------------------------------------------------------------------------------------


def snli_labels(pairs: Sequence[SentencePair]) -> LabelVocabulary:
    """The three SNLI labels, ``SNLI_LABELS``, whatever the pairs: a ``SentencePair``'s label indexes them."""
    return LabelVocabulary(SNLI_LABELS)


def tag_vocabulary(sentences: Sequence[TaggedSentence]) -> LabelVocabulary:
    """The distinct tags of ``sentences`` (the training split), sorted: tag id i is the i-th name."""
    return LabelVocabulary(tuple(sorted({tag for sentence in sentences for tag in sentence.tags})))


def padded(sequences: Sequence[Sequence], value, dtype: torch.dtype = torch.long) -> torch.Tensor:
    """The sequences as rows of a (num_sequences, N) tensor, N the longest, shorter rows filled with ``value``."""
    rows = torch.full((len(sequences), max(map(len, sequences))), value, dtype=dtype)
    for row, sequence in zip(rows, sequences):
        row[: len(sequence)] = torch.tensor(sequence, dtype=dtype)
    return rows


def _check_not_empty(examples: Sequence, what: str) -> None:
    if len(examples) == 0:
        raise ValueError(f"{what} is empty")


# --------------------------------------------------------------------------------------------------
# Sentence pairs
# --------------------------------------------------------------------------------------------------


def pair_batches(
    pairs: Sequence[SentencePair],
    tokenizer: BertTokenizer,
    labels: LabelVocabulary,
    *,
    max_length: int = 128,
    batch_size: int = 32,
    shuffle: bool = False,
    seed: int = 0,
    what: str = "pairs",
) -> SentimentBatches:
    """Batches of [CLS] premise [SEP] hypothesis [SEP] (token types 0 then 1, the longer sentence
    trimmed first to fit ``max_length``) with the pair's label: :class:`SentimentBatches` of pairs.

    Raises:
        ValueError: when ``pairs`` is empty or a label is not an id of ``labels``.
    """
    _check_not_empty(pairs, what)
    check_label_ids([pair.label for pair in pairs], labels, what)
    return SentimentBatches(
        [pair.premise for pair in pairs], tokenizer, [pair.label for pair in pairs],
        text_pairs=[pair.hypothesis for pair in pairs],
        batch_size=batch_size, max_length=max_length, shuffle=shuffle, seed=seed,
    )


def pair_texts(pairs: Sequence[SentencePair]) -> list[str]:
    """The premises and the hypotheses (to learn a vocabulary from)."""
    return [sentence for pair in pairs for sentence in (pair.premise, pair.hypothesis)]


# --------------------------------------------------------------------------------------------------
# Token tagging
# --------------------------------------------------------------------------------------------------


class TaggingBatches(PaddedBatches):
    """Sentences of tagged words, encoded for a token classifier and served in batches.

    Each sentence becomes [CLS] word pieces [SEP], at most ``max_length`` tokens
    (:func:`~bertlab.tasks.align_labels_to_word_pieces`). The tensors, (num_sentences, N), are
    ``input_ids``, ``token_type_ids`` (0), ``attention_mask``,

        labels[i, t]     = id of the tag of word w  if token t is the first piece of word w of sentence i
                           -100                      elsewhere (later pieces, [CLS], [SEP], padding)
        word_index[i, t] = w                         on that first piece, -1 elsewhere

    so that the loss skips the -100 positions (as Devlin et al., 2019, section 5.3, and Hugging Face
    do) and a prediction goes back to its word. A word with no piece within ``max_length`` (cut off
    at the end of a long sentence, or made only of characters BERT drops) is neither trained on nor
    predicted: :func:`word_accuracy` counts it as an error, ``num_words_without_piece`` counts them,
    and a warning says how many there are.

    Raises:
        ValueError: when ``sentences`` is empty, or a tag is not one of ``labels`` (naming the sentence).
    """

    def __init__(
        self,
        sentences: Sequence[TaggedSentence],
        tokenizer: BertTokenizer,
        labels: LabelVocabulary,
        *,
        max_length: int = 128,
        batch_size: int = 32,
        shuffle: bool = False,
        seed: int = 0,
        what: str = "sentences",
    ):
        _check_not_empty(sentences, what)
        encodings = [
            align_labels_to_word_pieces(sentence.words, labels.ids(sentence.tags, f"{what}[{index}]"), tokenizer,
                                        max_length)
            for index, sentence in enumerate(sentences)
        ]
        word_index = [[-1 if label == IGNORE_INDEX else word for word, label in zip(e.word_ids, e.labels)]
                      for e in encodings]
        super().__init__({
            "input_ids": padded([e.input_ids for e in encodings], tokenizer.pad_token_id),
            "token_type_ids": padded([e.token_type_ids for e in encodings], 0),
            "attention_mask": padded([e.attention_mask for e in encodings], 0),
            "labels": padded([e.labels for e in encodings], IGNORE_INDEX),
            "word_index": padded(word_index, -1),
        }, batch_size=batch_size, shuffle=shuffle, seed=seed)
        self.sentences = list(sentences)
        self.tag_names = labels.names
        num_words = sum(len(sentence.words) for sentence in sentences)
        self.num_words_without_piece = num_words - int((self.tensors["word_index"] >= 0).sum())
        if self.num_words_without_piece:
            warnings.warn(f"{self.num_words_without_piece} of the {num_words} words of {what} have no word piece "
                          f"within max_length={max_length} (cut off, or made of characters BERT drops): they are "
                          "not trained on, and the evaluation counts them as errors")


@torch.inference_mode()
def predict_tags(model: nn.Module, batches: TaggingBatches, device: torch.device | None = None,
                 precision: str = "auto") -> list[list[str | None]]:
    """The predicted tag of every word of ``batches.sentences``, None for a word without a piece.

    The tag of word w is argmax_c logits[first piece of w, c] (in eval mode, the forward pass in
    ``autocast(device, precision=precision)``); the model's training mode is restored afterwards.
    """
    device = model_device(model) if device is None else device
    predictions = [[None] * len(sentence.words) for sentence in batches.sentences]
    with evaluation_mode(model):
        for batch in batches:
            with autocast(device, precision=precision):
                logits = model(**model_inputs(batch, device)).logits  # (B, N, C)
            tag_ids, word_index = logits.argmax(dim=-1).cpu(), batch["word_index"]  # (B, N) each
            for sentence, tags, words in zip(batch["index"].tolist(), tag_ids, word_index):
                first_pieces = words >= 0
                for word, tag_id in zip(words[first_pieces].tolist(), tags[first_pieces].tolist()):
                    predictions[sentence][word] = batches.tag_names[tag_id]
    return predictions


def tagging_evaluation(model: nn.Module, batches: TaggingBatches, device: torch.device,
                       precision: str = "auto") -> TaskEvaluation:
    """The tags of :func:`predict_tags` on ``batches``, their ``accuracy`` (:func:`word_accuracy`: the words
    tagged right, out of all the words) and each sentence's words tagged right, out of its words."""
    predictions = predict_tags(model, batches, device, precision)
    sentences = batches.sentences
    return TaskEvaluation({"accuracy": word_accuracy(predictions, sentences)},
                          ExampleScores(words_tagged_right(predictions, sentences),
                                        [len(sentence.tags) for sentence in sentences]),
                          predictions)


def sentence_texts(sentences: Sequence[TaggedSentence]) -> list[str]:
    """Each sentence's words joined by spaces (to learn a vocabulary from)."""
    return [" ".join(sentence.words) for sentence in sentences]


# --------------------------------------------------------------------------------------------------
# Span extraction
# --------------------------------------------------------------------------------------------------


def default_stride(max_length: int, question_pieces: int) -> int:
    """The context pieces two windows of a question share when no stride is given: a quarter of the window
    (32 of 128 tokens, the course's setting in ``benchmarks/task_results.py``), and at most half of what a
    question of ``question_pieces`` word pieces leaves for the context, so that the windows always advance."""
    return max(0, min(max_length // 4, (max_length - question_pieces - 3) // 2))


class SpanBatches(PaddedBatches):
    """SQuAD questions encoded as windows [CLS] question [SEP] part of the context [SEP], in batches.

    :func:`~bertlab.tasks.squad_windows` cuts each context into windows of at most ``max_length``
    tokens, consecutive ones sharing ``stride`` context pieces (None: :func:`default_stride` of each
    question, which fits any question that leaves room for its context). The tensors are, (num_windows, N),
    ``input_ids``, ``token_type_ids``, ``attention_mask`` and ``context_mask`` (True on the context's
    tokens, where an answer may start and end), and, (num_windows,), ``start_positions`` and
    ``end_positions``: the first answer's first and last tokens in the window, or (0, 0), the [CLS]
    position, when it is not wholly inside it (Hugging Face's labels). ``questions``,
    ``question_of_window`` and ``offsets`` (the characters of the context each token comes from) lead
    from a window back to its question and its text.

    Raises:
        ValueError: when ``questions`` is empty, or a question leaves no more than ``stride`` pieces
            of context in ``max_length``.
    """

    def __init__(
        self,
        questions: Sequence[SquadQuestion],
        tokenizer: BertTokenizer,
        labels: None = None,
        *,
        max_length: int = 384,
        stride: int | None = 128,
        batch_size: int = 32,
        shuffle: bool = False,
        seed: int = 0,
        what: str = "questions",
    ):
        if labels is not None:
            raise ValueError("a span has no label names: labels must be None")
        _check_not_empty(questions, what)
        windows, self.question_of_window = [], []
        for index, question in enumerate(questions):
            answer = question.answers[0]  # for training; every answer counts in the evaluation
            shared = (default_stride(max_length, len(tokenizer.tokenize(question.question)))
                      if stride is None else stride)
            for window in squad_windows(question.question, question.context, answer.answer_start, answer.text,
                                        tokenizer, max_length, shared):
                windows.append(window)
                self.question_of_window.append(index)
        super().__init__({
            "input_ids": padded([w.input_ids for w in windows], tokenizer.pad_token_id),
            "token_type_ids": padded([w.token_type_ids for w in windows], 0),
            "attention_mask": padded([w.attention_mask for w in windows], 0),
            "context_mask": padded([w.context_mask for w in windows], False, dtype=torch.bool),
            "start_positions": torch.tensor([w.start_position for w in windows]),
            "end_positions": torch.tensor([w.end_position for w in windows]),
        }, batch_size=batch_size, shuffle=shuffle, seed=seed)
        self.questions = list(questions)
        self.offsets = [w.offsets for w in windows]


def span_loss(model: nn.Module, batch: Batch) -> torch.Tensor:
    """(CE(start_logits, s) + CE(end_logits, e)) / 2 of a :class:`~bertlab.bert.BertForQuestionAnswering`
    over ``batch`` (a dict from :class:`SpanBatches`), the answer's tokens s and e, (0, 0) for a window
    without it: the loss of Devlin et al. (2019, section 4.2), averaged over the windows."""
    device = model_device(model)
    return model(**model_inputs(batch, device), start_positions=batch["start_positions"].to(device),
                 end_positions=batch["end_positions"].to(device)).loss


@torch.inference_mode()
def predict_answers(model: nn.Module, batches: SpanBatches, device: torch.device | None = None,
                    precision: str = "auto", max_answer_length: int = 30) -> dict[str, str]:
    """The answer to each question of ``batches``: question id -> a span of characters of its context.

    In each window w, :func:`~bertlab.tasks.best_span` picks the valid span (s_w, e_w) (context
    tokens, s <= e, at most ``max_answer_length`` tokens) with the highest score

        score_w = start_logits[s_w] + end_logits[e_w],

    the question takes the span of its best-scoring window (ties: the earlier window), and the
    answer is the context's characters from the start of token s to the end of token e,
    ``context[offsets[s][0]:offsets[e][1]]``: the original text, with its case, accents and spaces.
    This is Hugging Face's post-processing of SQuAD v1.1 with one span per window.
    """
    device = model_device(model) if device is None else device
    best: dict[int, tuple[float, int, int, int]] = {}  # question -> (score, window, start, end)
    with evaluation_mode(model):
        for batch in batches:
            with autocast(device, precision=precision):
                output = model(**model_inputs(batch, device))
            start_logits, end_logits = output.start_logits.float(), output.end_logits.float()  # (B, N) each
            starts, ends = best_span(start_logits, end_logits, batch["context_mask"].to(device),
                                     max_answer_length)  # (B,) each
            scores = (start_logits.gather(1, starts.unsqueeze(1)) + end_logits.gather(1, ends.unsqueeze(1))).squeeze(1)
            for window, score, start, end in zip(batch["index"].tolist(), scores.tolist(), starts.tolist(),
                                                 ends.tolist()):
                question = batches.question_of_window[window]
                # the higher score wins, and on a tie the earlier window, in whatever order the batches come
                if question not in best or (score, -window) > (best[question][0], -best[question][1]):
                    best[question] = (score, window, start, end)
    answers = {}
    for question, (_, window, start, end) in sorted(best.items()):
        record, offsets = batches.questions[question], batches.offsets[window]
        answers[record.id] = record.context[offsets[start][0] : offsets[end][1]]
    return answers


def span_evaluation(model: nn.Module, batches: SpanBatches, device: torch.device, precision: str = "auto",
                    max_answer_length: int = 30) -> TaskEvaluation:
    """The answers of :func:`predict_answers` on ``batches``, their ``exact_match`` and ``f1`` (in percent,
    the official SQuAD v1.1 scores, against every answer of each question) and each question's F1 in [0, 1]
    (SQuAD's, the max over its answers; 0 without a prediction)."""
    answers = predict_answers(model, batches, device, precision, max_answer_length)
    questions = batches.questions
    return TaskEvaluation(dataclasses.asdict(squad_scores(answers, squad_references(questions))),
                          ExampleScores([squad_f1(answers[question.id], [answer.text for answer in question.answers])
                                         if question.id in answers else 0.0 for question in questions]),
                          answers)


def question_texts(questions: Sequence[SquadQuestion]) -> list[str]:
    """Each distinct context once, and every question (to learn a vocabulary from)."""
    return list(dict.fromkeys(question.context for question in questions)) + [q.question for q in questions]


# --------------------------------------------------------------------------------------------------
# A task type, as data
# --------------------------------------------------------------------------------------------------


PAIRS = TaskType(
    name="pairs", model_class=BertForSequenceClassification, labels=snli_labels, batches=pair_batches,
    loss=classification_loss, evaluate=label_evaluation, metric="accuracy", texts=pair_texts, max_length=128,
    dataset="SNLI 1.0", load_splits=load_snli_splits, baselines=pair_baselines,
)
TAGGING = TaskType(
    name="tagging", model_class=BertForTokenClassification, labels=tag_vocabulary, batches=TaggingBatches,
    loss=classification_loss, evaluate=tagging_evaluation, metric="accuracy", texts=sentence_texts,
    max_length=128, dataset="UD English EWT (UPOS)", load_splits=load_ewt_splits, baselines=tagging_baselines,
)


def span_task(stride: int | None = 128, max_answer_length: int = 30) -> TaskType:
    """The span-extraction task type with windows sharing ``stride`` context pieces (None: each question's
    :func:`default_stride`) and answers of at most ``max_answer_length`` tokens (Hugging Face's defaults,
    with 384 tokens a window, BERT's)."""
    return TaskType(
        name="spans", model_class=BertForQuestionAnswering, labels=None,
        batches=functools.partial(SpanBatches, stride=stride), loss=span_loss,
        evaluate=functools.partial(span_evaluation, max_answer_length=max_answer_length), metric="f1",
        texts=question_texts, max_length=384, dataset="SQuAD 1.1", load_splits=load_squad_splits,
        baselines=span_baselines,
    )


SPANS = span_task()
#: BERT's four task types by name (Devlin et al., 2019, figure 4), what ``bertlab finetune --task`` and the
#: benchmarks choose from.
TASKS = {task.name: task for task in (SENTENCES, PAIRS, TAGGING, SPANS)}


def choose_task_learning_rate(task: TaskType, train_with, learning_rates, tokenizer: BertTokenizer, dev: Sequence,
                              **options) -> TunedRun:
    """Deprecated: :func:`bertlab.finetuning.choose_learning_rate` takes the task (``task=task``)."""
    warnings.warn("choose_task_learning_rate(task, ...) is deprecated and will be removed in the next release: call "
                  "bertlab.finetuning.choose_learning_rate(..., task=task)", DeprecationWarning, stacklevel=2)
    return choose_learning_rate(train_with, learning_rates, tokenizer, dev, task=task, **options)
