"""BERT's other task types: token tagging and span extraction (Devlin et al., 2019, section 4).

Sentence-pair classification (natural language inference, SNLI) needs nothing new: the two
sentences are encoded as a pair, [CLS] A [SEP] B [SEP], with ``BertTokenizer.encode(a, b)``, and
the text vector is classified as in chapter 08. The two other task types need their inputs and
outputs mapped between words or characters and word pieces:

- **Token tagging** (part-of-speech tags, named entities): the data gives one label per word, BERT
  reads word pieces. :func:`align_labels_to_word_pieces` gives the first piece of each word the
  word's label and every other piece the label -100 (:func:`word_piece_labels`), which the
  cross-entropy (``ignore_index``) and the metric (:func:`tagging_accuracy`) skip, as Devlin et al.
  (2019, section 5.3) do.
- **Named entities** are spans of words, tagged one word at a time in the BIO scheme (B-T on an
  entity's first word, I-T on its others, O outside): :func:`entity_spans` reads the entities back
  from the tags, and :func:`entity_scores` scores predicted tags by their entities (precision, recall
  and F1, the CoNLL-2003 metric), not by their words.
- **Span extraction** (SQuAD v1.1; Rajpurkar et al., 2016): the answer is a span of characters of
  the context. :func:`squad_windows` encodes [CLS] question [SEP] context [SEP], cuts a long context
  into overlapping windows, and marks the answer's first and last word pieces in each window
  (:func:`char_span_to_token_span`, with the character offsets of :func:`word_piece_offsets`). The
  model scores each position as a start and as an end; :func:`best_span` picks the best valid span,
  and :func:`squad_scores` grades the answers as the official SQuAD v1.1 evaluation script does.
"""

import collections
import re
import string
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from bertlab.bert import IGNORE_INDEX  # the label of the word pieces the loss and the metric skip
from bertlab.task_data import TaggedSentence
from bertlab.tokenization import (
    BertTokenizer,
    _is_control,
    _is_cjk_character,
    _is_punctuation,
    _is_whitespace,
    _strip_accents,
)


# --------------------------------------------------------------------------------------------------
# Token tagging: one label per word, spread over word pieces
# --------------------------------------------------------------------------------------------------


@dataclass
class TaggedEncoding:
    """One sentence of pre-split words, encoded for BERT with one label per word piece.

    All lists have one entry per token of [CLS] pieces ... [SEP] (length N):

    - ``input_ids``: the token ids; ``token_type_ids``: all 0 (one segment); ``attention_mask``: all 1.
    - ``labels``: the word's label on the first piece of each word, ``IGNORE_INDEX`` (-100) on the
      other pieces of a word and on [CLS] and [SEP].
    - ``word_ids``: the index (into ``words``) of the word each piece comes from, None for [CLS] and
      [SEP], as Hugging Face's ``BatchEncoding.word_ids()``.
    """

    input_ids: list[int]
    token_type_ids: list[int]
    attention_mask: list[int]
    labels: list[int]
    word_ids: list[int | None]


