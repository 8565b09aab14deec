"""Mutation tests of chapter 10's checks (autograder/checks/tasks.py).

For every exercise: the check accepts the solution of the solution notebook, other correct
implementations and (with the forbid-rule lifted) the reference; it rejects typical wrong
implementations, written the way students write them, each with the hint that explains it; and calling
the reference or a library function that does the exercise's job fails with "implement this yourself",
however it was captured.
"""

import collections
from pathlib import Path

import pytest
import torch
from sklearn.metrics import accuracy_score
from torchmetrics.functional.classification import multiclass_accuracy
from torchmetrics.functional.text.squad import _compute_f1_score

import bertlab.tasks
from autograder.checks import tasks as checks
from autograder.checks.framework import CheckFailed
from bertlab.tasks import best_span as captured_best_span
from bertlab.tasks import char_span_to_token_span as captured_char_span_to_token_span
from bertlab.tasks import entity_spans as captured_entity_spans
from bertlab.tasks import squad_normalize
from bertlab.tasks import word_piece_labels as captured_word_piece_labels
from checks_helpers import MutationTests, run_solution_cells

SOLUTION = Path(__file__).resolve().parents[1] / "solutions" / "10_tasks" / "10_tasks.ipynb"
EXERCISES = ["word_piece_labels", "tagging_accuracy", "entity_spans", "char_span_to_token_span", "best_span",
             "squad_f1"]
NEG_INF = float("-inf")


@pytest.fixture(scope="module")
def solution_namespace():
    """The functions defined by the solution cells of the solution notebook, executed together."""
    return run_solution_cells(SOLUTION, {"torch": torch, "collections": collections,
                                         "squad_normalize": squad_normalize})


# --------------------------------------------------------------------------------------------------
# word_piece_labels
# --------------------------------------------------------------------------------------------------


def labels_on_every_piece(word_ids, word_labels):
    labels = []
    for word in word_ids:
        labels.append(-100 if word is None else word_labels[word])
    return labels


def labels_on_last_piece(word_ids, word_labels):
    labels = []
    for t, word in enumerate(word_ids):
        following = word_ids[t + 1] if t + 1 < len(word_ids) else None
        labels.append(word_labels[word] if word is not None and word != following else -100)
    return labels


def special_tokens_labelled_zero(word_ids, word_labels):
    labels, previous = [], None
    for word in word_ids:
        if word is None:
            labels.append(0)
        elif word != previous:
            labels.append(word_labels[word])
        else:
            labels.append(-100)
        previous = word
    return labels


def previous_of_position_zero(word_ids, word_labels):
    return [word_labels[word] if word is not None and word != word_ids[t - 1] else -100
            for t, word in enumerate(word_ids)]


def ignored_as_minus_one(word_ids, word_labels):
    labels, previous = [], None
    for word in word_ids:
        labels.append(word_labels[word] if word is not None and word != previous else -1)
        previous = word
    return labels


def labels_as_tensor(word_ids, word_labels):
    labels = torch.full((len(word_ids),), -100)
    for t, word in enumerate(word_ids):
        if word is not None and (t == 0 or word_ids[t - 1] != word):
            labels[t] = word_labels[word]
    return labels


def labels_with_seen_words(word_ids, word_labels):
    seen, labels = set(), []
    for word in word_ids:
        if word is None or word in seen:
            labels.append(-100)
        else:
            seen.add(word)
            labels.append(word_labels[word])
    return labels


# --------------------------------------------------------------------------------------------------
# tagging_accuracy
# --------------------------------------------------------------------------------------------------


def accuracy_over_every_position(logits, labels, ignore_index=-100):
    return (logits.argmax(-1) == labels).float().mean()


def accuracy_mean_of_sentences(logits, labels, ignore_index=-100):
    labelled = labels != ignore_index
    right = ((logits.argmax(-1) == labels) & labelled).sum(-1)
    return (right / labelled.sum(-1)).mean()


def accuracy_ignoring_minus_100(logits, labels, ignore_index=-100):
    keep = labels != -100
    return (logits.argmax(-1)[keep] == labels[keep]).float().mean()


def accuracy_over_positions(logits, labels, ignore_index=-100):
    keep = labels != ignore_index
    return (logits.argmax(1)[keep] == labels[keep]).float().mean()


def accuracy_of_maximum_scores(logits, labels, ignore_index=-100):
    keep = labels != ignore_index
    return (logits.max(-1).values[keep] == labels[keep]).float().mean()


