"""Checks of chapter 10 (BERT's other tasks), called by the hidden tests of ``chapters/10_tasks``.

Six exercises, graded against :mod:`bertlab.tasks`:

- ``word_piece_labels(word_ids, word_labels)``: the label of each word piece, the word's label on its
  first piece and -100 elsewhere (exact comparison of a list of ints);
- ``tagging_accuracy(logits, labels, ignore_index=-100)``: the accuracy over the labelled positions
  (the words) of a batch of tagged sentences;
- ``entity_spans(tags)``: the entities that a sentence's BIO tags mark, as (type, start, end), read
  as conlleval reads them (exact comparison of a list of tuples);
- ``char_span_to_token_span(offsets, start_char, end_char)``: the first and last tokens of an answer
  given in characters, or None when the window does not hold it (exact comparison);
- ``best_span(start_logits, end_logits, context_mask, max_answer_length=30)``: the valid span of the
  highest start + end score, one per sequence;
- ``squad_f1(prediction, ground_truths)``: SQuAD's word-overlap F1, with ``squad_normalize`` given.

Each ``check_<name>`` draws its cases, sizes and integer arguments included, from a generator seeded by
the exercise's name (and by the grading run's seed), names the typical mistakes it recognises, and
forbids the reference and the library code that does the exercise's job. ``forbid=False`` lifts that
rule (the tests use it to run a check on the reference).
"""

import collections

import torch

from autograder.checks.framework import (
    Case,
    Exercise,
    Mistake,
    Symptom,
    check_functions,
    generator_for,
    mistakes_told_apart,
    random_choice,
    random_integer,
    random_normal,
)
from bertlab import tasks as reference

IGNORE_INDEX = reference.IGNORE_INDEX  # -100
NEG_INF = float("-inf")


# --------------------------------------------------------------------------------------------------
# word_piece_labels
# --------------------------------------------------------------------------------------------------

WORD_PIECE_LABELS_FORBIDDEN = (reference.word_piece_labels, reference.align_labels_to_word_pieces)


def _pieces_per_word(g: torch.Generator, num_words: int, most: int) -> list[int]:
    """How many word pieces each of ``num_words`` words has (1 to ``most``), at least one word of
    several pieces and one of a single piece when there are two words or more."""
    counts = [random_integer(g, 1, most) for _ in range(num_words)]
    if num_words >= 2:
        several, single = torch.randperm(num_words, generator=g)[:2].tolist()
        counts[several], counts[single] = random_integer(g, 2, most), 1
    return counts


def _word_ids(counts: list[int]) -> list[int]:
    """The word id of each piece: word i repeated counts[i] times."""
    return [word for word, count in enumerate(counts) for _ in range(count)]


def _labels(g: torch.Generator, num_words: int, num_tags: int) -> list[int]:
    return [random_integer(g, 0, num_tags - 1) for _ in range(num_words)]


def word_piece_labels_cases() -> list[Case]:
    """Sentences framed as [CLS] pieces [SEP], with padding, truncated, with a word of no piece, without
    the special tokens, and a single word of several pieces; the numbers of words, of pieces and of tags
    and the labels are drawn."""
    g = generator_for("word_piece_labels")

    def sentence(num_words, most_pieces=4):
        counts = _pieces_per_word(g, num_words, most_pieces)
        return _word_ids(counts), _labels(g, num_words, random_integer(g, 5, 40))

    cases = []
    pieces, labels = sentence(random_integer(g, 4, 9))
    cases.append(Case(f"[CLS], the pieces of {len(labels)} words (some cut into several), [SEP]",
                      ([None, *pieces, None], labels)))
    num_words = random_integer(g, 3, 10)
    labels = _labels(g, num_words, 17)
    cases.append(Case(f"[CLS], {num_words} words of one piece each, [SEP]", ([None, *range(num_words), None], labels)))
    pieces, labels = sentence(random_integer(g, 3, 7))
    padding = random_integer(g, 1, 6)
    cases.append(Case(f"[CLS], the pieces of {len(labels)} words, [SEP], then {padding} padding positions (word id "
                      "None)", ([None, *pieces, None, *[None] * padding], labels)))
    counts = _pieces_per_word(g, random_integer(g, 3, 7), 4)
    counts[-1] = random_integer(g, 3, 5)
    kept = len(_word_ids(counts)) - random_integer(g, 1, counts[-1] - 1)  # the last word loses its last pieces
    labels = _labels(g, len(counts), 17)
    cases.append(Case(f"truncated: [CLS], the first {kept} pieces of {len(counts)} words (the last word cut), [SEP]",
                      ([None, *_word_ids(counts)[:kept], None], labels)))
    counts = _pieces_per_word(g, random_integer(g, 4, 8), 3)
    pieceless = random_integer(g, 1, len(counts) - 2)
    counts[pieceless] = 0
    labels = _labels(g, len(counts), 17)
    cases.append(Case(f"[CLS], {len(counts)} words of which word {pieceless} has no piece (it was only control "
                      "characters), [SEP]", ([None, *_word_ids(counts), None], labels)))
    pieces, labels = sentence(random_integer(g, 3, 8))
    cases.append(Case(f"the pieces of {len(labels)} words without [CLS] and [SEP]: position 0 is the first piece of "
                      "word 0", (pieces, labels)))
    num_pieces = random_integer(g, 2, 40)
    label = random_integer(g, 0, 99)
    cases.append(Case(f"a single word of {num_pieces} pieces, without [CLS] and [SEP]", ([0] * num_pieces, [label])))
    return cases


def _labels_on_every_piece(word_ids, word_labels):
    return [IGNORE_INDEX if word is None else word_labels[word] for word in word_ids]


def _labels_on_last_piece(word_ids, word_labels):
    following = [*word_ids[1:], None]
    return [IGNORE_INDEX if word is None or word == after else word_labels[word]
            for word, after in zip(word_ids, following)]


def _labels_of_special_tokens(value):
    def word_piece_labels(word_ids, word_labels):
        return [value if word is None else label for word, label in
                zip(word_ids, reference.word_piece_labels(word_ids, word_labels))]
    return word_piece_labels


def _other_ignored_label(value):
    def word_piece_labels(word_ids, word_labels):
        return [value if label == IGNORE_INDEX else label
                for label in reference.word_piece_labels(word_ids, word_labels)]
    return word_piece_labels


def _previous_piece_wraps_around(word_ids, word_labels):
    labels = []
    for t, word in enumerate(word_ids):
        first_piece = word is not None and word_ids[t - 1] != word  # at t = 0, word_ids[-1] is the last entry
        labels.append(word_labels[word] if first_piece else IGNORE_INDEX)
    return labels


def _labels_by_position(word_ids, word_labels):
    labels = []
    for t, word in enumerate(word_ids):
        first_piece = word is not None and (t == 0 or word_ids[t - 1] != word)
        labels.append(word_labels[t] if first_piece else IGNORE_INDEX)
    return labels


def _word_index_as_label(word_ids, word_labels):
    return [word if label != IGNORE_INDEX else label for word, label in
            zip(word_ids, reference.word_piece_labels(word_ids, word_labels))]


FIRST_PIECE_HINT = ("only the first piece of a word carries the word's label (Devlin et al. label the first "
                    "sub-token); its other pieces get -100, which the loss and the metric skip.")

WORD_PIECE_LABELS_MISTAKES = (
    Mistake(_labels_on_every_piece, FIRST_PIECE_HINT),
    Mistake(_labels_on_last_piece,
            "label the FIRST piece of each word (the one whose previous token comes from another word), not the last."),
    Mistake(_labels_of_special_tokens(0),
            "[CLS], [SEP] and padding come from no word (word id None): they get -100, not a label."),
    Mistake(_other_ignored_label(-1),
            "mark the positions without a label with -100 (IGNORE_INDEX, the default ignore_index of "
            "F.cross_entropy), not -1."),
    Mistake(_other_ignored_label(0),
            "mark the positions without a label with -100 (IGNORE_INDEX): 0 is a real label, the first tag."),
    Mistake(_previous_piece_wraps_around,
            "at t = 0 there is no previous token: word_ids[t - 1] is then word_ids[-1], the LAST entry in Python. "
            "Position 0 is a first piece whenever its word id is not None."),
    Mistake(_labels_by_position,
            "the label of piece t is word_labels[word_ids[t]], the label of its word: index word_labels by the "
            "word id, not by the position t."),
    Mistake(_word_index_as_label,
            "the label of a first piece is word_labels[word_ids[t]], the word's label, not its index word_ids[t]."),
)