def align_labels_to_word_pieces(
    words: Sequence[str],
    labels: Sequence[int],
    tokenizer: BertTokenizer,
    max_length: int | None = None,
) -> TaggedEncoding:
    """Encode pre-split ``words`` as [CLS] pieces [SEP], labelling the first piece of each word.

    Each word is tokenized on its own (``tokenizer.tokenize(word)``), so its pieces never merge with
    a neighbour's; a word may give several pieces ("playing" -> play ##ing, "don't" -> don ' t) or
    none (a word made only of control characters), and then has no labelled piece. With words
    w_0 .. w_{n-1} and pieces p_1 .. p_{N-2} between [CLS] and [SEP]:

        labels[t] = labels[i]  if p_t is the first piece of word w_i
                    -100       otherwise (later pieces of a word, [CLS], [SEP])

    With ``max_length``, only the first ``max_length - 2`` pieces are kept (the words cut off lose
    their label). This is Hugging Face's ``tokenizer(words, is_split_into_words=True)`` with labels
    aligned by ``word_ids()``, first piece only.

    Args:
        words: the words of one sentence (as a treebank splits them).
        labels: one label id per word (ints >= 0).
        tokenizer: BERT's tokenizer.
        max_length: the most tokens, [CLS] and [SEP] included; None keeps every piece.

    Returns:
        A :class:`TaggedEncoding` with N = number of pieces kept + 2 entries per list.

    Raises:
        ValueError: when ``words`` and ``labels`` differ in length, or ``max_length`` < 2.
    """
    if isinstance(words, str):
        raise TypeError("words must be a list of words, not one string")
    if len(words) != len(labels):
        raise ValueError(f"there are {len(words)} words but {len(labels)} labels: give one label per word")
    if max_length is not None and max_length < 2:
        raise ValueError(f"max_length={max_length} leaves no room for [CLS] and [SEP]")
    pieces, piece_word_ids = [], []
    for index, word in enumerate(words):
        word_pieces = tokenizer.tokenize(word)
        pieces += word_pieces
        piece_word_ids += [index] * len(word_pieces)
    if max_length is not None:
        pieces, piece_word_ids = pieces[: max_length - 2], piece_word_ids[: max_length - 2]
    input_ids = [tokenizer.cls_token_id, *tokenizer.convert_tokens_to_ids(pieces), tokenizer.sep_token_id]
    word_ids = [None, *piece_word_ids, None]
    return TaggedEncoding(
        input_ids=input_ids,
        token_type_ids=[0] * len(input_ids),
        attention_mask=[1] * len(input_ids),
        labels=word_piece_labels(word_ids, labels),
        word_ids=word_ids,
    )


def word_piece_labels(word_ids: Sequence[int | None], word_labels: Sequence[int]) -> list[int]:
    """One label per token, from the word each token comes from: the first piece of a word gets the
    word's label, every other token ``IGNORE_INDEX`` (-100).

        labels[t] = word_labels[word_ids[t]]  if word_ids[t] is not None and (t = 0 or word_ids[t-1] != word_ids[t])
                    -100                      otherwise: a later piece of a word, [CLS], [SEP], padding

    The pieces of a word are consecutive, so the first piece is the one whose predecessor comes from
    another word (or from no word, as [CLS]). This is Hugging Face's recipe for token classification
    (``BatchEncoding.word_ids()``, labels on the first piece only), and what
    :func:`align_labels_to_word_pieces` uses.

    Args:
        word_ids: for each token (length N), the index into ``word_labels`` of the word it comes from,
            None for a token of no word ([CLS], [SEP], padding).
        word_labels: one label id per word (ints >= 0).

    Returns:
        N ints: a word's label on its first piece, -100 elsewhere.
    """
    labels = []
    for t, word in enumerate(word_ids):
        first_piece = word is not None and (t == 0 or word_ids[t - 1] != word)
        labels.append(int(word_labels[word]) if first_piece else IGNORE_INDEX)
    return labels


def tagging_accuracy(logits: torch.Tensor, labels: torch.Tensor, ignore_index: int = IGNORE_INDEX) -> torch.Tensor:
    """The share of the labelled positions whose highest-scoring class is their label.

        accuracy = sum_{i in P} [argmax_c logits[i, c] = labels[i]] / |P|,   P = {i : labels[i] != ignore_index}

    With the labels of :func:`word_piece_labels` (one per word, on its first piece), P holds one
    position per word: this is the accuracy over words, the metric of part-of-speech tagging, counted
    over all the words of the batch (a long sentence weighs as many words as it has).

    Args:
        logits: the scores of the C classes, ``(..., C)`` (``(B, N, C)`` for a batch of sentences).
        labels: the class of each position, ``(...)``, ``ignore_index`` where nothing is predicted.

    Returns:
        A 0-d float tensor (NaN when no position is labelled).

    Raises:
        ValueError: when ``labels`` does not have the shape of ``logits`` without its last axis.
    """
    if labels.shape != logits.shape[:-1]:
        raise ValueError(f"labels {tuple(labels.shape)} must have the shape of logits {tuple(logits.shape)} "
                         "without its last axis (the classes)")
    labelled = labels != ignore_index  # (...)
    correct = (logits.argmax(dim=-1) == labels) & labelled  # (...)
    return correct.sum() / labelled.sum()


