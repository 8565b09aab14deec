"""Fine-tuning and evaluating BERT on its other task types: sentence pairs, tagging and spans.

Devlin et al. (2019, section 4 and figure 4) fine-tune one pretrained BERT four ways. Chapter 08
does single sentences (:mod:`bertlab.finetuning`); this module does the three others with the same
recipe (:func:`~bertlab.finetuning.finetune_batches`: AdamW, warm-up and linear decay, clipping)
and the same loop (:func:`~bertlab.finetuning.fit`). What differs from one task type to another is
data, one :class:`TaskType` record each:

=========  =======================  ==========================================  =============================
task type  examples                 input -> output                             loss; metric
=========  =======================  ==========================================  =============================
pairs      ``SentencePair`` (SNLI)  [CLS] premise [SEP] hypothesis [SEP]        cross-entropy of the label;
                                    -> one of 3 labels                          accuracy, macro-F1
tagging    ``TaggedSentence``       [CLS] word pieces [SEP] -> a tag on the     cross-entropy on first pieces;
           (UD EWT, UPOS)           first piece of each word                    word accuracy
spans      ``SquadQuestion``        [CLS] question [SEP] context window [SEP]   (CE(start) + CE(end)) / 2;
           (SQuAD v1.1)             -> the answer's first and last tokens       exact match, F1
=========  =======================  ==========================================  =============================

Use::

    task = TASKS["tagging"]                        # PAIRS, TAGGING, SPANS; span_task(stride=...) for others
    labels = task.labels(train) if task.labels else None   # the tag names, from the training split
    model = task_model(task, "path/to/pretrained", labels)
    history = finetune_task(task, model, tokenizer, train, dev, labels=labels)
    test_scores = evaluate_task(task, model, tokenizer, test, labels=labels)
"""

import dataclasses
import functools
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
from torch import nn

from bertlab.bert import (
    IGNORE_INDEX,
    BertConfig,
    BertForQuestionAnswering,
    BertForSequenceClassification,
    BertForTokenClassification,
    BertPreTrainedModel,
)
from bertlab.finetuning import (
    DEFAULT_RECIPE,
    Batch,
    FineTuningRecipe,
    PaddedBatches,
    Progress,
    SentimentBatches,
    TunedRun,
    choose_learning_rate,
    classification_loss,
    classifier_metrics,
    compute_logits,
    evaluation_device,
    evaluation_mode,
    finetune_batches,
    model_device,
    model_inputs,
)
from bertlab.task_data import SNLI_LABELS, SentencePair, SquadQuestion, TaggedSentence
from bertlab.tasks import align_labels_to_word_pieces, best_span, squad_f1, squad_scores, squad_windows
from bertlab.tokenization import BertTokenizer
from bertlab.utils import autocast, recipe_from_keywords

EVALUATION_BATCH_SIZE = 64


# --------------------------------------------------------------------------------------------------
# Label names
# --------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class LabelVocabulary:
    """The names of a task's labels: label id i is ``names[i]``."""

    names: tuple[str, ...]
    id_of: dict[str, int] = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self):
        names = tuple(self.names)
        if len(set(names)) != len(names):
            raise ValueError(f"the label names must be distinct, got {list(names)}")
        if len(names) < 2:
            raise ValueError(f"a classifier needs at least 2 labels, got {list(names)}")
        object.__setattr__(self, "names", names)
        object.__setattr__(self, "id_of", {name: index for index, name in enumerate(names)})

    def __len__(self) -> int:
        return len(self.names)

    def ids(self, names: Sequence[str], where: str) -> list[int]:
        """The ids of ``names``; a name outside the vocabulary is a ``ValueError`` that names ``where``
        it was found (a tag of a dev sentence never seen in training)."""
        try:
            return [self.id_of[name] for name in names]
        except KeyError as error:
            raise ValueError(f"{where}: the label {error.args[0]!r} is not one of the {len(self)} labels of the "
                             f"training split ({', '.join(self.names)})") from None


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
    for index, pair in enumerate(pairs):
        if not 0 <= pair.label < len(labels):
            raise ValueError(f"{what}[{index}] has the label {pair.label}, not one of the ids 0 .. {len(labels) - 1} "
                             f"of {', '.join(labels.names)}")
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