def _validate_int_list(output) -> str | None:
    if not isinstance(output, list) or not all(isinstance(label, int) and not isinstance(label, bool)
                                               for label in output):
        return f"output: you returned {output!r}; return a list of ints, one label per entry of word_ids."
    return None


WORD_PIECE_LABELS = Exercise("word_piece_labels", reference.word_piece_labels, word_piece_labels_cases,
                             mistakes=WORD_PIECE_LABELS_MISTAKES, forbidden=WORD_PIECE_LABELS_FORBIDDEN,
                             validate=_validate_int_list,
                             summary="""
                             Compare ``word_piece_labels(word_ids, word_labels)`` with
                             :func:`bertlab.tasks.word_piece_labels`.

                             Cases: [CLS] pieces [SEP] with words of one and of several pieces, words of one piece only,
                             padding, a truncated last word, a word without a piece, no special tokens, a single word of
                             several pieces; the numbers of words, pieces and tags and the labels are drawn. Exact
                             comparison (a list of ints). Forbidden: the reference and ``align_labels_to_word_pieces``.
                             """)


# --------------------------------------------------------------------------------------------------
# tagging_accuracy
# --------------------------------------------------------------------------------------------------

TAGGING_ACCURACY_FORBIDDEN = (
    reference.tagging_accuracy,
    "torchmetrics.functional.classification.accuracy.accuracy",
    "torchmetrics.functional.classification.accuracy.multiclass_accuracy",
    "sklearn.metrics._classification.accuracy_score",
)


def _tagged_batch(g: torch.Generator, shape: tuple[int, ...], num_classes: int, lengths: torch.Tensor,
                  ignore_index: int = IGNORE_INDEX, right: float = 0.6, dtype=torch.float32, wrong=None):
    """Logits ``(*shape, C)`` and labels ``shape`` of sentences of ``lengths`` tokens (one per sentence,
    the sentences along the last axis of ``shape``): [CLS] at 0, [SEP] at length - 1, padding after,
    and about a third of the other positions later pieces of a word; all of these get ``ignore_index``.
    A labelled position's label is the prediction with probability ``right``, else the label that
    ``wrong(logits)`` gives it (by default a class drawn at random)."""
    logits = random_normal(g, *shape, num_classes, scale=2.0, dtype=dtype)
    predictions = logits.argmax(dim=-1)  # (*shape)
    others = torch.randint(0, num_classes, shape, generator=g) if wrong is None else wrong(logits)
    labels = torch.where(torch.rand(shape, generator=g) < right, predictions, others)
    positions = torch.arange(shape[-1])
    inside = (positions > 0) & (positions < lengths.unsqueeze(-1) - 1)  # (*shape): between [CLS] and [SEP]
    first_piece = torch.rand(shape, generator=g) < 0.7
    first_piece[..., 1] = True  # the first word of a sentence starts right after [CLS]
    return logits, labels.masked_fill(~(inside & first_piece), ignore_index)


def tagging_accuracy_cases() -> list[Case]:
    """Batches of padded sentences (as many classes as positions first, so that an argmax over the
    positions gives a wrong value rather than an error), one sentence, float64, another ignore_index,
    a short and a long sentence, two leading axes, every position labelled; sizes drawn."""
    g = generator_for("tagging_accuracy")

    def lengths(batch, width, shortest=4):
        return torch.randint(shortest, width + 1, (batch,), generator=g)

    cases = []
    batch, width = random_integer(g, 2, 4), random_integer(g, 10, 20)
    while True:  # drawn again until an argmax over the positions scores otherwise, and no two mistakes agree
        logits, labels = _tagged_batch(g, (batch, width), width, lengths(batch, width), right=0.7,
                                       wrong=lambda logits: logits.argmax(dim=-2))  # an argmax over the positions
        labelled = labels != IGNORE_INDEX
        first = Case(f"logits ({batch}, {width}, {width}): {batch} padded sentences of {width} positions and "
                     f"{width} classes; -100 on [CLS], [SEP], later pieces and padding", (logits, labels))
        if (((logits.argmax(-1) == labels)[labelled].sum() - (logits.argmax(-2) == labels)[labelled].sum()).abs() > 1
                and mistakes_told_apart(first, TAGGING_ACCURACY_MISTAKES)):
            break
    cases.append(first)
    batch, width, classes = random_integer(g, 2, 5), random_integer(g, 12, 30), random_integer(g, 3, 11)
    logits, labels = _tagged_batch(g, (batch, width), classes, lengths(batch, width))
    cases.append(Case(f"logits ({batch}, {width}, {classes}), labels ({batch}, {width}): a batch of padded sentences",
                      (logits, labels)))
    width, classes = random_integer(g, 12, 30), random_integer(g, 3, 11)
    logits, labels = _tagged_batch(g, (width,), classes, torch.tensor(width))
    cases.append(Case(f"logits ({width}, {classes}), labels ({width},): one sentence, no batch axis", (logits, labels)))
    batch, width, classes = random_integer(g, 2, 5), random_integer(g, 12, 30), random_integer(g, 3, 11)
    logits, labels = _tagged_batch(g, (batch, width), classes, lengths(batch, width), dtype=torch.float64)
    cases.append(Case(f"logits ({batch}, {width}, {classes}), float64", (logits, labels)))
    batch, width, classes = random_integer(g, 2, 5), random_integer(g, 12, 30), random_integer(g, 3, 11)
    ignored = -random_integer(g, 1, 99)
    logits, labels = _tagged_batch(g, (batch, width), classes, lengths(batch, width), ignore_index=ignored)
    cases.append(Case(f"logits ({batch}, {width}, {classes}), ignore_index={ignored} (the labels use it)",
                      (logits, labels), {"ignore_index": ignored}))
    width, classes = random_integer(g, 20, 40), random_integer(g, 3, 11)
    short = random_integer(g, 4, 6)
    logits, labels = _tagged_batch(g, (2, width), classes, torch.tensor([short, width]), right=0.5)
    short_labels = labels[0, :short]
    labels[0, :short] = short_labels.where(short_labels == IGNORE_INDEX, logits[0, :short].argmax(dim=-1))  # all right
    cases.append(Case(f"logits (2, {width}, {classes}): a sentence of {short} tokens, all tagged right, and one of "
                      f"{width} tokens", (logits, labels)))
    outer, batch, width, classes = (random_integer(g, 2, 3), random_integer(g, 2, 3), random_integer(g, 12, 25),
                                    random_integer(g, 3, 11))
    logits, labels = _tagged_batch(g, (outer, batch, width), classes,
                                   torch.randint(4, width + 1, (outer, batch), generator=g))
    cases.append(Case(f"logits ({outer}, {batch}, {width}, {classes}): two leading axes", (logits, labels)))
    batch, width, classes = random_integer(g, 2, 5), random_integer(g, 5, 20), random_integer(g, 3, 11)
    logits = random_normal(g, batch, width, classes, scale=2.0)
    labels = torch.randint(0, classes, (batch, width), generator=g)
    cases.append(Case(f"logits ({batch}, {width}, {classes}): every position labelled", (logits, labels)))
    return cases


def _accuracy_over_all_positions(logits, labels, ignore_index=IGNORE_INDEX):
    return (logits.argmax(dim=-1) == labels).sum() / labels.numel()


def _accuracy_mean_of_sentences(logits, labels, ignore_index=IGNORE_INDEX):
    labelled = labels != ignore_index
    correct = (logits.argmax(dim=-1) == labels) & labelled
    return (correct.sum(dim=-1) / labelled.sum(dim=-1)).mean()


def _accuracy_with_fixed_ignore_index(logits, labels, ignore_index=IGNORE_INDEX):
    return reference.tagging_accuracy(logits, labels)