def words_tagged_right(predictions: Sequence[Sequence[str | None]], sentences: Sequence[TaggedSentence]) -> list[int]:
    """The words of each sentence whose predicted tag is the gold one; a word predicted None (no piece
    within max_length) counts as wrong.

    Raises:
        ValueError: when there is not one list of predictions per sentence and one prediction per word.
    """
    if len(predictions) != len(sentences):
        raise ValueError(f"got predictions for {len(predictions)} sentences but {len(sentences)} sentences")
    right = []
    for index, (predicted, sentence) in enumerate(zip(predictions, sentences)):
        if len(predicted) != len(sentence.tags):
            raise ValueError(f"sentence {index} has {len(sentence.tags)} words but {len(predicted)} predicted tags")
        right.append(sum(guess == tag for guess, tag in zip(predicted, sentence.tags)))
    return right


def word_accuracy(predictions: Sequence[Sequence[str | None]], sentences: Sequence[TaggedSentence]) -> float:
    """The share of words whose predicted tag is the gold one: (1/W) sum_w [predicted_w = gold_w] over
    the W words of all sentences (:func:`words_tagged_right`); a word predicted None counts as wrong.

    Raises:
        ValueError: when a sentence has not one prediction per word, or there is no word.
    """
    right = words_tagged_right(predictions, sentences)
    total = sum(len(sentence.tags) for sentence in sentences)
    if total == 0:
        raise ValueError("the sentences have no word to score")
    return sum(right) / total


# --------------------------------------------------------------------------------------------------
# Named entities: BIO tags, the entities they mark, and entity-level precision, recall and F1
# --------------------------------------------------------------------------------------------------


def entity_spans(tags: Sequence[str]) -> list[tuple[str, int, int]]:
    """The entities that the BIO tags of a sentence mark, as ``(type, start, end)``: the words
    ``start`` to ``end - 1`` (``end`` excluded, as in ``words[start:end]``) form an entity of ``type``.

    Each word has a tag: ``"O"`` (outside every entity), ``"B-T"`` (the first word of an entity of type
    T) or ``"I-T"`` (a later word of one). An entity of type T

        starts at a word tagged B-T, or tagged I-T that continues no entity of type T (the word before
            it is O, B- or I- of another type, or there is none);
        goes on over the words tagged I-T that follow it, and ends before the first word that does not
            continue it (O, any B-, I- of another type), or at the end of the sentence.

    Reading an I-T that continues nothing as the start of an entity is the rule of conlleval, the
    scorer of the CoNLL shared tasks, and seqeval's default: the CoNLL-2003 files (the IOB1 scheme)
    start most entities with I-T and write B-T only where an entity follows one of its type, and a
    tagger's predictions need not follow the rules of BIO either. "B-PER I-PER O I-LOC B-LOC" holds
    ``[("PER", 0, 2), ("LOC", 3, 4), ("LOC", 4, 5)]``.

    Args:
        tags: one tag per word.

    Returns:
        The entities, in the order of their first words.

    Raises:
        ValueError: for a tag other than "O", "B-<type>" and "I-<type>".
    """
    if isinstance(tags, str):
        raise TypeError("tags must be a list of tags, one per word, not one string")
    spans = []
    kind, start = None, 0  # the type and the first word of the entity being read; None outside one
    for t, tag in enumerate([*tags, "O"]):  # an "O" after the last word ends an entity that reaches it
        prefix, _, tag_type = tag.partition("-")
        if tag != "O" and (prefix not in ("B", "I") or not tag_type):
            raise ValueError(f"tag {t} is {tag!r}: a BIO tag is 'O', 'B-<type>' or 'I-<type>'")
        continues = prefix == "I" and tag_type == kind
        if kind is not None and not continues:
            spans.append((kind, start, t))
            kind = None
        if tag != "O" and not continues:
            kind, start = tag_type, t
    return spans