def number_of_right_words(logits, labels, ignore_index=-100):
    keep = labels != ignore_index
    return (logits.argmax(-1)[keep] == labels[keep]).sum()


def accuracy_by_selection(logits, labels, ignore_index=-100):
    keep = labels != ignore_index
    return (logits.argmax(dim=-1)[keep] == labels[keep]).float().mean()


def accuracy_flattened(logits, labels, ignore_index=-100):
    predictions = logits.reshape(-1, logits.shape[-1]).argmax(dim=1)
    flat = labels.reshape(-1)
    keep = flat != ignore_index
    return torch.count_nonzero(predictions[keep] == flat[keep]) / torch.count_nonzero(keep)


def accuracy_with_torchmetrics(logits, labels, ignore_index=-100):
    classes = logits.shape[-1]
    return multiclass_accuracy(logits.reshape(-1, classes), labels.reshape(-1), num_classes=classes, average="micro",
                               ignore_index=ignore_index)


def accuracy_with_scikit_learn(logits, labels, ignore_index=-100):
    keep = labels != ignore_index
    return torch.tensor(accuracy_score(labels[keep].numpy(), logits.argmax(-1)[keep].numpy()), dtype=torch.float32)


# --------------------------------------------------------------------------------------------------
# entity_spans
# --------------------------------------------------------------------------------------------------


def spans_with_last_word_as_end(tags):
    spans, current = [], None
    for t, tag in enumerate(tags):
        if current is not None and not (tag.startswith("I-") and tag[2:] == current[0]):
            spans.append(tuple(current))
            current = None
        if tag != "O" and current is None:
            current = [tag[2:], t, t]
        elif current is not None:
            current[2] = t
    if current is not None:
        spans.append(tuple(current))
    return spans


def spans_started_by_b_only(tags):
    spans, current = [], None
    for t, tag in enumerate(tags):
        if tag.startswith("B-"):
            if current:
                spans.append(tuple(current))
            current = [tag[2:], t, t + 1]
        elif tag.startswith("I-") and current:
            current[2] = t + 1
        elif current:
            spans.append(tuple(current))
            current = None
    if current:
        spans.append(tuple(current))
    return spans


def spans_without_the_last(tags):
    spans, kind, start = [], None, 0
    for t, tag in enumerate(tags):
        if kind is not None and tag != f"I-{kind}":
            spans.append((kind, start, t))
            kind = None
        if tag != "O" and kind is None:
            kind, start = tag[2:], t
    return spans


def spans_typed_by_their_first_tag(tags):
    spans, first, start = [], None, 0
    for t, tag in enumerate([*tags, "O"]):
        if first is not None and tag != f"I-{first[2:]}":
            spans.append((first, start, t))
            first = None
        if tag != "O" and first is None:
            first, start = tag, t
    return spans


def spans_of_runs_of_one_type(tags):
    spans, kind, start = [], None, 0
    for t, tag in enumerate([*tags, "O"]):
        tag_type = None if tag == "O" else tag.split("-", 1)[1]
        if tag_type != kind:
            if kind is not None:
                spans.append((kind, start, t))
            kind, start = tag_type, t
    return spans


def spans_comparing_with_the_previous_tag(tags):
    spans = []
    for t in range(len(tags)):
        tag, previous = tags[t], tags[t - 1]
        if tag == "O" or (tag.startswith("I-") and previous[2:] == tag[2:]):
            continue
        end = t + 1
        while end < len(tags) and tags[end] == "I-" + tag[2:]:
            end += 1
        spans.append((tag[2:], t, end))
    return spans


def spans_of_strict_bio(tags):
    spans, current = [], None
    for t, tag in enumerate(tags):
        if current is not None and tag == f"I-{current[0]}":
            current[2] = t + 1
            continue
        if current is not None:
            spans.append(tuple(current))
            current = None
        if tag.startswith("B-"):
            current = [tag[2:], t, t + 1]
    if current is not None:
        spans.append(tuple(current))
    return spans


def spans_as_lists(tags):
    return [[kind, start, end] for kind, start, end in spans_from_starts(tags)]


def spans_from_starts(tags):
    """The starts first (B-T, or I-T whose previous tag is not of type T), then each start's I-T tags."""
    types = [None if tag == "O" else tag[2:] for tag in tags]
    starts = [t for t, tag in enumerate(tags) if tag.startswith("B-")
              or (tag.startswith("I-") and (t == 0 or types[t - 1] != types[t]))]
    spans = []
    for start in starts:
        end = start + 1
        while end < len(tags) and tags[end] == f"I-{types[start]}":
            end += 1
        spans.append((types[start], start, end))
    return spans