def _accuracy_over_axis(dim):
    def tagging_accuracy(logits, labels, ignore_index=IGNORE_INDEX):
        labelled = labels != ignore_index
        correct = (logits.argmax(dim=dim) == labels) & labelled
        return correct.sum() / labelled.sum()
    return tagging_accuracy


def _accuracy_of_scores(logits, labels, ignore_index=IGNORE_INDEX):
    labelled = labels != ignore_index
    return ((logits.amax(dim=-1) == labels) & labelled).sum() / labelled.sum()


def _number_right(logits, labels, ignore_index=IGNORE_INDEX):
    return ((logits.argmax(dim=-1) == labels) & (labels != ignore_index)).sum()


def _accuracy_in_percent(logits, labels, ignore_index=IGNORE_INDEX):
    return 100 * reference.tagging_accuracy(logits, labels, ignore_index)


CLASS_AXIS_HINT = ("the classes are the last axis of logits (..., C): the predicted tag of a position is "
                   "logits.argmax(dim=-1), of the shape of labels, not an argmax over the positions or the sentences.")

TAGGING_ACCURACY_MISTAKES = (
    Mistake(_accuracy_over_axis(-2), CLASS_AXIS_HINT),
    Mistake(_accuracy_over_axis(1), CLASS_AXIS_HINT),
    Mistake(_accuracy_over_axis(0), CLASS_AXIS_HINT),
    Mistake(_accuracy_with_fixed_ignore_index, "skip the positions whose label is ignore_index (the argument), "
                                               "not always -100."),
    Mistake(_accuracy_over_all_positions,
            "divide by the number of labelled positions (labels != ignore_index), the words, not by all positions: "
            "[CLS], [SEP], later pieces and padding are not predictions."),
    Mistake(_accuracy_mean_of_sentences,
            "count over all the words of the batch: the number of right words of every sentence divided by the "
            "number of labelled words of every sentence. A mean of per-sentence accuracies gives a sentence of 3 "
            "words the weight of one of 30."),
    Mistake(_accuracy_of_scores, "the prediction is the index of the highest score (argmax), not the score (max)."),
    Mistake(_number_right, "return the share of right words (a fraction in [0, 1]), not their number."),
    Mistake(_accuracy_in_percent, "return a fraction in [0, 1], not a percentage."),
)


TAGGING_ACCURACY = Exercise("tagging_accuracy", reference.tagging_accuracy, tagging_accuracy_cases,
                            mistakes=TAGGING_ACCURACY_MISTAKES, forbidden=TAGGING_ACCURACY_FORBIDDEN,
                            summary="""
                            Compare ``tagging_accuracy(logits, labels, ignore_index=-100)`` with
                            :func:`bertlab.tasks.tagging_accuracy`.

                            Cases: batches of padded sentences (-100 on the special tokens, later pieces and padding),
                            as many classes as positions, one sentence without a batch axis, float64, another
                            ignore_index, a short and a long sentence, two leading axes, every position labelled; sizes
                            drawn. Tolerance: the framework's defaults (a 0-d float32 tensor). Forbidden: the reference
                            and the accuracy functions of torchmetrics and scikit-learn.
                            """)


# --------------------------------------------------------------------------------------------------
# entity_spans
# --------------------------------------------------------------------------------------------------

ENTITY_SPANS_FORBIDDEN = (reference.entity_spans, reference.entity_scores,
                          "seqeval.metrics.sequence_labeling.get_entities")

#: The entity types of the cases: CoNLL-2003's four and some of OntoNotes'.
ENTITY_TYPES = ("PER", "LOC", "ORG", "MISC", "PERSON", "GPE", "NORP", "FAC", "DATE", "EVENT", "PRODUCT", "LAW",
                "WORK_OF_ART", "LANGUAGE", "MONEY", "QUANTITY")


def _entity_types(g: torch.Generator, count: int) -> list[str]:
    """``count`` different entity types, drawn."""
    return [ENTITY_TYPES[index] for index in torch.randperm(len(ENTITY_TYPES), generator=g)[:count].tolist()]


def _entity(kind: str, length: int, first: str = "B") -> list[str]:
    """The tags of an entity of ``length`` words: ``first``-kind, then I-kind."""
    return [f"{first}-{kind}"] + [f"I-{kind}"] * (length - 1)


def _outside(g: torch.Generator, low: int, high: int) -> list[str]:
    """The tags of ``low`` to ``high`` words outside every entity (drawn)."""
    return ["O"] * random_integer(g, low, high)


def entity_spans_cases() -> list[Case]:
    """BIO tag sequences, the types, lengths and positions drawn: well-formed entities apart, the last
    one at the end of the sentence; two entities of one type side by side; a tagger's ill-formed
    output (an I- after O, an I- of another type right after an entity); an I- at position 0 with an
    entity of its type at the end; no entity; one entity that is the whole sentence; random tags."""
    g = generator_for("entity_spans")
    cases = []
    # Each case is built so that the mistakes it is the first to show give different outputs on it: the
    # first shows those of any sentence (the end, the type, the last entity, runs of words), the next ones
    # one rule of BIO each.
    kinds = _entity_types(g, 3)
    tags = _outside(g, 0, 3) + _entity(kinds[0], 1)
    for kind in kinds[1:]:
        tags += _outside(g, 1, 3) + _entity(kind, random_integer(g, 1, 4))
    tags += _outside(g, 1, 3) + _entity(random_choice(g, kinds), random_integer(g, 2, 4))
    cases.append(Case(f"{len(tags)} tags in the BIO scheme: entities of one and of several words with O between them, "
                      "the last one ending the sentence", (tags,)))
    kind, other = _entity_types(g, 2)
    tags = (_outside(g, 0, 3) + _entity(kind, random_integer(g, 1, 3)) + _entity(kind, random_integer(g, 1, 3))
            + _outside(g, 1, 3) + _entity(other, random_integer(g, 1, 3)) + _outside(g, 1, 2))
    cases.append(Case(f"two entities of type {kind} side by side (B-{kind} right after an entity of type {kind}), then "
                      f"one of type {other}", (tags,)))
    kind, other = _entity_types(g, 2)
    tags = (_outside(g, 1, 3) + _entity(kind, random_integer(g, 1, 3), first="I") + _outside(g, 1, 3)
            + _entity(other, random_integer(g, 1, 3)) + _entity(kind, random_integer(g, 1, 3), first="I")
            + _outside(g, 1, 2))
    cases.append(Case(f"a tagger's output that breaks BIO's rules: I-{kind} after O, and I-{kind} right after an "
                      f"entity of type {other}", (tags,)))
    kind, other = _entity_types(g, 2)
    tags = (_entity(kind, random_integer(g, 1, 3), first="I") + _outside(g, 1, 3)
            + _entity(other, random_integer(g, 1, 2)) + _outside(g, 1, 3) + _entity(kind, random_integer(g, 1, 3)))
    cases.append(Case(f"I-{kind} at position 0 (no tag before it), and the sentence ends with an entity of type {kind}",
                      (tags,)))
    cases.append(Case("no entity: every tag O", (_outside(g, 3, 200),)))
    kind = random_choice(g, ENTITY_TYPES)
    cases.append(Case(f"one entity of type {kind} that is the whole sentence",
                      (_entity(kind, random_integer(g, 2, 60)),)))
    kinds = _entity_types(g, random_integer(g, 2, 4))
    options = ["O", *(f"{prefix}-{kind}" for kind in kinds for prefix in "BI")]
    tags = [random_choice(g, options) for _ in range(random_integer(g, 20, 40))]
    cases.append(Case(f"{len(tags)} random tags of {len(kinds)} types, as an untrained tagger predicts them", (tags,)))
    return cases