@dataclass
class EntityScores:
    """Entity-level scores of predicted tags (fractions in [0, 1]), and the counts they come from."""

    precision: float
    recall: float
    f1: float
    gold: int  # entities in the gold tags
    predicted: int  # entities in the predicted tags
    correct: int  # predicted entities that are gold ones: the same sentence, type, start and end


def entity_scores(gold_tags: Sequence[Sequence[str]], predicted_tags: Sequence[Sequence[str]]) -> EntityScores:
    """Precision, recall and F1 of the entities of predicted tags, the metric of CoNLL-2003.

    With G the gold entities and P the predicted ones (:func:`entity_spans` of every sentence), a
    predicted entity is correct only when a gold entity of the same sentence has exactly its type, its
    first and its last word (partial overlaps count nothing):

        precision = |G n P| / |P|,   recall = |G n P| / |G|,   F1 = 2 precision recall / (precision + recall),

    each 0 when its denominator is 0 (as conlleval and seqeval report them), counted over all the
    entities of all the sentences and types (micro-averaged: conlleval's overall score, and seqeval's
    ``precision_score``, ``recall_score`` and ``f1_score`` by default).

    Args:
        gold_tags: the BIO tags of each sentence, one per word.
        predicted_tags: the predicted tags of the same sentences.

    Raises:
        ValueError: when the two give different numbers of sentences, or of tags to a sentence.
    """
    if len(gold_tags) != len(predicted_tags):
        raise ValueError(f"{len(gold_tags)} sentences of gold tags but {len(predicted_tags)} of predicted ones")
    gold, predicted = set(), set()
    for index, (gold_sentence, predicted_sentence) in enumerate(zip(gold_tags, predicted_tags)):
        if len(gold_sentence) != len(predicted_sentence):
            raise ValueError(f"sentence {index} has {len(gold_sentence)} gold tags but {len(predicted_sentence)} "
                             "predicted ones")
        gold |= {(index, *span) for span in entity_spans(gold_sentence)}
        predicted |= {(index, *span) for span in entity_spans(predicted_sentence)}
    correct = len(gold & predicted)
    precision = correct / len(predicted) if predicted else 0.0
    recall = correct / len(gold) if gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0
    return EntityScores(precision=precision, recall=recall, f1=f1, gold=len(gold), predicted=len(predicted),
                        correct=correct)


# --------------------------------------------------------------------------------------------------
# Span extraction: characters <-> word pieces
# --------------------------------------------------------------------------------------------------


def word_piece_offsets(text: str, tokenizer: BertTokenizer) -> tuple[list[str], list[tuple[int, int]]]:
    """The word pieces of ``text`` and, for each, the span of characters of ``text`` it comes from.

    Piece k comes from ``text[start_k:end_k]`` of the original string, before lower-casing and accent
    stripping ("Café" -> "cafe" has the span (0, 4)). The text is normalized one character at a
    time, remembering where each normalized character came from: control characters are dropped,
    whitespace separates words, CJK ideographs and punctuation marks are words of their own, and
    (``do_lower_case``) a character c becomes strip_accents(lower(c)), which may be several
    characters (all from c) or none (a combining accent). The words are then cut into pieces by
    WordPiece; a piece spans from the first original character of its first normalized character
    to the last one of its last, and a word that becomes [UNK] spans the whole word. The pieces and
    spans are those of Hugging Face's ``return_offsets_mapping=True``, and the pieces those of
    ``tokenizer.tokenize(text)``, for text without the special tokens written out ("[MASK]").

    Returns:
        ``(pieces, offsets)``: the word pieces and their ``(start, end)`` character spans, end excluded.
    """
    # Each word: a list of (normalized character, index of the original character it comes from).
    words: list[list[tuple[str, int]]] = []
    current: list[tuple[str, int]] = []

    def end_word():
        nonlocal current
        if current:
            words.append(current)
        current = []

    for index, char in enumerate(text):
        if char in "\x00\ufffd" or _is_control(char):
            continue
        if _is_whitespace(char):
            end_word()
            continue
        normalized = _strip_accents(char.lower()) if tokenizer.do_lower_case else char
        for piece_char in normalized:
            if _is_punctuation(piece_char) or _is_cjk_character(piece_char):
                end_word()
                words.append([(piece_char, index)])
            else:
                current.append((piece_char, index))
    end_word()

    pieces, offsets = [], []
    for word in words:
        word_text = "".join(char for char, _ in word)
        position = 0
        for piece in tokenizer.wordpiece_tokenizer.tokenize_word(word_text):
            if piece == tokenizer.wordpiece_tokenizer.unk_token:  # the whole word
                pieces.append(piece)
                offsets.append((word[0][1], word[-1][1] + 1))
                break
            length = len(piece) - 2 if position > 0 else len(piece)  # a continuation starts with "##"
            pieces.append(piece)
            offsets.append((word[position][1], word[position + length - 1][1] + 1))
            position += length
    return pieces, offsets