def word_accuracy(predictions: Sequence[Sequence[str | None]], sentences: Sequence[TaggedSentence]) -> float:
    """The share of words whose predicted tag is the gold one: (1/W) sum_w [predicted_w = gold_w] over
    the W words of all sentences; a word predicted None (no piece within max_length) counts as wrong.

    Raises:
        ValueError: when a sentence has not one prediction per word.
    """
    if len(predictions) != len(sentences):
        raise ValueError(f"got predictions for {len(predictions)} sentences but {len(sentences)} sentences")
    correct = total = 0
    for index, (predicted, sentence) in enumerate(zip(predictions, sentences)):
        if len(predicted) != len(sentence.tags):
            raise ValueError(f"sentence {index} has {len(sentence.tags)} words but {len(predicted)} predicted tags")
        correct += sum(guess == tag for guess, tag in zip(predicted, sentence.tags))
        total += len(sentence.tags)
    if total == 0:
        raise ValueError("the sentences have no word to score")
    return correct / total


def tagging_metrics(model: nn.Module, batches: TaggingBatches, device: torch.device,
                    precision: str = "auto") -> dict[str, float]:
    """``accuracy``: the :func:`word_accuracy` of :func:`predict_tags` on ``batches``."""
    return {"accuracy": word_accuracy(predict_tags(model, batches, device, precision), batches.sentences)}


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


def squad_references(questions: Sequence[SquadQuestion]) -> dict[str, list[str]]:
    """Question id -> the texts of its answers, what :func:`~bertlab.tasks.squad_scores` grades against."""
    return {question.id: [answer.text for answer in question.answers] for question in questions}


def span_metrics(model: nn.Module, batches: SpanBatches, device: torch.device, precision: str = "auto",
                 max_answer_length: int = 30) -> dict[str, float]:
    """``exact_match`` and ``f1`` (in percent, the official SQuAD v1.1 scores) of
    :func:`predict_answers` on ``batches`` against every answer of each question."""
    answers = predict_answers(model, batches, device, precision, max_answer_length)
    return dataclasses.asdict(squad_scores(answers, squad_references(batches.questions)))


def question_texts(questions: Sequence[SquadQuestion]) -> list[str]:
    """Each distinct context once, and every question (to learn a vocabulary from)."""
    return list(dict.fromkeys(question.context for question in questions)) + [q.question for q in questions]


# --------------------------------------------------------------------------------------------------
# The score of each example, for paired tests of two models on the same examples
# --------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ExampleScores:
    """A model's result on each evaluated example, in the examples' order: ``scores[i]`` out of
    ``weights[i]``, so that its score on the examples is sum_i scores_i / sum_i weights_i (1 per example
    when ``weights`` is None). Pairs: 1 or 0, the label right or wrong; tagging: the words of sentence i
    tagged right, out of its words; spans: question i's F1 in [0, 1]."""

    scores: list[float]
    weights: list[float] | None = None


def pair_example_scores(model: nn.Module, batches: SentimentBatches, device: torch.device,
                        precision: str = "auto") -> ExampleScores:
    """1 for each pair whose label argmax_c p(c | pair) is right, else 0."""
    predictions = compute_logits(model, batches, device, precision).argmax(dim=-1).cpu()  # (B,)
    return ExampleScores((predictions == batches.labels.cpu()).int().tolist())


def tagging_example_scores(model: nn.Module, batches: TaggingBatches, device: torch.device,
                           precision: str = "auto") -> ExampleScores:
    """Each sentence's words tagged right (:func:`predict_tags`), out of its words."""
    predictions = predict_tags(model, batches, device, precision)
    return ExampleScores([sum(guess == tag for guess, tag in zip(predicted, sentence.tags))
                          for predicted, sentence in zip(predictions, batches.sentences)],
                         [len(sentence.tags) for sentence in batches.sentences])


def span_example_scores(model: nn.Module, batches: SpanBatches, device: torch.device, precision: str = "auto",
                        max_answer_length: int = 30) -> ExampleScores:
    """Each question's F1 (SQuAD's, max over its answers; 0 without a prediction), in [0, 1]."""
    answers = predict_answers(model, batches, device, precision, max_answer_length)
    return ExampleScores([squad_f1(answers[question.id], [answer.text for answer in question.answers])
                          if question.id in answers else 0.0 for question in batches.questions])


# --------------------------------------------------------------------------------------------------
# A task type, as data
# --------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class TaskType:
    """What fine-tuning and evaluating a task type needs: a record, read by :func:`finetune_task`.

    - ``model_class``: the BERT with the task's head.
    - ``labels``: the label names from the training examples (None: the task has none, spans).
    - ``batches(examples, tokenizer, labels, *, max_length, batch_size, shuffle, seed, what)``: the
      examples encoded, a :class:`~bertlab.finetuning.PaddedBatches`.
    - ``loss(model, batch)``: what training minimises.
    - ``metrics(model, batches, device, precision)``: the evaluation, a dict of scores.
    - ``metric``: the score (a key of ``metrics``, higher is better) that chooses a learning rate.
    - ``example_scores(model, batches, device, precision)``: ``metric`` on each example, an
      :class:`ExampleScores`.
    - ``texts(examples)``: their text, to learn a vocabulary from.
    - ``max_length``: the default number of tokens of an encoded example.
    """

    name: str
    model_class: type[BertPreTrainedModel]
    labels: Callable[[Sequence], LabelVocabulary] | None
    batches: Callable[..., PaddedBatches]
    loss: Callable[[nn.Module, Batch], torch.Tensor]
    metrics: Callable[[nn.Module, PaddedBatches, torch.device, str], dict[str, float]]
    metric: str
    example_scores: Callable[[nn.Module, PaddedBatches, torch.device, str], ExampleScores]
    texts: Callable[[Sequence], list[str]]
    max_length: int