def _spans_by_rules(tags, *, starts_with_i=True, type_of_i="same", b_ends=True, close_at_end=True,
                    end_inclusive=False, type_with_prefix=False):
    """An entity_spans with one of the typical mistakes, chosen by the keyword arguments: whether an I- that
    continues nothing starts an entity, whether an I- continues an entity of its own type only ("same") or
    of any type ("any"), whether a B- ends the entity before it, whether an entity that reaches the end is
    kept, the end inclusive, the type written with its prefix."""
    spans, open_entity = [], None  # open_entity: [type, start, first tag]

    def close(end):
        kind, start, first_tag = open_entity
        spans.append((first_tag if type_with_prefix else kind, start, end - 1 if end_inclusive else end))

    for t, tag in enumerate(tags):
        prefix, kind = tag[:1], tag[2:]
        continues = (prefix == "I" and open_entity is not None
                     and (type_of_i == "any" or open_entity[0] == kind)) or (prefix == "B" and not b_ends
                                                                            and open_entity is not None
                                                                            and open_entity[0] == kind)
        if continues:
            continue
        if open_entity is not None:
            close(t)
            open_entity = None
        if prefix == "B" or (prefix == "I" and starts_with_i):
            open_entity = [kind, t, tag]
    if open_entity is not None and close_at_end:
        close(len(tags))
    return spans


def _spans_variant(**rules):
    def entity_spans(tags):
        return _spans_by_rules(tags, **rules)
    return entity_spans


def _spans_previous_wraps_around(tags):
    spans = []
    for t, tag in enumerate(tags):
        previous = tags[t - 1]  # at t = 0, tags[-1]: the LAST tag
        if tag.startswith("B-") or (tag.startswith("I-") and previous[2:] != tag[2:]):
            end = t + 1
            while end < len(tags) and tags[end] == f"I-{tag[2:]}":
                end += 1
            spans.append((tag[2:], t, end))
    return spans


def _spans_of_single_tags(tags):
    return [(tag[2:], t, t + 1) for t, tag in enumerate(tags) if tag != "O"]


CONTINUES_NOTHING_HINT = ("an I-T tag that continues no entity of type T (after O, after an entity of another type, "
                          "or at position 0) starts a new entity, as conlleval, the CoNLL-2003 scorer, reads it: "
                          "O I-PER I-PER holds the entity ('PER', 1, 3).")

ENTITY_SPANS_MISTAKES = (
    Mistake(_spans_variant(end_inclusive=True),
            "end is excluded, as in words[start:end]: an entity of the words 4 and 5 is (type, 4, 6), not "
            "(type, 4, 5)."),
    Mistake(_spans_variant(type_with_prefix=True),
            "the type is the tag without its prefix: 'B-PER' and 'I-PER' mark an entity of type 'PER'."),
    Mistake(_spans_variant(close_at_end=False),
            "an entity that reaches the last word ends with the sentence: close it after the loop (or read one 'O' "
            "after the last tag)."),
    Mistake(_spans_of_single_tags,
            "an entity is a run of words: B-T (or an I-T that starts one) and the I-T tags that follow it form ONE "
            "entity, (type, first word, last word + 1), not one entity per tagged word."),
    Mistake(_spans_variant(b_ends=False),
            "a B- tag always starts a new entity, even right after an entity of its type: B-PER I-PER B-PER is two "
            "people, ('PER', 0, 2) and ('PER', 2, 3)."),
    Mistake(_spans_previous_wraps_around,  # before the rules of I-, which drop the same entity at position 0
            "at position 0 there is no previous tag: tags[t - 1] is then tags[-1], the LAST tag in Python. An I-T at "
            "position 0 starts an entity."),
    Mistake(_spans_variant(starts_with_i=False), CONTINUES_NOTHING_HINT),
    Mistake(_spans_variant(type_of_i="any"),
            "an I-T tag continues only an entity of type T: I-LOC right after B-PER ends the person and starts a "
            "location."),
    Mistake(_spans_variant(starts_with_i=False, type_of_i="any"),
            "an I-T tag continues only an entity of type T, and one that continues none (after O, after another "
            "type, at position 0) starts a new entity of type T, as conlleval, the CoNLL-2003 scorer, reads it."),
)


def _validate_entity_spans(output) -> str | None:
    if not isinstance(output, list) or not all(
            isinstance(span, tuple) and len(span) == 3 and isinstance(span[0], str)
            and all(isinstance(t, int) and not isinstance(t, bool) for t in span[1:]) for span in output):
        return (f"output: you returned {output!r}; return a list of tuples (type, start, end): a str and two ints, "
                "one tuple per entity.")
    return None


ENTITY_SPANS = Exercise("entity_spans", reference.entity_spans, entity_spans_cases, mistakes=ENTITY_SPANS_MISTAKES,
                        forbidden=ENTITY_SPANS_FORBIDDEN, validate=_validate_entity_spans,
                        summary="""
                        Compare ``entity_spans(tags)`` with :func:`bertlab.tasks.entity_spans`.

                        Cases: BIO tag sequences whose types, lengths and positions are drawn: entities of one and of
                        several words apart, the last ending the sentence; two entities of one type side by side; a
                        tagger's output with an I- after O and an I- of another type right after an entity; an I- at
                        position 0; no entity; an entity that is the whole sentence; random tags. Exact comparison (a
                        list of (str, int, int) tuples). Forbidden: the reference, ``entity_scores`` and seqeval's
                        ``get_entities``.
                        """)


# --------------------------------------------------------------------------------------------------
# char_span_to_token_span
# --------------------------------------------------------------------------------------------------

CHAR_SPAN_TO_TOKEN_SPAN_FORBIDDEN = (
    reference.char_span_to_token_span,
    reference.squad_windows,
    "transformers.tokenization_utils_base.BatchEncoding.char_to_token",
)


class _Window:
    """The offsets of a drawn window: ``prefix`` tokens of no context ([CLS] question [SEP]), then
    context tokens (words cut into pieces, some followed by a punctuation mark with no space before
    it), then [SEP]. ``tokens[k]`` is the index into ``offsets`` of context token k, and ``spaced[k]``
    whether a space follows it."""

    def __init__(self, g: torch.Generator, num_words: int, prefix: int, first_char: int = 0):
        self.offsets: list[tuple[int, int] | None] = [None] * prefix
        self.spaced: list[bool] = []
        position = first_char
        for _ in range(num_words):
            length = random_integer(g, 2, 9)
            cuts = sorted(torch.randperm(length - 1, generator=g)[: random_integer(g, 0, 2)].add(1).tolist())
            for begin, end in zip([0, *cuts], [*cuts, length]):
                self.offsets.append((position + begin, position + end))
                self.spaced.append(False)
            position += length
            if random_integer(g, 0, 3) == 0:  # a punctuation mark right after the word
                self.offsets.append((position, position + 1))
                self.spaced.append(False)
                position += 1
            self.spaced[-1] = True
            position += random_integer(g, 1, 2)  # one or two spaces
        self.spaced[-1] = False  # the window ends here
        self.offsets.append(None)  # [SEP]
        self.tokens = [t for t, span in enumerate(self.offsets) if span is not None]

    def span(self, first: int, last: int) -> tuple[int, int]:
        """The characters from the start of context token ``first`` to the end of context token ``last``."""
        return self.offsets[self.tokens[first]][0], self.offsets[self.tokens[last]][1]