def char_span_to_token_span(
    offsets: Sequence[tuple[int, int] | None], start_char: int, end_char: int
) -> tuple[int, int] | None:
    """The first and last tokens that cover the characters ``[start_char, end_char)``, or None.

    ``offsets[t]`` is the character span ``(start, end)`` of token t in the context, or None for a
    token that is not in the context (the question, [CLS], [SEP], padding). Among context tokens,

        start token = the first t with end_t > start_char      (the first token that reaches the span)
        end token   = the last t with start_t < end_char        (the last token that begins in it)

    The span is None when it is not wholly inside the tokens given: a character of it lies before
    the first context token or after the last one, or no token overlaps it (only whitespace).

    Returns:
        ``(start_token, end_token)``, both inclusive, or None.
    """
    if not 0 <= start_char < end_char:
        raise ValueError(f"expected 0 <= start_char < end_char, got start_char={start_char}, end_char={end_char}")
    context = [(t, span) for t, span in enumerate(offsets) if span is not None]
    if not context or context[0][1][0] > start_char or context[-1][1][1] < end_char:
        return None
    start = next(t for t, (_, end) in context if end > start_char)
    end = next(t for t, (begin, _) in reversed(context) if begin < end_char)
    return (start, end) if start <= end else None


@dataclass
class SquadWindow:
    """One window of a question and a part of its context, encoded for BERT (N tokens).

    - ``input_ids``: [CLS] question [SEP] context pieces [SEP]; ``token_type_ids``: 0 up to the first
      [SEP] included, 1 after; ``attention_mask``: all 1 (no padding).
    - ``offsets``: for each token, the ``(start, end)`` characters of the context it comes from,
      None for the question's pieces and the special tokens.
    - ``start_position``, ``end_position``: the answer's first and last tokens (inclusive), or
      (0, 0), the [CLS] position, when the answer is not wholly inside this window.
    """

    input_ids: list[int]
    token_type_ids: list[int]
    attention_mask: list[int]
    offsets: list[tuple[int, int] | None]
    start_position: int
    end_position: int

    @property
    def context_mask(self) -> list[bool]:
        """True on the context's tokens: where an answer may start and end."""
        return [span is not None for span in self.offsets]