PAIRS = TaskType(
    name="pairs", model_class=BertForSequenceClassification, labels=snli_labels, batches=pair_batches,
    loss=classification_loss, metrics=classifier_metrics, metric="accuracy", example_scores=pair_example_scores,
    texts=pair_texts, max_length=128,
)
TAGGING = TaskType(
    name="tagging", model_class=BertForTokenClassification, labels=tag_vocabulary, batches=TaggingBatches,
    loss=classification_loss, metrics=tagging_metrics, metric="accuracy", example_scores=tagging_example_scores,
    texts=sentence_texts, max_length=128,
)


def span_task(stride: int | None = 128, max_answer_length: int = 30) -> TaskType:
    """The span-extraction task type with windows sharing ``stride`` context pieces (None: each question's
    :func:`default_stride`) and answers of at most ``max_answer_length`` tokens (Hugging Face's defaults,
    with 384 tokens a window, BERT's)."""
    return TaskType(
        name="spans", model_class=BertForQuestionAnswering, labels=None,
        batches=functools.partial(SpanBatches, stride=stride), loss=span_loss,
        metrics=functools.partial(span_metrics, max_answer_length=max_answer_length), metric="f1",
        example_scores=functools.partial(span_example_scores, max_answer_length=max_answer_length),
        texts=question_texts, max_length=384,
    )


SPANS = span_task()
TASKS = {task.name: task for task in (PAIRS, TAGGING, SPANS)}


def task_model(task: TaskType, source: BertConfig | str | Path, labels: LabelVocabulary | None) -> BertPreTrainedModel:
    """The task's model: randomly initialised from a config, or with the weights of a checkpoint folder
    (``from_pretrained``: the head a pretrained BERT lacks is initialised, with a warning), scoring
    ``len(labels)`` labels when the task has labels."""
    options = {} if labels is None else {"num_labels": len(labels)}
    if isinstance(source, BertConfig):
        return task.model_class(source, **options)
    return task.model_class.from_pretrained(source, **options)


def check_labels(task: TaskType, model: nn.Module, labels: LabelVocabulary | None) -> None:
    """``labels`` must be given exactly when the task has labels, and be as many as the model scores."""
    if task.labels is None:
        if labels is not None:
            raise ValueError(f"the {task.name} task has no label names: labels must be None")
        return
    if labels is None:
        raise ValueError(f"the {task.name} task needs labels=task.labels(train), the label names of the training "
                         "split")
    if getattr(model, "num_labels", None) != len(labels):
        raise ValueError(f"the model scores {getattr(model, 'num_labels', None)} labels but there are {len(labels)} "
                         f"({', '.join(labels.names)}): build it with task_model(task, ..., labels)")


# --------------------------------------------------------------------------------------------------
# Fine-tuning, evaluation, choice of the learning rate
# --------------------------------------------------------------------------------------------------