def spans_by_conlleval_rules(tags):
    """conlleval's startOfChunk and endOfChunk, for B, I and O."""
    spans, previous_prefix, previous_type, start = [], "O", "", 0
    for t, tag in enumerate([*tags, "O"]):
        prefix, _, tag_type = tag.partition("-")
        ends = previous_prefix != "O" and (prefix in ("B", "O") or tag_type != previous_type)
        begins = prefix == "B" or (prefix == "I" and (previous_prefix == "O" or tag_type != previous_type))
        if ends:
            spans.append((previous_type, start, t))
        if begins:
            start = t
        previous_prefix, previous_type = prefix, tag_type
    return spans


def spans_with_captured_reference(tags):
    return captured_entity_spans(tags)


def spans_with_seqeval(tags):
    from seqeval.metrics.sequence_labeling import get_entities

    return [(kind, start, end + 1) for kind, start, end in get_entities(tags)]


# --------------------------------------------------------------------------------------------------
# char_span_to_token_span
# --------------------------------------------------------------------------------------------------


def context_tokens(offsets):
    return [(t, span) for t, span in enumerate(offsets) if span is not None]


def token_span_end_exclusive(offsets, start_char, end_char):
    context = context_tokens(offsets)
    if context[0][1][0] > start_char or context[-1][1][1] < end_char:
        return None
    start = min(t for t, (_, end) in context if end > start_char)
    end = max(t for t, (begin, _) in context if begin < end_char)
    return (start, end + 1) if start <= end else None


def token_span_by_containment(offsets, start_char, end_char):
    start = end = None
    for t, span in enumerate(offsets):
        if span is None:
            continue
        begin, finish = span
        if begin <= start_char < finish:
            start = t
        if begin < end_char <= finish:
            end = t
    if start is None or end is None:
        return None
    return start, end


def token_span_end_char_included(offsets, start_char, end_char):
    context = context_tokens(offsets)
    if context[0][1][0] > start_char or context[-1][1][1] < end_char:
        return None
    start = min(t for t, (_, end) in context if end > start_char)
    end = max(t for t, (begin, _) in context if begin <= end_char)
    return (start, end) if start <= end else None


def token_span_without_window_check(offsets, start_char, end_char):
    context = context_tokens(offsets)
    start = next(t for t, (_, end) in context if end > start_char)
    end = [t for t, (begin, _) in context if begin < end_char][-1]
    return (start, end) if start <= end else None


def token_span_reading_every_offset(offsets, start_char, end_char):
    start, end = None, None
    for t, (begin, finish) in enumerate(offsets):
        if start is None and finish > start_char:
            start = t
        if begin < end_char:
            end = t
    return start, end


def token_span_as_list(offsets, start_char, end_char):
    context = context_tokens(offsets)
    if context[0][1][0] > start_char or context[-1][1][1] < end_char:
        return None
    start = min(t for t, (_, end) in context if end > start_char)
    end = max(t for t, (begin, _) in context if begin < end_char)
    return [start, end] if start <= end else None


def token_span_by_scanning(offsets, start_char, end_char):
    positions = [t for t in range(len(offsets)) if offsets[t] is not None]
    if offsets[positions[0]][0] > start_char or offsets[positions[-1]][1] < end_char:
        return None
    start = positions[0]
    while offsets[start] is None or offsets[start][1] <= start_char:
        start += 1
    end = positions[-1]
    while offsets[end] is None or offsets[end][0] >= end_char:
        end -= 1
    return (start, end) if start <= end else None


def token_span_with_captured_reference(offsets, start_char, end_char):
    return captured_char_span_to_token_span(offsets, start_char, end_char)


# --------------------------------------------------------------------------------------------------
# best_span
# --------------------------------------------------------------------------------------------------


def span_scores(start_logits, end_logits, context_mask, max_answer_length, *, order=True, within=lambda d, m: d < m,
                starts_masked=True, ends_masked=True):
    """The (..., N, N) scores of a student's best_span, and N; invalid spans -inf."""
    n = start_logits.shape[-1]
    scores = start_logits[..., :, None] + end_logits[..., None, :]
    i = torch.arange(n)
    distance = i[None, :] - i[:, None]
    valid = within(distance, max_answer_length)
    if order:
        valid = valid & (distance >= 0)
    if starts_masked:
        valid = valid & context_mask[..., :, None]
    if ends_masked:
        valid = valid & context_mask[..., None, :]
    return scores.masked_fill(~valid, NEG_INF), n