def squad_windows(
    question: str,
    context: str,
    answer_start_char: int | None,
    answer_text: str | None,
    tokenizer: BertTokenizer,
    max_length: int = 384,
    stride: int = 128,
) -> list[SquadWindow]:
    """Encode a SQuAD question and its context as [CLS] question [SEP] context [SEP] windows.

    With q question pieces, each window holds L = max_length - q - 3 context pieces (fewer in the
    last), and consecutive windows share ``stride`` pieces: window k starts at context piece
    k * (L - stride), and the last window is the first one that reaches the end of the context.
    This is Hugging Face's ``tokenizer(question, context, truncation="only_second",
    max_length=max_length, stride=stride, return_overflowing_tokens=True)``, as in its question
    answering examples. The answer, the characters ``[answer_start_char, answer_start_char +
    len(answer_text))`` of ``context``, becomes the token span of :func:`char_span_to_token_span`
    over the whole context; a window that holds it wholly gets its positions, the others (0, 0).

    Args:
        answer_start_char, answer_text: the answer, or both None (a question to answer: every window
            gets (0, 0)).
        max_length: the most tokens of a window, special tokens included.
        stride: the number of context pieces two consecutive windows share.

    Returns:
        The windows, in order (one when the context fits).

    Raises:
        ValueError: when the question leaves no more than ``stride`` pieces for the context, or the
            answer is empty or lies outside the context.
    """
    question_ids = tokenizer.convert_tokens_to_ids(tokenizer.tokenize(question))
    pieces, offsets = word_piece_offsets(context, tokenizer)
    context_ids = tokenizer.convert_tokens_to_ids(pieces)
    window_length = max_length - len(question_ids) - 3
    if window_length <= stride:
        raise ValueError(
            f"the question has {len(question_ids)} word pieces: with max_length={max_length} that leaves "
            f"{max(window_length, 0)} for the context, which must exceed stride={stride}"
        )
    answer = None
    if (answer_start_char is None) != (answer_text is None):
        raise ValueError("give both answer_start_char and answer_text, or neither")
    if answer_text is not None:
        answer_end_char = answer_start_char + len(answer_text)
        if not answer_text or answer_start_char < 0 or answer_end_char > len(context):
            raise ValueError(f"the answer {answer_text!r} at character {answer_start_char} is empty or lies "
                             f"outside the context ({len(context)} characters)")
        answer = char_span_to_token_span(offsets, answer_start_char, answer_end_char)

    windows, first = [], 0
    while True:
        last = min(first + window_length, len(context_ids))  # context pieces [first, last)
        prefix = len(question_ids) + 2  # [CLS] question [SEP]
        input_ids = [tokenizer.cls_token_id, *question_ids, tokenizer.sep_token_id,
                     *context_ids[first:last], tokenizer.sep_token_id]
        token_type_ids = [0] * prefix + [1] * (last - first + 1)
        start_position = end_position = 0
        if answer is not None and first <= answer[0] and answer[1] < last:
            start_position, end_position = answer[0] - first + prefix, answer[1] - first + prefix
        windows.append(SquadWindow(
            input_ids=input_ids,
            token_type_ids=token_type_ids,
            attention_mask=[1] * len(input_ids),
            offsets=[None] * prefix + list(offsets[first:last]) + [None],
            start_position=start_position,
            end_position=end_position,
        ))
        if last >= len(context_ids):
            return windows
        first += window_length - stride