def finetune_task(
    task: TaskType,
    model: nn.Module,
    tokenizer: BertTokenizer,
    train: Sequence,
    dev: Sequence | None = None,
    recipe: FineTuningRecipe | None = None,
    *,
    labels: LabelVocabulary | None = None,
    device: str | torch.device | None = None,
    progress: bool | Progress = True,
    output_dir: str | Path | None = None,
    precision: str = "auto",
    **recipe_keywords,
) -> list[dict[str, float]]:
    """Fine-tune ``model`` on the ``train`` examples of ``task`` as BERT does; return the history.

    Minimises ``task.loss`` over ``task.batches(train, ...)`` (shuffled with the recipe's seed) with the
    ``recipe`` of :func:`bertlab.finetuning.finetune` (:class:`~bertlab.finetuning.FineTuningRecipe`;
    None: BERT's defaults): AdamW with ``encoder_lr`` for the encoder and ``head_lr`` (default
    ``encoder_lr``) for the head, optional layer-wise decay, a linear warm-up over ``warmup_ratio`` of
    the steps then linear decay, gradient clipping, in ``precision`` on ``device`` (None: CUDA when
    available). The recipe's ``max_length`` None takes the task's (128 tokens, 384 for spans). With
    ``output_dir`` the final model and ``history.json`` are saved.

    Returns:
        One dict per epoch: ``epoch``, ``train_loss`` and, with ``dev``, ``dev_<name>`` for each score
        of ``task.metrics``: ``dev_accuracy``, ``dev_macro_f1``, ``dev_loss`` (pairs),
        ``dev_accuracy`` (tagging, per word), ``dev_exact_match``, ``dev_f1`` (spans, in percent).
    """
    recipe = recipe_from_keywords(FineTuningRecipe, recipe, recipe_keywords, "finetune_task", DEFAULT_RECIPE)
    check_labels(task, model, labels)
    max_length = recipe.length(task.max_length)
    batches = task.batches(train, tokenizer, labels, max_length=max_length, batch_size=recipe.batch_size,
                           shuffle=True, seed=recipe.seed, what="train")
    dev_batches = None if dev is None else task.batches(dev, tokenizer, labels, max_length=max_length,
                                                         batch_size=EVALUATION_BATCH_SIZE, what="dev")
    return finetune_batches(model, batches, task.loss, dev_batches, None if dev is None else task.metrics, recipe,
                            device=device, progress=progress, output_dir=output_dir, precision=precision)


def _evaluation_batches(task: TaskType, model: nn.Module, tokenizer: BertTokenizer, examples: Sequence,
                        labels: LabelVocabulary | None, batch_size: int, max_length: int | None,
                        device: str | torch.device | None, what: str) -> tuple[PaddedBatches, torch.device]:
    """``examples`` encoded for evaluation, and the device to evaluate on, the model moved there
    (:func:`evaluate_task` and :func:`task_example_scores`)."""
    check_labels(task, model, labels)
    device = evaluation_device(model, device)
    model.to(device)
    max_length = task.max_length if max_length is None else max_length
    return task.batches(examples, tokenizer, labels, max_length=max_length, batch_size=batch_size, what=what), device


def evaluate_task(
    task: TaskType,
    model: nn.Module,
    tokenizer: BertTokenizer,
    examples: Sequence,
    *,
    labels: LabelVocabulary | None = None,
    batch_size: int = EVALUATION_BATCH_SIZE,
    max_length: int | None = None,
    device: str | torch.device | None = None,
    precision: str = "auto",
    what: str = "examples",
) -> dict[str, float]:
    """The scores of ``task.metrics`` for ``model`` on ``examples``: accuracy, macro-F1 and loss
    (pairs), word accuracy (tagging), exact match and F1 in percent (spans).

    ``labels``: the label names of the training split (a tag of ``examples`` outside them is an
    error that names the sentence, ``what[i]``). ``device`` None keeps the model where it is;
    ``precision`` is the forward pass's, as in ``bertlab.utils.autocast``.
    """
    batches, device = _evaluation_batches(task, model, tokenizer, examples, labels, batch_size, max_length, device,
                                          what)
    return task.metrics(model, batches, device, precision)


def task_example_scores(
    task: TaskType,
    model: nn.Module,
    tokenizer: BertTokenizer,
    examples: Sequence,
    *,
    labels: LabelVocabulary | None = None,
    batch_size: int = EVALUATION_BATCH_SIZE,
    max_length: int | None = None,
    device: str | torch.device | None = None,
    precision: str = "auto",
    what: str = "examples",
) -> ExampleScores:
    """``task.metric`` of ``model`` on each of ``examples`` (:class:`ExampleScores`), evaluated as
    :func:`evaluate_task` does: their mean, weighted, is its score."""
    batches, device = _evaluation_batches(task, model, tokenizer, examples, labels, batch_size, max_length, device,
                                          what)
    return task.example_scores(model, batches, device, precision)


def choose_task_learning_rate(
    task: TaskType,
    train_with: Callable[[float], nn.Module],
    learning_rates: Sequence[float],
    tokenizer: BertTokenizer,
    dev: Sequence,
    *,
    labels: LabelVocabulary | None = None,
    max_length: int | None = None,
    precision: str = "auto",
) -> TunedRun:
    """:func:`bertlab.finetuning.choose_learning_rate` for a task type: one model per rate from
    ``train_with(lr)``, kept when its :func:`evaluate_task` score ``task.metric`` on ``dev`` (accuracy
    for pairs and tagging, F1 for spans) is the highest; ties go to the first rate."""
    return choose_learning_rate(
        train_with, learning_rates, tokenizer, dev,
        max_length=task.max_length if max_length is None else max_length, precision=precision,
        evaluate_fn=functools.partial(evaluate_task, task, labels=labels), metric=task.metric,
    )