def pick(scores, n):
    best = scores.flatten(-2).argmax(-1)
    return best // n, best % n


def best_span_separately(start_logits, end_logits, context_mask, max_answer_length=30):
    start = start_logits.masked_fill(~context_mask, NEG_INF).argmax(-1)
    end = end_logits.masked_fill(~context_mask, NEG_INF).argmax(-1)
    return start, end


def best_span_end_before_start(start_logits, end_logits, context_mask, max_answer_length=30):
    return pick(*span_scores(start_logits, end_logits, context_mask, max_answer_length, order=False))


def best_span_one_token_too_long(start_logits, end_logits, context_mask, max_answer_length=30):
    return pick(*span_scores(start_logits, end_logits, context_mask, max_answer_length,
                             within=lambda d, m: d <= m))


def best_span_any_length(start_logits, end_logits, context_mask, max_answer_length=30):
    return pick(*span_scores(start_logits, end_logits, context_mask, max_answer_length,
                             within=lambda d, m: torch.ones_like(d, dtype=torch.bool)))


def best_span_starts_masked_only(start_logits, end_logits, context_mask, max_answer_length=30):
    return pick(*span_scores(start_logits, end_logits, context_mask, max_answer_length, ends_masked=False))


def best_span_multiplied_by_mask(start_logits, end_logits, context_mask, max_answer_length=30):
    n = start_logits.shape[-1]
    i = torch.arange(n)
    distance = i[None, :] - i[:, None]
    valid = (distance >= 0) & (distance < max_answer_length) & context_mask[..., :, None] & context_mask[..., None, :]
    scores = (start_logits[..., :, None] + end_logits[..., None, :]) * valid
    return pick(scores, n)


def best_span_over_the_whole_batch(start_logits, end_logits, context_mask, max_answer_length=30):
    scores, n = span_scores(start_logits, end_logits, context_mask, max_answer_length)
    best = scores.flatten().argmax()
    return best // n % n, best % n


def best_span_divmod_swapped(start_logits, end_logits, context_mask, max_answer_length=30):
    scores, n = span_scores(start_logits, end_logits, context_mask, max_answer_length)
    best = scores.flatten(-2).argmax(-1)
    return best % n, best // n


def best_span_ends_on_rows(start_logits, end_logits, context_mask, max_answer_length=30):
    n = start_logits.shape[-1]
    scores = start_logits[..., None, :] + end_logits[..., :, None]
    i = torch.arange(n)
    distance = i[None, :] - i[:, None]
    valid = (distance >= 0) & (distance < max_answer_length) & context_mask[..., :, None] & context_mask[..., None, :]
    return pick(scores.masked_fill(~valid, NEG_INF), n)


def best_span_by_triangles(start_logits, end_logits, context_mask, max_answer_length=30):
    n = start_logits.shape[-1]
    ones = torch.ones(n, n, dtype=torch.bool)
    band = torch.triu(ones) & ~torch.triu(ones, diagonal=max_answer_length)
    valid = band & context_mask.unsqueeze(-1) & context_mask.unsqueeze(-2)
    scores = torch.where(valid, start_logits.unsqueeze(-1) + end_logits.unsqueeze(-2), NEG_INF)
    best = scores.reshape(*scores.shape[:-2], n * n).argmax(dim=-1)
    return torch.div(best, n, rounding_mode="floor"), torch.remainder(best, n)


def best_span_by_loops(start_logits, end_logits, context_mask, max_answer_length=30):
    """Every valid pair tried, sequence by sequence, the first best kept (as argmax does)."""
    n = start_logits.shape[-1]
    flat_start, flat_end = start_logits.reshape(-1, n), end_logits.reshape(-1, n)
    flat_mask = context_mask.reshape(-1, n)
    starts, ends = [], []
    for row in range(flat_start.shape[0]):
        best, span = None, None
        for s in range(n):
            for e in range(s, min(n, s + max_answer_length)):
                if flat_mask[row, s] and flat_mask[row, e]:
                    score = flat_start[row, s] + flat_end[row, e]
                    if best is None or score > best:
                        best, span = score, (s, e)
        starts.append(span[0])
        ends.append(span[1])
    shape = start_logits.shape[:-1]
    return torch.tensor(starts).reshape(shape), torch.tensor(ends).reshape(shape)