def best_span(
    start_logits: torch.Tensor,
    end_logits: torch.Tensor,
    context_mask: torch.Tensor,
    max_answer_length: int = 30,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The span (s, e) that maximises start_logits[s] + end_logits[e] among the valid spans.

    A span is valid when s <= e, e - s + 1 <= ``max_answer_length`` and both s and e are context
    tokens (``context_mask`` True). All N x N scores are formed at once,

        score[s, e] = start_logits[s] + end_logits[e]   # (..., N, N)

    and the invalid ones set to -inf with a band mask (the upper triangle e >= s minus the part
    e - s >= max_answer_length) and the context mask on rows and columns, before one argmax.

    Args:
        start_logits, end_logits: the model's scores, ``(..., N)`` (``(N,)`` or a batch ``(B, N)``).
        context_mask: bool, ``(..., N)``: where the context is.

    Returns:
        ``(start, end)``: long tensors of shape ``(...)`` (0-d for one sequence).

    Raises:
        ValueError: on mismatched shapes, or when a sequence has no context token.
    """
    if start_logits.shape != end_logits.shape or start_logits.shape != context_mask.shape:
        raise ValueError(f"start_logits {tuple(start_logits.shape)}, end_logits {tuple(end_logits.shape)} and "
                         f"context_mask {tuple(context_mask.shape)} must have the same shape (..., N)")
    if max_answer_length < 1:
        raise ValueError(f"max_answer_length must be at least 1, got {max_answer_length}")
    context_mask = context_mask.bool()
    if not context_mask.any(dim=-1).all():
        raise ValueError("a sequence has no context token (context_mask all False): it has no span to pick")
    length = start_logits.shape[-1]
    scores = start_logits.unsqueeze(-1) + end_logits.unsqueeze(-2)  # (..., N, N)
    ones = torch.ones(length, length, dtype=torch.bool, device=start_logits.device)
    band = ones.triu() & ~ones.triu(diagonal=max_answer_length)  # 0 <= e - s < max_answer_length
    valid = band & context_mask.unsqueeze(-1) & context_mask.unsqueeze(-2)  # (..., N, N)
    scores = scores.masked_fill(~valid, float("-inf"))
    best = scores.flatten(-2).argmax(dim=-1)  # (...)
    return best // length, best % length


# --------------------------------------------------------------------------------------------------
# The SQuAD v1.1 metrics
# --------------------------------------------------------------------------------------------------

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = frozenset(string.punctuation)


def squad_normalize(text: str) -> str:
    """SQuAD v1.1's answer normalisation: lower-case, drop ASCII punctuation, drop the articles
    "a", "an" and "the" (as whole words), and make every run of whitespace one space (none at the
    ends). "The Denver  Broncos!" -> "denver broncos". The official script's ``normalize_answer``."""
    text = "".join(char for char in text.lower() if char not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def squad_exact_match(prediction: str, ground_truths: Sequence[str]) -> float:
    """1.0 when the normalized prediction equals one of the normalized ground truths, else 0.0."""
    _check_ground_truths(ground_truths)
    return float(any(squad_normalize(prediction) == squad_normalize(truth) for truth in ground_truths))


def _token_f1(prediction: str, ground_truth: str) -> float:
    """F1 of the bags of normalized words: precision = common / |prediction|, recall = common /
    |ground truth|, F1 = 2 P R / (P + R), where common counts the shared words with multiplicity."""
    predicted, truth = squad_normalize(prediction).split(), squad_normalize(ground_truth).split()
    common = sum((collections.Counter(predicted) & collections.Counter(truth)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(predicted), common / len(truth)
    return 2 * precision * recall / (precision + recall)


def squad_f1(prediction: str, ground_truths: Sequence[str]) -> float:
    """The best word-overlap F1 (in [0, 1]) of the prediction against any one of the ground truths."""
    _check_ground_truths(ground_truths)
    return max(_token_f1(prediction, truth) for truth in ground_truths)


def _check_ground_truths(ground_truths: Sequence[str]) -> None:
    if isinstance(ground_truths, str):
        raise TypeError("ground_truths must be a list of answers, not one string")
    if not ground_truths:
        raise ValueError("ground_truths is empty: a question needs at least one answer to score against")


@dataclass
class SquadScores:
    """The SQuAD v1.1 scores of a set of predictions, in percent (as the official script prints them)."""

    exact_match: float
    f1: float


def squad_scores(predictions: dict[str, str], references: dict[str, Sequence[str]]) -> SquadScores:
    """Exact match and F1 over the questions, as the official SQuAD v1.1 evaluation script computes.

        exact_match = 100 / Q * sum_q max_g EM(prediction_q, g)
        f1          = 100 / Q * sum_q max_g F1(prediction_q, g)

    over the Q questions of ``references`` (question id -> its ground-truth answers); a question with
    no prediction counts 0, as in the script.

    Args:
        predictions: question id -> the predicted answer text.
        references: question id -> the ground-truth answer texts (one or more).
    """
    if not references:
        raise ValueError("references is empty: there is no question to score")
    unknown = sorted(set(predictions) - set(references))
    if unknown:
        raise ValueError(f"{len(unknown)} predictions answer no question of references, e.g. {unknown[0]!r}")
    exact = f1 = 0.0
    for question_id, truths in references.items():
        if question_id in predictions:
            exact += squad_exact_match(predictions[question_id], truths)
            f1 += squad_f1(predictions[question_id], truths)
    return SquadScores(exact_match=100 * exact / len(references), f1=100 * f1 / len(references))