def char_span_to_token_span_cases() -> list[Case]:
    """Windows of [CLS] question [SEP] context [SEP] (the sizes drawn) and answers aligned with the
    tokens, starting or ending inside a piece, ending where the next piece begins, starting in a space,
    at the first and the last context token, before and after the window, in whitespace only, one
    character long, and a window of context tokens only."""
    g = generator_for("char_span_to_token_span")

    def window(first_char=0, prefix=None):
        prefix = random_integer(g, 3, 12) if prefix is None else prefix
        return _Window(g, random_integer(g, 6, 14), prefix, first_char)

    def pick(options):
        return options[random_integer(g, 0, len(options) - 1)]

    def case(description, window, start_char, end_char):
        return Case(description, (window.offsets, start_char, end_char))

    cases = []
    w = window()
    ends = [k for k in range(1, len(w.tokens) - 1) if w.spaced[k]]  # a space follows: no piece begins at the end
    last = pick(ends)
    first = random_integer(g, 1, last)
    cases.append(case("an answer that starts and ends at token boundaries, a space after it", w, *w.span(first, last)))
    w = window()
    long_tokens = [k for k in range(len(w.tokens) - 1) if w.offsets[w.tokens[k]][1] - w.offsets[w.tokens[k]][0] >= 2]
    first = pick(long_tokens)
    start, _ = w.offsets[w.tokens[first]]
    last = pick([k for k in range(first + 1, len(w.tokens)) if w.spaced[k]] or [len(w.tokens) - 1])
    cases.append(case("an answer that starts inside a word piece", w,
                      start + random_integer(g, 1, w.offsets[w.tokens[first]][1] - start - 1), w.span(first, last)[1]))
    w = window()
    last = pick([k for k in range(1, len(w.tokens)) if w.offsets[w.tokens[k]][1] - w.offsets[w.tokens[k]][0] >= 2])
    first = random_integer(g, 0, last - 1)
    begin, end = w.offsets[w.tokens[last]]
    cases.append(case("an answer that ends inside a word piece", w, w.span(first, last)[0],
                      begin + random_integer(g, 1, end - begin - 1)))
    w = window()
    joined = [k for k in range(len(w.tokens) - 1) if not w.spaced[k]] or [len(w.tokens) - 2]
    last = pick(joined)
    first = random_integer(g, 0, last)
    cases.append(case("an answer that ends where the next piece begins (no space between them): end_char is "
                      "that piece's first character", w, *w.span(first, last)))
    w = window()
    first = pick([k for k in range(1, len(w.tokens)) if w.spaced[k - 1]])
    last = random_integer(g, first, len(w.tokens) - 1)
    start, end = w.span(first, last)
    cases.append(case("an answer whose first character is the space before a word", w, start - 1, end))
    w = window()
    last = random_integer(g, 0, len(w.tokens) - 1)
    cases.append(case("an answer that starts at the first context token, right after the question", w,
                      *w.span(0, last)))
    w = window()
    first = random_integer(g, 0, len(w.tokens) - 1)
    cases.append(case("an answer that ends at the last context token of the window", w,
                      *w.span(first, len(w.tokens) - 1)))
    w = window(first_char=random_integer(g, 40, 400))
    start = w.offsets[w.tokens[0]][0] - random_integer(g, 2, 30)
    cases.append(case("a window that begins later in the context: the answer starts before its first token", w,
                      start, w.span(0, random_integer(g, 0, len(w.tokens) - 1))[1]))
    w = window()
    first = random_integer(g, 0, len(w.tokens) - 1)
    end = w.offsets[w.tokens[-1]][1] + random_integer(g, 1, 30)
    cases.append(case("an answer that ends after the last token of the window", w, w.span(first, first)[0], end))
    w = window()
    k = pick([k for k in range(len(w.tokens) - 1) if w.spaced[k]])
    gap = w.offsets[w.tokens[k]][1], w.offsets[w.tokens[k + 1]][0]
    cases.append(case("an answer of whitespace only, between two words: no token lies in it", w, *gap))
    w = window()
    k = random_integer(g, 0, len(w.tokens) - 1)
    start, _ = w.offsets[w.tokens[k]]
    cases.append(case("an answer of one character, the first of a token", w, start, start + 1))
    w = window(prefix=0)
    first = random_integer(g, 0, len(w.tokens) - 2)
    last = random_integer(g, first, len(w.tokens) - 2)
    cases.append(case("a window of context tokens only (no question, no [CLS]) but a last [SEP]", w,
                      *w.span(first, last)))
    return cases


def _context(offsets):
    """(position, (start, end)) of each context token."""
    found = []
    for t, span in enumerate(offsets):
        if span is not None:
            found.append((t, span))
    return found


def _token_span_variant(*, first_rule="ends_after", last_rule="starts_before", inclusive_end=False, check_window=True,
                        check_order=True, exclusive_result=False):
    """A char_span_to_token_span with one of the typical mistakes, chosen by the keyword arguments."""

    def char_span_to_token_span(offsets, start_char, end_char):
        context = _context(offsets)
        if check_window and (context[0][1][0] > start_char or context[-1][1][1] < end_char):
            return None
        first_rules = {"ends_after": lambda span: span[1] > start_char,
                       "starts_at_or_after": lambda span: span[0] >= start_char}
        last_rules = {"starts_before": lambda span: span[0] < end_char or (inclusive_end and span[0] == end_char),
                      "ends_before": lambda span: span[1] <= end_char}
        starts = [t for t, span in context if first_rules[first_rule](span)]
        ends = [t for t, span in context if last_rules[last_rule](span)]
        if not starts or not ends:
            return None
        start, end = starts[0], ends[-1]
        if check_order and start > end:
            return None
        return (start, end + 1) if exclusive_result else (start, end)

    return char_span_to_token_span


def _token_span_by_containment(offsets, start_char, end_char):
    """The tokens that contain the first and the last character of the answer; None when one has none."""
    start = end = None
    for t, span in _context(offsets):
        if span[0] <= start_char < span[1]:
            start = t
        if span[0] < end_char <= span[1]:
            end = t
    return None if start is None or end is None else (start, end)


def _token_span_unpacking_none(offsets, start_char, end_char):
    start = end = None
    for t, (begin, finish) in enumerate(offsets):  # TypeError on the None of [CLS]
        if start is None and finish > start_char:
            start = t
        if begin < end_char:
            end = t
    return start, end


def _token_span_indexing_none(offsets, start_char, end_char):
    start = next(t for t in range(len(offsets)) if offsets[t][1] > start_char)  # TypeError on the None of [CLS]
    end = max(t for t in range(len(offsets)) if offsets[t][0] < end_char)
    return start, end


NONE_OFFSET_HINT = ("the tokens whose offset is None ([CLS], the question, [SEP], padding) are not in the "
                    "context: skip them (if span is None: continue).")

CHAR_SPAN_TO_TOKEN_SPAN_MISTAKES = (
    Mistake(_token_span_unpacking_none, NONE_OFFSET_HINT),
    Mistake(_token_span_indexing_none, NONE_OFFSET_HINT),
    Mistake(_token_span_variant(inclusive_end=True),
            "end_char is excluded (the answer is context[start_char:end_char]): the last token is the last one "
            "that begins BEFORE end_char (start < end_char), not at it."),
    Mistake(_token_span_variant(exclusive_result=True),
            "both token positions are inclusive: return (first token, last token), not (first, last + 1)."),
    Mistake(_token_span_variant(last_rule="ends_before"),
            "a token the answer covers only in part still belongs to the span: the last token is the last one "
            "that begins before end_char, even when it ends after it."),
    Mistake(_token_span_variant(first_rule="starts_at_or_after"),
            "a token the answer covers only in part still belongs to the span: the first token is the first one "
            "that ends after start_char (end > start_char), even when the answer begins inside it."),
    Mistake(_token_span_by_containment,
            "a character of the answer may lie in no token (a space before a word): the first token is the first "
            "one that ends after start_char, the last one the last that begins before end_char."),
    Mistake(_token_span_variant(check_window=False),
            "when the answer is not wholly inside this window's context tokens (a character of it before the first "
            "one or after the last one), return None: the window does not hold the answer."),
    Mistake(_token_span_variant(check_order=False),
            "when no token lies in the answer (it is whitespace only), the first token comes after the last one: "
            "return None, not a span whose start is after its end."),
)


def _validate_token_span(output) -> str | None:
    if output is None:
        return None
    if (not isinstance(output, tuple) or len(output) != 2
            or not all(isinstance(t, int) and not isinstance(t, bool) for t in output)):
        return f"output: you returned {output!r}; return a tuple (start_token, end_token) of two ints, or None."
    return None


CHAR_SPAN_TO_TOKEN_SPAN = Exercise("char_span_to_token_span", reference.char_span_to_token_span,
                                   char_span_to_token_span_cases, mistakes=CHAR_SPAN_TO_TOKEN_SPAN_MISTAKES,
                                   forbidden=CHAR_SPAN_TO_TOKEN_SPAN_FORBIDDEN, validate=_validate_token_span,
                                   summary="""
                                   Compare ``char_span_to_token_span(offsets, start_char, end_char)`` with
                                   :func:`bertlab.tasks.char_span_to_token_span`.

                                   Cases: drawn windows of [CLS] question [SEP] context [SEP] (words of several pieces,
                                   punctuation marks joined to words); answers at token boundaries, starting or ending
                                   inside a piece, ending where the next piece begins, starting on a space, at the first
                                   and the last context token, starting before or ending after the window (None), of
                                   whitespace only (None), of one character; a window without a question. Exact
                                   comparison (a tuple of two ints, or None). Forbidden: the reference,
                                   ``squad_windows`` and Hugging Face's ``BatchEncoding.char_to_token``.
                                   """)