def best_span_with_default_argument(start_logits, end_logits, context_mask, max_answer_length=30,
                                    implementation=captured_best_span):
    return implementation(start_logits, end_logits, context_mask, max_answer_length)


# --------------------------------------------------------------------------------------------------
# squad_f1
# --------------------------------------------------------------------------------------------------


def overlap_f1(predicted, truth):
    common = sum((collections.Counter(predicted) & collections.Counter(truth)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(predicted), common / len(truth)
    return 2 * precision * recall / (precision + recall)


def f1_without_normalisation(prediction, ground_truths):
    return max(overlap_f1(prediction.split(), truth.split()) for truth in ground_truths)


def f1_lower_cased(prediction, ground_truths):
    return max(overlap_f1(prediction.lower().split(), truth.lower().split()) for truth in ground_truths)


def f1_of_sets(prediction, ground_truths):
    scores = []
    predicted = squad_normalize(prediction).split()
    for truth in ground_truths:
        expected = squad_normalize(truth).split()
        common = len(set(predicted) & set(expected))
        if common == 0:
            scores.append(0.0)
            continue
        precision, recall = common / len(predicted), common / len(expected)
        scores.append(2 * precision * recall / (precision + recall))
    return max(scores)


def f1_of_the_first_truth(prediction, ground_truths):
    return overlap_f1(squad_normalize(prediction).split(), squad_normalize(ground_truths[0]).split())


def f1_dividing_by_zero(prediction, ground_truths):
    best = 0.0
    for truth in ground_truths:
        predicted, expected = squad_normalize(prediction).split(), squad_normalize(truth).split()
        common = sum((collections.Counter(predicted) & collections.Counter(expected)).values())
        precision = common / len(predicted)
        recall = common / len(expected)
        best = max(best, 2 * precision * recall / (precision + recall))
    return best


def f1_of_jaccard(prediction, ground_truths):
    scores = []
    for truth in ground_truths:
        predicted, expected = squad_normalize(prediction).split(), squad_normalize(truth).split()
        common = sum((collections.Counter(predicted) & collections.Counter(expected)).values())
        scores.append(common / (len(predicted) + len(expected) - common) if common else 0.0)
    return max(scores)


def f1_in_percent(prediction, ground_truths):
    return 100 * max(overlap_f1(squad_normalize(prediction).split(), squad_normalize(truth).split())
                     for truth in ground_truths)


def f1_by_dictionaries(prediction, ground_truths):
    predicted = collections.Counter(squad_normalize(prediction).split())
    best = 0.0
    for truth in ground_truths:
        expected = collections.Counter(squad_normalize(truth).split())
        common = sum(min(count, expected[word]) for word, count in predicted.items())
        if common:
            best = max(best, 2 * common / (sum(predicted.values()) + sum(expected.values())))
    return best


def f1_with_torchmetrics(prediction, ground_truths):
    return max(float(_compute_f1_score(prediction, truth)) for truth in ground_truths)


def f1_with_the_reference_helper(prediction, ground_truths):
    return max(bertlab.tasks._token_f1(prediction, truth) for truth in ground_truths)


class TestTasksChecks(MutationTests):
    """The shared mutation tests (tests/checks_helpers.py) of this chapter's checks."""

    checks = checks
    references = {name: getattr(bertlab.tasks, name) for name in EXERCISES}
    mutants = {
        "word_piece_labels": [
            (labels_on_every_piece, "only the first piece of a word carries the word's label"),
            (labels_on_last_piece, "label the FIRST piece of each word"),
            (special_tokens_labelled_zero, "[CLS], [SEP] and padding come from no word"),
            (previous_of_position_zero, "at t = 0 there is no previous token"),
            (ignored_as_minus_one, "not -1"),
            (labels_as_tensor, "return a list of ints"),
        ],
        "tagging_accuracy": [
            (accuracy_over_every_position, "divide by the number of labelled positions"),
            (accuracy_mean_of_sentences, "count over all the words of the batch"),
            (accuracy_ignoring_minus_100, "not always -100"),
            (accuracy_over_positions, "the classes are the last axis of logits"),
            (accuracy_of_maximum_scores, "not the score (max)"),
            (number_of_right_words, "not their number"),
        ],
        "entity_spans": [
            (spans_with_last_word_as_end, "end is excluded"),
            (spans_started_by_b_only, "and one that continues none"),
            (spans_without_the_last, "ends with the sentence"),
            (spans_typed_by_their_first_tag, "the tag without its prefix"),
            (spans_of_runs_of_one_type, "a B- tag always starts a new entity"),
            (spans_comparing_with_the_previous_tag, "at position 0 there is no previous tag"),
            (spans_of_strict_bio, "starts a new entity, as conlleval"),
            (spans_as_lists, "return a list of tuples (type, start, end)"),
        ],
        "char_span_to_token_span": [
            (token_span_end_exclusive, "both token positions are inclusive"),
            (token_span_by_containment, "a character of the answer may lie in no token"),
            (token_span_end_char_included, "end_char is excluded"),
            (token_span_without_window_check, "return None: the window does not hold the answer"),
            (token_span_reading_every_offset, "skip them"),
            (token_span_as_list, "return a tuple (start_token, end_token)"),
        ],
        "best_span": [
            (best_span_separately, "pick the PAIR (s, e)"),
            (best_span_end_before_start, "a span ends at or after its start"),
            (best_span_one_token_too_long, "lets one token too many through"),
            (best_span_any_length, "is not valid: keep e - s + 1 <= max_answer_length"),
            (best_span_starts_masked_only, "the end must be a context token too"),
            (best_span_multiplied_by_mask, "-inf, not 0"),
            (best_span_over_the_whole_batch, "return one span per sequence"),
            (best_span_divmod_swapped, "s = index // N"),
            (best_span_ends_on_rows, "the starts index the rows"),
        ],
        "squad_f1": [
            (f1_without_normalisation, "normalise the prediction and every ground truth"),
            (f1_lower_cased, "lower-casing is not all"),
            (f1_of_sets, "with their multiplicity"),
            (f1_of_the_first_truth, "against EVERY ground truth"),
            (f1_dividing_by_zero, "check common == 0 before dividing"),
            (f1_of_jaccard, "(Jaccard)"),
            (f1_in_percent, "not a percentage"),
        ],
    }
    alternatives = {
        "word_piece_labels": [labels_with_seen_words],
        "tagging_accuracy": [accuracy_by_selection, accuracy_flattened],
        "entity_spans": [spans_from_starts, spans_by_conlleval_rules],
        "char_span_to_token_span": [token_span_by_scanning],
        "best_span": [best_span_by_triangles, best_span_by_loops],
        "squad_f1": [f1_by_dictionaries],
    }
    cheats = [
        ("word_piece_labels", lambda word_ids, word_labels: captured_word_piece_labels(word_ids, word_labels),
         "bertlab.tasks.word_piece_labels"),
        ("tagging_accuracy", accuracy_with_torchmetrics, "multiclass_accuracy"),
        ("tagging_accuracy", accuracy_with_scikit_learn, "accuracy_score"),
        ("entity_spans", spans_with_captured_reference, "bertlab.tasks.entity_spans"),
        ("entity_spans", spans_with_seqeval, "seqeval.metrics.sequence_labeling.get_entities"),
        ("char_span_to_token_span", token_span_with_captured_reference, "bertlab.tasks.char_span_to_token_span"),
        ("best_span", best_span_with_default_argument, "bertlab.tasks.best_span"),
        ("squad_f1", f1_with_torchmetrics, "torchmetrics.functional.text.squad._compute_f1_score"),
        ("squad_f1", f1_with_the_reference_helper, "bertlab.tasks._token_f1"),
    ]


def test_squad_f1_runs_with_the_given_normalisation():
    """The student's function calls ``squad_normalize``; the check gives it bertlab's, whatever the
    notebook holds under that name."""
    notebook = {"overlap_f1": overlap_f1}
    exec("def squad_normalize(text):\n"
         "    raise AssertionError(\"the notebook's squad_normalize was called\")\n\n"
         "def squad_f1(prediction, ground_truths):\n"
         "    return max(overlap_f1(squad_normalize(prediction).split(), squad_normalize(truth).split())\n"
         "               for truth in ground_truths)\n", notebook)
    with pytest.raises(AssertionError, match="the notebook's squad_normalize"):
        notebook["squad_f1"]("a", ["a"])
    assert checks.check_squad_f1(notebook["squad_f1"]).startswith("squad_f1: all")


def test_a_failure_shows_the_inputs_of_a_small_case():
    """A student can copy the inputs of the failing case into the notebook and run it again."""
    with pytest.raises(CheckFailed) as failure:
        checks.check_word_piece_labels(labels_on_every_piece)
    message = str(failure.value)
    assert "Inputs:\n    word_ids = [None, " in message and "\n    word_labels = [" in message, message