# --------------------------------------------------------------------------------------------------
# best_span
# --------------------------------------------------------------------------------------------------

BEST_SPAN_FORBIDDEN = (reference.best_span,)


def _context_mask(question: int, context: int, padding: int) -> torch.Tensor:
    """(N,) bool, True on the context of [CLS] question [SEP] context [SEP] padding."""
    return torch.tensor([False] * (question + 2) + [True] * context + [False] * (1 + padding))


def best_span_cases() -> list[Case]:
    """Sequences of [CLS] question [SEP] context [SEP] padding (the sizes drawn) whose scores are random,
    lower outside the context (as a trained model's), with peaks placed so that each rule decides: first
    a batch whose first sequence has its best start after its best end and whose second has its best pair
    too long (the best start and the best end taken separately break both rules), then one sequence, a
    batch, the best start after the best end, the highest scores on the question or on [SEP] and padding,
    a best pair too long, a pair of max_answer_length + 1 tokens beating one of max_answer_length, negative
    scores only, two leading axes, float64, max_answer_length=1 and a context of one token."""
    g = generator_for("best_span")
    peak = 10.0

    def sequence(question=None, context=None, padding=None):
        question = random_integer(g, 2, 8) if question is None else question
        context = random_integer(g, 8, 30) if context is None else context
        padding = random_integer(g, 0, 5) if padding is None else padding
        return _context_mask(question, context, padding)

    def scores(mask):
        """Start and end scores: N(0, 1) on the context, 4 lower elsewhere."""
        outside = torch.where(mask, 0.0, -4.0)
        return random_normal(g, *mask.shape) + outside, random_normal(g, *mask.shape) + outside

    def context_positions(mask):
        return mask.nonzero().flatten().tolist()

    def case(description, start_logits, end_logits, mask, **kwargs):
        return Case(description, (start_logits, end_logits, mask), kwargs)

    def too_long(start_logits, end_logits, positions, limit):
        """Peaks at a start and at an end limit + 1 to limit + 6 tokens after it; returns the start."""
        first = random_integer(g, 0, len(positions) - limit - 7)
        start_logits[positions[first]] += peak
        end_logits[positions[first + limit + random_integer(g, 1, 6)]] += peak
        return positions[first]

    def reversed_peaks(start_logits, end_logits, positions, closer_than=None):
        """The highest start score after the highest end score (fewer than ``closer_than`` tokens after
        it, when given); returns both positions."""
        if closer_than is None:
            early = random_integer(g, 0, len(positions) - 3)
            late = random_integer(g, early + 1, len(positions) - 1)
        else:
            early = random_integer(g, 0, len(positions) - closer_than)
            late = random_integer(g, early + 1, early + closer_than - 1)
        start_logits[positions[late]] += peak
        end_logits[positions[early]] += peak
        return positions[late], positions[early]

    cases = []
    limit, width, question = random_integer(g, 3, 8), random_integer(g, 30, 45), random_integer(g, 2, 6)
    masks = torch.stack([_context_mask(question, width - question - 3, 0)] * 2)
    start_logits, end_logits = scores(masks)
    # the peaks of sequence 0 closer than the limit: a best_span that keeps e <= s instead of s <= e returns
    # (late, early) here, which no other mistake returns, and so gets its own hint
    late, early = reversed_peaks(start_logits[0], end_logits[0], context_positions(masks[0]), closer_than=limit)
    first = too_long(start_logits[1], end_logits[1], context_positions(masks[1]), limit)
    cases.append(case(f"a batch (2, {width}), max_answer_length={limit}: in sequence 0 the highest start score (at "
                      f"{late}) comes after the highest end score (at {early}); in sequence 1 the pair of highest "
                      f"scores starts at {first} and is longer than {limit} tokens", start_logits, end_logits, masks,
                      max_answer_length=limit))
    mask = sequence()
    cases.append(case(f"one sequence of {len(mask)} tokens: [CLS] question [SEP] context [SEP] padding, "
                      "max_answer_length not given (30)", *scores(mask), mask))
    batch, width = random_integer(g, 2, 5), random_integer(g, 20, 40)
    masks = torch.stack([_context_mask(q, c, width - q - c - 3) for q, c in
                         ((random_integer(g, 2, 8), random_integer(g, 6, width - 11)) for _ in range(batch))])
    cases.append(case(f"a batch ({batch}, {width}) with questions and contexts of several lengths",
                      *scores(masks), masks))
    mask = sequence()
    start_logits, end_logits = scores(mask)
    late, early = reversed_peaks(start_logits, end_logits, context_positions(mask))
    cases.append(case(f"{len(mask)} tokens; the highest start score (at {late}) comes after the highest end score "
                      f"(at {early})", start_logits, end_logits, mask))
    question = random_integer(g, 3, 8)
    mask = sequence(question=question)
    start_logits, end_logits = scores(mask)
    first = random_integer(g, 0, question - 1)
    start_logits[first] += peak
    end_logits[random_integer(g, first, question + 1)] += peak
    cases.append(case(f"{len(mask)} tokens; the highest start and end scores are on [CLS] and the question "
                      f"(question of {question} tokens)", start_logits, end_logits, mask))
    mask = sequence(question=random_integer(g, 2, 8))
    start_logits, end_logits = scores(mask)
    start_logits[random_integer(g, 0, context_positions(mask)[0] - 1)] += peak
    cases.append(case(f"{len(mask)} tokens; the highest start score is on [CLS], the question or its [SEP]",
                      start_logits, end_logits, mask))
    padding = random_integer(g, 1, 5)
    mask = sequence(padding=padding)
    start_logits, end_logits = scores(mask)
    end_logits[random_integer(g, len(mask) - padding - 1, len(mask) - 1)] += peak
    cases.append(case(f"{len(mask)} tokens; the highest end score is on the last [SEP] or the padding",
                      start_logits, end_logits, mask))
    limit = random_integer(g, 2, 8)
    mask = sequence(context=random_integer(g, limit + 10, 40))
    start_logits, end_logits = scores(mask)
    first = too_long(start_logits, end_logits, context_positions(mask), limit)
    cases.append(case(f"{len(mask)} tokens, max_answer_length={limit}; the pair of highest scores starts at {first} "
                      "and is longer than that", start_logits, end_logits, mask, max_answer_length=limit))
    limit = random_integer(g, 3, 10)
    mask = sequence(context=random_integer(g, limit + 6, 40))
    start_logits, end_logits = scores(mask)
    positions = context_positions(mask)
    first = random_integer(g, 0, len(positions) - limit - 2)
    # set, not added to the noise, so that the order of the two pairs holds whatever the noise
    start_logits[positions[first]] = peak
    end_logits[positions[first + limit]] = peak + 4.0  # a span of limit + 1 tokens: too long
    end_logits[positions[first + limit - 1]] = peak  # a span of exactly limit tokens: the answer
    cases.append(case(f"{len(mask)} tokens, max_answer_length={limit}; the best pair has {limit + 1} tokens, the "
                      f"next best {limit}", start_logits, end_logits, mask, max_answer_length=limit))
    mask = sequence()
    start_logits, end_logits = (-(logits.abs() + 1.0) for logits in scores(mask))
    cases.append(case(f"{len(mask)} tokens, every score negative", start_logits, end_logits, mask))
    outer, batch, width = random_integer(g, 2, 3), random_integer(g, 2, 3), random_integer(g, 16, 30)
    masks = torch.stack([_context_mask(q, width - q - 3, 0) for q in
                         torch.randint(2, 8, (outer * batch,), generator=g).tolist()]).reshape(outer, batch, width)
    limit = random_integer(g, 5, 20)
    cases.append(case(f"start_logits ({outer}, {batch}, {width}): two leading axes, max_answer_length={limit}",
                      *scores(masks), masks, max_answer_length=limit))
    batch, width = random_integer(g, 2, 4), random_integer(g, 12, 30)
    masks = torch.stack([_context_mask(q, width - q - 3, 0) for q in
                         torch.randint(2, 8, (batch,), generator=g).tolist()])
    start_logits, end_logits = scores(masks)
    cases.append(case(f"a batch ({batch}, {width}), float64", start_logits.double(), end_logits.double(), masks))
    mask = sequence()
    cases.append(case(f"{len(mask)} tokens, max_answer_length=1: one-token answers only", *scores(mask), mask,
                      max_answer_length=1))
    mask = sequence(context=1)
    cases.append(case(f"{len(mask)} tokens, a context of one token", *scores(mask), mask))
    return cases


def _best_span_variant(*, order=True, length="below", mask="both", fill=NEG_INF, transposed=False,
                       swap_divmod=False, separate=False):
    """A best_span with one of the typical mistakes, chosen by the keyword arguments."""

    def best_span(start_logits, end_logits, context_mask, max_answer_length=30):
        n = start_logits.shape[-1]
        context = context_mask.bool()
        if separate:  # the best start and the best end, each on its own
            return (start_logits.masked_fill(~context, NEG_INF).argmax(dim=-1),
                    end_logits.masked_fill(~context, NEG_INF).argmax(dim=-1))
        if transposed:
            scores = start_logits.unsqueeze(-2) + end_logits.unsqueeze(-1)
        else:
            scores = start_logits.unsqueeze(-1) + end_logits.unsqueeze(-2)  # (..., N, N)
        positions = torch.arange(n)
        span_length = positions[None, :] - positions[:, None]  # e - s
        limit = {"below": span_length < max_answer_length, "at_most": span_length <= max_answer_length,
                 "none": torch.ones(n, n, dtype=torch.bool)}[length]
        band = limit & ((span_length >= 0) if order else torch.ones(n, n, dtype=torch.bool))
        rows = context.unsqueeze(-1) if mask in ("both", "starts") else True
        columns = context.unsqueeze(-2) if mask in ("both", "ends") else True
        best = scores.masked_fill(~(band & rows & columns), fill).flatten(-2).argmax(dim=-1)
        return (best % n, best // n) if swap_divmod else (best // n, best % n)

    return best_span


def _best_span_reversed_band(start_logits, end_logits, context_mask, max_answer_length=30):
    n = start_logits.shape[-1]
    scores = start_logits.unsqueeze(-1) + end_logits.unsqueeze(-2)
    positions = torch.arange(n)
    span_length = positions[:, None] - positions[None, :]  # s - e: the lower triangle
    valid = (span_length >= 0) & (span_length < max_answer_length)
    valid = valid & context_mask.unsqueeze(-1) & context_mask.unsqueeze(-2)
    best = scores.masked_fill(~valid, NEG_INF).flatten(-2).argmax(dim=-1)
    return best // n, best % n


def _one_span_per_sequence(output, case) -> bool:
    """Whether ``output`` is not a pair of tensors of the batch shape of the case (one span per sequence)."""
    batch_shape = case.args[0].shape[:-1]
    return not all(isinstance(t, torch.Tensor) and t.shape == batch_shape for t in output)


ORDER_HINT = ("a span ends at or after its start: the valid spans are 0 <= e - s < max_answer_length, with s the "
              "row and e the column of score[s, e] (the upper triangle), never e < s.")

BEST_SPAN_MISTAKES = (
    Mistake(_best_span_variant(transposed=True),
            "score[s, e] = start_logits[s] + end_logits[e]: the starts index the rows (start_logits.unsqueeze(-1)) "
            "and the ends the columns (end_logits.unsqueeze(-2))."),
    Mistake(_best_span_variant(swap_divmod=True),
            "the flat index of (s, e) in an N x N matrix is s * N + e: s = index // N and e = index % N."),
    Mistake(_best_span_variant(order=False), ORDER_HINT),
    Mistake(_best_span_reversed_band, ORDER_HINT),
    Mistake(_best_span_variant(length="at_most"),
            "a span from s to e has e - s + 1 tokens: keep e - s < max_answer_length (e - s <= max_answer_length "
            "lets one token too many through)."),
    Mistake(_best_span_variant(length="none"),
            "a span of more than max_answer_length tokens is not valid: keep e - s + 1 <= max_answer_length."),
    Mistake(_best_span_variant(separate=True),
            "pick the PAIR (s, e) that maximises start_logits[s] + end_logits[e] among the valid spans: the best "
            "start and the best end chosen separately may give an end before the start, or a span too long."),
    Mistake(_best_span_variant(mask="starts"),
            "the end must be a context token too: mask the columns (the ends) with context_mask as well as the rows."),
    Mistake(_best_span_variant(mask="ends"),
            "the start must be a context token too: mask the rows (the starts) with context_mask as well as the "
            "columns."),
    Mistake(_best_span_variant(mask="none"),
            "the answer lies in the context: a span that starts or ends on [CLS], the question, a [SEP] or the "
            "padding (context_mask False) is not valid."),
    Mistake(_best_span_variant(fill=0.0),
            "set the scores of the invalid spans to -inf, not 0: when every valid score is negative, 0 wins."),
    Symptom(_one_span_per_sequence,
            "return one span per sequence: for start_logits of shape (..., N), start and end are long tensors of "
            "shape (...). Flatten only the last two axes (flatten(-2)) and take the argmax over the last one."),
)


BEST_SPAN = Exercise("best_span", reference.best_span, best_span_cases, mistakes=BEST_SPAN_MISTAKES,
                     forbidden=BEST_SPAN_FORBIDDEN, output_names=("start", "end"),
                     summary="""
                     Compare ``best_span(start_logits, end_logits, context_mask, max_answer_length=30)`` with
                     :func:`bertlab.tasks.best_span`.

                     Cases: one sequence, batches (B, N) and (B1, B2, N) of [CLS] question [SEP] context [SEP] padding;
                     scores that put the best start after the best end, the highest scores on the question, on [SEP] or
                     padding, a best pair longer than max_answer_length, one of exactly max_answer_length + 1 tokens,
                     only negative scores; float64; max_answer_length = 1; a context of one token. The sizes are drawn.
                     Exact comparison (long tensors of shape (...)). Forbidden: the reference.
                     """)


# --------------------------------------------------------------------------------------------------
# squad_f1
# --------------------------------------------------------------------------------------------------

SQUAD_F1_FORBIDDEN = (
    reference.squad_f1,
    reference._token_f1,
    reference.squad_scores,
    "torchmetrics.functional.text.squad.squad",
    "torchmetrics.functional.text.squad._compute_f1_score",
)

#: The words the answers of the cases are made of (no article: the cases put them in on purpose).
WORDS = ("denver", "broncos", "river", "castle", "engine", "harbour", "seven", "green", "northern", "treaty",
         "library", "museum", "bridge", "winter", "coal", "parliament", "island", "french", "steam", "valley",
         "orchestra", "glacier", "railway", "copper", "emperor", "desert", "senate", "canal", "comet", "violin",
         "tower", "market", "forest", "poet", "galaxy", "reactor", "cathedral", "delta", "lantern", "meadow")
PUNCTUATION = ".,!?;:'\"()"


def squad_f1_cases() -> list[Case]:
    """Predictions and ground truths made of drawn words: one that needs the normalisation (case,
    punctuation, articles), partial overlaps with precision and recall apart, a repeated word, several
    ground truths with the best not first, no common word, a prediction that normalises to nothing, and
    the dev set's answers of several annotators."""
    g = generator_for("squad_f1")

    def words(count, avoid=()):
        options = [word for word in WORDS if word not in avoid]
        chosen = torch.randperm(len(options), generator=g)[:count].tolist()
        return [options[index] for index in chosen]

    def styled(text_words):
        """The words capitalised or in capitals, one of them (of two or more) followed by a punctuation mark:
        a text whose words are ``text_words`` once normalised, and are not all once only lower-cased."""
        out = [word.capitalize() if random_integer(g, 0, 1) else word.upper() for word in text_words]
        marked = random_integer(g, 0, len(out) - 1)
        out[marked] += random_choice(g, PUNCTUATION)
        return " ".join(out)

    cases = []
    answer = words(random_integer(g, 2, 4))
    cases.append(Case("a prediction equal to the ground truth but for capitals and punctuation",
                      (styled(answer), [" ".join(answer)])))
    shared = words(random_integer(g, 1, 3))
    truth_only = random_integer(g, 1, 3)
    truth = shared + words(truth_only, avoid=shared)
    prediction = shared + words(truth_only + random_integer(g, 1, 3), avoid=truth)  # precision below recall
    cases.append(Case("a prediction that shares some words with the ground truth (precision and recall differ)",
                      (" ".join(prediction), [" ".join(truth)])))
    answer = words(random_integer(g, 2, 4))
    article = random_choice(g, ("The", "A", "An"))
    cases.append(Case("a ground truth with an article and capitals in front of the prediction's words",
                      (" ".join(answer), [f"{article} " + styled(answer)])))
    repeated, others = words(1)[0], words(random_integer(g, 1, 2))
    times = random_integer(g, 3, 5)
    cases.append(Case(f"a prediction that repeats a word {times} times; the ground truth holds it twice",
                      (" ".join([repeated] * times + others), [" ".join([repeated, *words(1, avoid=[repeated]),
                                                                         repeated])])))
    shared = words(random_integer(g, 2, 3))
    prediction = shared + words(2, avoid=shared)
    weak = [shared[0], *words(random_integer(g, 3, 5), avoid=prediction)]
    best = shared + words(1, avoid=prediction)
    nothing = words(random_integer(g, 1, 3), avoid=prediction)
    cases.append(Case("three ground truths (several annotators): the second fits best, the third not at all",
                      (" ".join(prediction), [" ".join(weak), " ".join(best), " ".join(nothing)])))
    prediction = words(random_integer(g, 1, 4))
    cases.append(Case("a prediction with no word in common with the ground truth",
                      (" ".join(prediction), [" ".join(words(random_integer(g, 1, 4), avoid=prediction))])))
    empty = " ".join(random_choice(g, ("the", "a", "an", "The", "A")) + random_choice(g, ("", ",", ".", "!"))
                     for _ in range(random_integer(g, 1, 3)))
    cases.append(Case(f"a prediction, {empty!r}, that normalises to nothing (articles and punctuation only)",
                      (empty, [" ".join(words(random_integer(g, 1, 3)))])))
    shared = words(random_integer(g, 1, 3))
    truths = [" ".join(shared + words(random_integer(g, 0, 2), avoid=shared)) for _ in range(random_integer(g, 2, 5))]
    cases.append(Case(f"{len(truths)} ground truths sharing words with the prediction",
                      (styled(shared + words(random_integer(g, 1, 2), avoid=shared)), truths)))
    return cases


def _f1_of_words(predicted: list, truth: list, *, bag=True, harmonic=True, precision_only=False) -> float:
    common = (sum((collections.Counter(predicted) & collections.Counter(truth)).values()) if bag
              else len(set(predicted) & set(truth)))
    if common == 0:
        return 0.0
    if not harmonic:  # Jaccard: common words over all the words of both
        return common / (len(predicted) + len(truth) - common)
    precision, recall = common / len(predicted), common / len(truth)
    return precision if precision_only else 2 * precision * recall / (precision + recall)


def _squad_f1_variant(*, normalize="both", combine="max", **options):
    """A squad_f1 with one of the typical mistakes, chosen by the keyword arguments."""
    normalizers = {"both": (reference.squad_normalize, reference.squad_normalize), "none": (str, str),
                   "lower": (str.lower, str.lower), "prediction": (reference.squad_normalize, str)}

    def squad_f1(prediction, ground_truths):
        for_prediction, for_truth = normalizers[normalize]
        scores = [_f1_of_words(for_prediction(prediction).split(), for_truth(truth).split(), **options)
                  for truth in ground_truths]
        return {"max": max(scores), "first": scores[0], "mean": sum(scores) / len(scores)}[combine]

    return squad_f1


def _squad_f1_of_characters(prediction, ground_truths):
    return max(_f1_of_words(list(reference.squad_normalize(prediction)), list(reference.squad_normalize(truth)))
               for truth in ground_truths)


def _squad_f1_divides_first(prediction, ground_truths):
    scores = []
    for truth in ground_truths:
        predicted, expected = reference.squad_normalize(prediction).split(), reference.squad_normalize(truth).split()
        common = sum((collections.Counter(predicted) & collections.Counter(expected)).values())
        precision, recall = common / len(predicted), common / len(expected)
        scores.append(2 * precision * recall / (precision + recall))
    return max(scores)


def _squad_f1_in_percent(prediction, ground_truths):
    return 100 * reference.squad_f1(prediction, ground_truths)


def _squad_exact_match(prediction, ground_truths):
    return reference.squad_exact_match(prediction, ground_truths)


ZERO_COMMON_HINT = ("when the prediction and a ground truth share no word (or the prediction normalises to "
                    "nothing), their F1 is 0: check common == 0 before dividing.")

SQUAD_F1_MISTAKES = (
    Mistake(_squad_f1_variant(normalize="prediction"), "normalise the ground truths too, not only the prediction."),
    Mistake(_squad_f1_variant(normalize="none"),
            "normalise the prediction and every ground truth with squad_normalize before splitting them into words "
            "(lower case, no punctuation, no articles a, an, the)."),
    Mistake(_squad_f1_variant(normalize="lower"),
            "lower-casing is not all of SQuAD's normalisation: use squad_normalize, which also drops the punctuation "
            "and the articles a, an, the."),
    Mistake(_squad_f1_in_percent, "return F1 as a fraction in [0, 1], not a percentage."),
    Mistake(_squad_exact_match,
            "F1 gives partial credit: it compares the bags of words of the prediction and the ground truth, where "
            "exact match gives only 0 or 1."),
    Mistake(_squad_f1_divides_first, ZERO_COMMON_HINT),
    Mistake(_squad_f1_variant(harmonic=False),
            "F1 = 2 P R / (P + R), with precision P = common / (words of the prediction) and recall R = common / "
            "(words of the ground truth), not common words over all the words (Jaccard)."),
    Mistake(_squad_f1_variant(precision_only=True),
            "F1 is the harmonic mean of precision and recall, 2 P R / (P + R), not the precision alone."),
    Mistake(_squad_f1_of_characters,
            "SQuAD's F1 counts words (the normalised text split on whitespace), not characters."),
    Mistake(_squad_f1_variant(bag=False),
            "count the common words with their multiplicity, as bags: sum((Counter(prediction words) & "
            "Counter(truth words)).values()), not a set intersection."),
    Mistake(_squad_f1_variant(combine="first"),
            "score the prediction against EVERY ground truth and keep the best F1 (max), not the first one only."),
    Mistake(_squad_f1_variant(combine="mean"), "keep the best F1 over the ground truths (max), not their mean."),
)


SQUAD_F1 = Exercise("squad_f1", reference.squad_f1, squad_f1_cases, mistakes=SQUAD_F1_MISTAKES,
                    forbidden=SQUAD_F1_FORBIDDEN, dependencies={"squad_normalize": reference.squad_normalize},
                    summary="""
                    Compare ``squad_f1(prediction, ground_truths)`` with :func:`bertlab.tasks.squad_f1`.

                    The student's function runs with :func:`bertlab.tasks.squad_normalize` as its ``squad_normalize``.
                    Cases: predictions and ground truths made of drawn words, that need the normalisation (capitals,
                    punctuation, articles), overlap in part, repeat a word, have several ground truths (the best not the
                    first), share nothing, or normalise to nothing. Tolerance: the framework's defaults for a float.
                    Forbidden: the reference (its ``_token_f1`` and ``squad_scores``) and torchmetrics' SQuAD metric.
                    """)


#: The chapter whose exercises this module checks, and their records, in the order of the chapter.
CHAPTER = "10_tasks"


__getattr__ = check_functions(globals())  # check_<name> for each record above
