"""Tests of bertlab.tasks: word-piece labels, entities of BIO tags, character offsets, SQuAD windows,
spans and metrics (the records chapter 10 reads are tested in test_recorded.py).

Hugging Face's tokenizer (transformers 5, the ``tokenizers`` library) is the independent
implementation of the tokenizer's offsets, of ``is_split_into_words`` and of the overflowing
windows; the SQuAD metrics are checked against the official evaluation script's logic, written out
below; the entities and their scores against seqeval and the conlleval rules written out below.
"""

import collections
import gzip
import json
import random
import re
import shutil
import string
import time

import pytest
import torch
import transformers

from bertlab.task_baselines import train_most_frequent_tagger
from bertlab.task_finetuning import TASKS
from bertlab.tasks import (
    IGNORE_INDEX,
    EntityScores,
    align_labels_to_word_pieces,
    best_span,
    char_span_to_token_span,
    entity_scores,
    entity_spans,
    squad_exact_match,
    squad_f1,
    squad_normalize,
    squad_scores,
    squad_windows,
    tagging_accuracy,
    word_piece_labels,
    word_piece_offsets,
)
from bertlab.tokenization import BertTokenizer
from tests.conftest import REPO_ROOT, SHARED_DATASETS

VOCAB = REPO_ROOT / "bertlab" / "course_bert" / "vocab.txt"
SQUAD_DEV = SHARED_DATASETS / "squad-v1.1" / "dev-v1.1.json.gz"

# Texts that exercise the normalisation: accents (precomposed and combining), case changes that
# change the length ("İ"), punctuation, numbers, runs of spaces, tabs, no-break spaces, control
# characters, CJK ideographs, long and unknown words.
VARIED_TEXTS = [
    "Café  naïve résumé, 1,234.5 km!! Don't",
    "cafe\u0301 and e\u0301te\u0301 (combining accents)",
    "İstanbul, ΟΔΟΣ and straße in 1453.",
    "a\u00a0b\tc\n\nd 東京 x\x07y \u200bz",
    "unaffable supercalifragilisticexpialidocious " + "x" * 120,
    "  leading and trailing spaces   ",
    "Super Bowl 50 was an American football game; the Denver Broncos won 24–10 ($5,000,000).",
    "e-mail: someone@example.com, http://example.com/a_b?c=d#e",
    "",
]


@pytest.fixture(scope="module")
def tokenizer():
    return BertTokenizer(VOCAB)


@pytest.fixture(scope="module")
def hugging_face(tmp_path_factory):
    """Hugging Face's BERT tokenizer built from the same vocab.txt (a local folder: no download).

    ``from_pretrained`` of a folder, as tests/test_tokenization.py does: in transformers 5.24,
    ``BertTokenizerFast(vocab_file=...)`` builds a tokenizer with the 5 special tokens only."""
    folder = tmp_path_factory.mktemp("hf_vocab")
    shutil.copy(VOCAB, folder / "vocab.txt")
    return transformers.BertTokenizerFast.from_pretrained(str(folder))


# --------------------------------------------------------------------------------------------------
# Token tagging
# --------------------------------------------------------------------------------------------------


def test_align_labels_by_hand():
    tokenizer = BertTokenizer(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "play", "##ing", "cat", "s"])
    encoding = align_labels_to_word_pieces(["The", "cat", "playing", "\x07", "s"], [1, 2, 3, 4, 5], tokenizer)
    assert tokenizer.convert_ids_to_tokens(encoding.input_ids) == ["[CLS]", "the", "cat", "play", "##ing", "s", "[SEP]"]
    assert encoding.labels == [-100, 1, 2, 3, -100, 5, -100], "the control-only word has no piece, so no label"
    assert encoding.word_ids == [None, 0, 1, 2, 2, 4, None]
    assert encoding.token_type_ids == [0] * 7 and encoding.attention_mask == [1] * 7
    truncated = align_labels_to_word_pieces(["The", "cat", "playing"], [1, 2, 3], tokenizer, max_length=5)
    assert truncated.labels == [-100, 1, 2, 3, -100] and truncated.word_ids == [None, 0, 1, 2, None]


def test_align_labels_errors(tokenizer):
    with pytest.raises(ValueError, match="2 words but 1 labels"):
        align_labels_to_word_pieces(["a", "b"], [0], tokenizer)
    with pytest.raises(TypeError, match="not one string"):
        align_labels_to_word_pieces("ab", [0, 0], tokenizer)
    with pytest.raises(ValueError, match="max_length=1"):
        align_labels_to_word_pieces(["a"], [0], tokenizer, max_length=1)


TAGGED_SENTENCES = [
    ["Don't", "panic", "!"],
    ["The", "Café", "naïve", "résumé", "costs", "$", "1,234.50", "."],
    ["Supercalifragilisticexpialidocious", "unaffable", "e-mail", "東京", "İstanbul"],
    ["What", "if", "Google", "Morphed", "Into", "GoogleOS", "?"],
    ["x" * 120, "a", "\u00e9t\u00e9", "2024-01-05", "@user", "#tag"],
]


@pytest.mark.parametrize("max_length", [None, 9])
@pytest.mark.parametrize("words", TAGGED_SENTENCES)
def test_align_labels_matches_hugging_face(words, max_length, tokenizer, hugging_face):
    labels = list(range(len(words)))
    ours = align_labels_to_word_pieces(words, labels, tokenizer, max_length=max_length)
    if max_length is None:
        theirs = hugging_face(words, is_split_into_words=True)
    else:
        theirs = hugging_face(words, is_split_into_words=True, truncation=True, max_length=max_length)
    assert ours.input_ids == theirs["input_ids"]
    assert ours.token_type_ids == theirs["token_type_ids"]
    assert ours.attention_mask == theirs["attention_mask"]
    assert ours.word_ids == theirs.word_ids()
    # Hugging Face's recipe: label the first piece of each word, -100 elsewhere.
    expected, previous = [], None
    for word_id in theirs.word_ids():
        expected.append(-100 if word_id is None or word_id == previous else labels[word_id])
        previous = word_id
    assert ours.labels == expected


def test_ignored_labels_are_skipped_by_cross_entropy(tokenizer):
    encoding = align_labels_to_word_pieces(["Unaffable", "cats", "!"], [3, 1, 2], tokenizer)
    labels = torch.tensor(encoding.labels)
    logits = torch.randn(len(labels), 5)
    kept = labels != IGNORE_INDEX
    torch.testing.assert_close(torch.nn.functional.cross_entropy(logits, labels),
                               torch.nn.functional.cross_entropy(logits[kept], labels[kept]))


def test_word_piece_labels_by_hand():
    assert word_piece_labels([None, 0, 0, 1, None, None], [3, 5]) == [-100, 3, -100, 5, -100, -100]
    assert word_piece_labels([0, 0, 1, 1], [7, 2]) == [7, -100, 2, -100], "no special tokens: position 0 is a word's"
    assert word_piece_labels([0, 0, 0], [4]) == [4, -100, -100], "position 0 has no previous piece (not word_ids[-1])"
    assert word_piece_labels([None, 0, 2, None], [1, 2, 3]) == [-100, 1, 3, -100], "word 1 has no piece"
    assert word_piece_labels([], []) == []


def test_tagging_accuracy_counts_the_labelled_positions_of_the_whole_batch():
    logits = torch.tensor([[[2.0, 0.0], [0.0, 1.0], [5.0, 0.0]],
                           [[0.0, 3.0], [1.0, 0.0], [0.0, 0.0]]])  # (B=2, N=3, C=2): predictions 0 1 0 / 1 0 0
    labels = torch.tensor([[0, 0, -100], [1, -100, -100]])  # 2 right of 3 labelled words
    accuracy = tagging_accuracy(logits, labels)
    assert accuracy.shape == () and accuracy.dtype == torch.float32
    torch.testing.assert_close(accuracy, torch.tensor(2 / 3))
    torch.testing.assert_close(tagging_accuracy(logits[0], labels[0]), torch.tensor(0.5))  # one sentence (N, C)
    torch.testing.assert_close(tagging_accuracy(logits, labels.masked_fill(labels == -100, -1), ignore_index=-1),
                               torch.tensor(2 / 3))
    assert tagging_accuracy(logits, torch.full((2, 3), -100)).isnan()
    with pytest.raises(ValueError, match="shape of logits"):
        tagging_accuracy(logits, labels.T)


# --------------------------------------------------------------------------------------------------
# Named entities: BIO tags, entities, entity-level scores
# --------------------------------------------------------------------------------------------------


def test_entity_spans_by_hand():
    assert entity_spans(["B-PER", "I-PER", "O", "O", "B-LOC", "I-LOC", "O", "B-LOC", "O"]) == [
        ("PER", 0, 2), ("LOC", 4, 6), ("LOC", 7, 8)]
    assert entity_spans(["B-LOC", "B-LOC", "I-LOC"]) == [("LOC", 0, 1), ("LOC", 1, 3)], "B- always starts one"
    # IOB1, as in the CoNLL-2003 files: I- starts an entity, B- only where one follows another of its type
    assert entity_spans(["I-ORG", "I-ORG", "O", "I-PER", "B-PER", "I-PER"]) == [
        ("ORG", 0, 2), ("PER", 3, 4), ("PER", 4, 6)]
    assert entity_spans(["B-PER", "I-LOC", "I-LOC", "I-PER"]) == [("PER", 0, 1), ("LOC", 1, 3), ("PER", 3, 4)]
    assert entity_spans(["O", "O"]) == [] and entity_spans([]) == []
    assert entity_spans(("B-WORK_OF_ART", "I-WORK_OF_ART")) == [("WORK_OF_ART", 0, 2)]
    for wrong in (["B-PER", "PER"], ["E-PER"], ["B-"], ["o"]):
        with pytest.raises(ValueError, match="a BIO tag is 'O', 'B-<type>' or 'I-<type>'"):
            entity_spans(wrong)
    with pytest.raises(TypeError, match="not one string"):
        entity_spans("B-PER")


def test_entity_scores_by_hand():
    gold = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "O"]]
    predicted = [["B-PER", "I-PER", "O", "O"], ["B-LOC", "B-ORG"]]  # PER found; LOC and ORG missed; 2 that are none
    assert entity_scores(gold, predicted) == EntityScores(precision=1 / 3, recall=1 / 3, f1=pytest.approx(1 / 3),
                                                          gold=3, predicted=3, correct=1)
    # an entity is right only in its own sentence
    assert entity_scores([["B-PER"], ["O"]], [["O"], ["B-PER"]]).correct == 0
    nothing_predicted = entity_scores(gold, [["O"] * 4, ["O"] * 2])
    assert (nothing_predicted.precision, nothing_predicted.recall, nothing_predicted.f1) == (0.0, 0.0, 0.0)
    nothing_to_find = entity_scores([["O"]], [["B-PER"]])
    assert (nothing_to_find.precision, nothing_to_find.recall, nothing_to_find.f1) == (0.0, 0.0, 0.0)
    with pytest.raises(ValueError, match="2 sentences of gold tags but 1"):
        entity_scores(gold, predicted[:1])
    with pytest.raises(ValueError, match="sentence 1 has 2 gold tags but 1 predicted"):
        entity_scores(gold, [predicted[0], ["O"]])


def conlleval_spans(tags: list[str]) -> list[tuple[str, int, int]]:
    """The chunks of conlleval's startOfChunk and endOfChunk (the CoNLL scorer, in Perl), for O, B- and I-
    tags, written out: a chunk ends when the previous tag was in one and this one is B, O, or of
    another type; it starts at B, or at I after O or after another type."""
    chunks, previous_tag, previous_type, start = [], "O", "", 0
    for position, tag in enumerate([*tags, "O"]):
        tag_kind, tag_type = ("O", "") if tag == "O" else tag.split("-", 1)
        if previous_tag != "O" and (tag_kind in ("B", "O") or tag_type != previous_type):
            chunks.append((previous_type, start, position))
        if tag_kind == "B" or (tag_kind == "I" and (previous_tag == "O" or tag_type != previous_type)):
            start = position
        previous_tag, previous_type = tag_kind, tag_type
    return chunks


def random_tags(rng: random.Random, length: int, types: tuple[str, ...]) -> list[str]:
    """Tags as an untrained tagger predicts them: O, B- and I- of every type, in any order."""
    return [rng.choice(["O", *(f"{prefix}-{kind}" for kind in types for prefix in "BI")]) for _ in range(length)]


def test_entity_spans_follow_conllevals_rules_on_random_tags():
    rng = random.Random(0)
    for _ in range(2000):
        tags = random_tags(rng, rng.randint(0, 25), ("PER", "LOC", "MISC"))
        assert entity_spans(tags) == conlleval_spans(tags), tags


def test_entity_spans_and_scores_agree_with_seqeval_on_random_tags():
    from seqeval import metrics
    from seqeval.metrics.sequence_labeling import get_entities

    rng = random.Random(1)
    for _ in range(300):
        tags = random_tags(rng, rng.randint(1, 25), ("PER", "LOC", "ORG"))
        assert entity_spans(tags) == [(kind, start, end + 1) for kind, start, end in get_entities(tags)], tags
    gold = [random_tags(rng, length, ("PER", "LOC")) for length in range(1, 40)]
    predicted = [random_tags(rng, len(sentence), ("PER", "LOC")) for sentence in gold]
    ours = entity_scores(gold, predicted)
    assert 0 < ours.correct < min(ours.gold, ours.predicted)
    assert ours.precision == pytest.approx(metrics.precision_score(gold, predicted))
    assert ours.recall == pytest.approx(metrics.recall_score(gold, predicted))
    assert ours.f1 == pytest.approx(metrics.f1_score(gold, predicted))


def names_and_numbers(tags: list[str | None], *, iob1: bool) -> list[str]:
    """Entities made of a sentence's part-of-speech tags: each run of PROPN words a NAME, each run of
    NUM words a NUMBER, in BIO tags (IOB2), or with I- on every word of an entity (IOB1: runs of one type
    never touch, so B- is never needed)."""
    types = [{"PROPN": "NAME", "NUM": "NUMBER"}.get(tag) for tag in tags]
    return ["O" if kind is None else f"{'I' if iob1 or (t > 0 and types[t - 1] == kind) else 'B'}-{kind}"
            for t, kind in enumerate(types)]


@pytest.mark.skipif(not (SHARED_DATASETS / "UD_English-EWT").is_dir(), reason="the English Web Treebank is absent")
def test_entity_scores_agree_with_seqeval_on_a_taggers_predictions():
    """Real predictions: the most frequent tag of each word, learned from the treebank's training split,
    on its test sentences; the entities are the runs of proper nouns and of numbers, gold in BIO tags and
    predicted in IOB1 (read by the same rule)."""
    from seqeval import metrics
    splits = TASKS["tagging"].load_splits(SHARED_DATASETS)
    predictions = train_most_frequent_tagger(splits.train).predict(splits.test)
    gold = [names_and_numbers(sentence.tags, iob1=False) for sentence in splits.test]
    predicted = [names_and_numbers(tags, iob1=True) for tags in predictions]
    ours = entity_scores(gold, predicted)
    assert ours.gold > 1000 and 0.5 < ours.f1 < 0.95  # a tagger with errors to count
    assert ours.precision == pytest.approx(metrics.precision_score(gold, predicted))
    assert ours.recall == pytest.approx(metrics.recall_score(gold, predicted))
    assert ours.f1 == pytest.approx(metrics.f1_score(gold, predicted))


# --------------------------------------------------------------------------------------------------
# Character offsets and SQuAD windows
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("text", VARIED_TEXTS)
def test_word_piece_offsets_match_hugging_face(text, tokenizer, hugging_face):
    pieces, offsets = word_piece_offsets(text, tokenizer)
    assert pieces == tokenizer.tokenize(text)
    theirs = hugging_face(text, add_special_tokens=False, return_offsets_mapping=True)
    assert pieces == hugging_face.convert_ids_to_tokens(theirs["input_ids"])
    assert offsets == [tuple(span) for span in theirs["offset_mapping"]]


def test_word_piece_offsets_by_hand():
    tokenizer = BertTokenizer(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hello", ",", "wor", "##ld", "!"])
    text = "Héllo,  WORLD Ωmega!"
    pieces, offsets = word_piece_offsets(text, tokenizer)
    assert pieces == ["hello", ",", "wor", "##ld", "[UNK]", "!"]
    assert [text[start:end] for start, end in offsets] == ["Héllo", ",", "WOR", "LD", "Ωmega", "!"]


def test_word_piece_offsets_lower_capital_sigma_as_hugging_face(tmp_path):
    """Python lowers a word-final "Σ" to "ς" in ``str.lower`` of a word; Hugging Face lowers one
    character at a time, to "σ", and so do word_piece_offsets and bertlab's ``tokenize``."""
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "οδος", "οδοσ", "##ος", "##οσ", "οδ"]
    (tmp_path / "vocab.txt").write_text("".join(token + "\n" for token in tokens), encoding="utf-8")
    hugging_face = transformers.BertTokenizerFast.from_pretrained(str(tmp_path))
    text = "ΟΔΟΣ οδος"
    pieces, offsets = word_piece_offsets(text, BertTokenizer(tmp_path / "vocab.txt"))
    theirs = hugging_face(text, add_special_tokens=False, return_offsets_mapping=True)
    assert pieces == hugging_face.convert_ids_to_tokens(theirs["input_ids"]) == ["οδοσ", "οδος"]
    assert BertTokenizer(tmp_path / "vocab.txt").tokenize(text) == pieces
    assert offsets == [tuple(span) for span in theirs["offset_mapping"]] == [(0, 4), (5, 9)]


def test_char_span_to_token_span_by_hand():
    # "[CLS] q [SEP] Denver Broncos won . [SEP]" over the context "Denver Broncos won."
    offsets = [None, None, None, (0, 6), (7, 14), (15, 18), (18, 19), None]
    assert char_span_to_token_span(offsets, 0, 14) == (3, 4)
    assert char_span_to_token_span(offsets, 7, 19) == (4, 6)
    assert char_span_to_token_span(offsets, 2, 4) == (3, 3), "a part of a token gives that token"
    assert char_span_to_token_span(offsets, 6, 14) == (4, 4), "a leading space is not part of any token"
    assert char_span_to_token_span(offsets, 6, 7) is None, "only whitespace"
    window = [None, (7, 14), (15, 18), None]
    assert char_span_to_token_span(window, 0, 14) is None, "starts before the window"
    assert char_span_to_token_span(window, 15, 19) is None, "ends after the window"
    with pytest.raises(ValueError, match="start_char < end_char"):
        char_span_to_token_span(offsets, 5, 5)


def _hugging_face_windows(hugging_face, question, context, max_length, stride):
    return hugging_face(question, context, truncation="only_second", max_length=max_length, stride=stride,
                        return_overflowing_tokens=True, return_offsets_mapping=True)


def _long_context():
    sentences = [f"Paragraph {i}: the Denver Broncos, in 19{i:02d}, beat café owners {i * 7} times."
                 for i in range(40)]
    return "  ".join(sentences)


@pytest.mark.parametrize("max_length, stride", [(384, 128), (64, 16), (48, 10), (200, 0)])
def test_squad_windows_match_hugging_face(max_length, stride, tokenizer, hugging_face):
    question, context = "Who beat the café owners in 1917?", _long_context()
    answer_text = "the Denver Broncos"
    answer_start = context.index("Paragraph 17:") + len("Paragraph 17: ")
    assert context[answer_start:].startswith(answer_text)
    windows = squad_windows(question, context, answer_start, answer_text, tokenizer, max_length, stride)
    theirs = _hugging_face_windows(hugging_face, question, context, max_length, stride)
    assert len(windows) == len(theirs["input_ids"]) > (1 if max_length < 384 else 0)
    answer_end = answer_start + len(answer_text)
    found = 0
    for index, window in enumerate(windows):
        assert window.input_ids == theirs["input_ids"][index]
        assert window.token_type_ids == theirs["token_type_ids"][index]
        assert window.attention_mask == theirs["attention_mask"][index]
        sequence_ids = theirs.sequence_ids(index)
        expected_offsets = [tuple(span) if sequence == 1 else None
                            for span, sequence in zip(theirs["offset_mapping"][index], sequence_ids)]
        assert window.offsets == expected_offsets
        assert window.context_mask == [sequence == 1 for sequence in sequence_ids]
        # Hugging Face's question-answering recipe for the answer's positions.
        context_start, context_end = sequence_ids.index(1), len(sequence_ids) - 2
        if expected_offsets[context_start][0] > answer_start or expected_offsets[context_end][1] < answer_end:
            expected = (0, 0)
        else:
            start = context_start
            while start <= context_end and expected_offsets[start][0] <= answer_start:
                start += 1
            end = context_end
            while end >= context_start and expected_offsets[end][1] >= answer_end:
                end -= 1
            expected = (start - 1, end + 1)
            found += 1
            decoded = context[expected_offsets[expected[0]][0] : expected_offsets[expected[1]][1]]
            assert decoded == answer_text
        assert (window.start_position, window.end_position) == expected
    assert found >= 1


def test_squad_windows_share_stride_pieces(tokenizer):
    context = " ".join(f"word{i}" for i in range(300))
    windows = squad_windows("which word?", context, None, None, tokenizer, max_length=60, stride=20)
    spans = [[span for span in window.offsets if span is not None] for window in windows]
    for previous, following in zip(spans, spans[1:]):
        assert previous[-20:] == following[:20]
    assert spans[-1][-1][1] == len(context) and spans[0][0][0] == 0
    assert all((window.start_position, window.end_position) == (0, 0) for window in windows)


def test_squad_windows_errors(tokenizer):
    with pytest.raises(ValueError, match="must exceed stride=128"):
        squad_windows("a long question " * 90, "context", None, None, tokenizer)
    with pytest.raises(ValueError, match="outside the context"):
        squad_windows("q?", "short context", 10, "context here", tokenizer)
    with pytest.raises(ValueError, match="or neither"):
        squad_windows("q?", "short context", 0, None, tokenizer)


# --------------------------------------------------------------------------------------------------
# The best span
# --------------------------------------------------------------------------------------------------


def _brute_force_best_span(start_logits, end_logits, context_mask, max_answer_length):
    best, best_score = None, float("-inf")
    for s in range(len(start_logits)):
        for e in range(s, min(s + max_answer_length, len(end_logits))):
            if context_mask[s] and context_mask[e]:
                score = float(start_logits[s] + end_logits[e])
                if score > best_score:
                    best, best_score = (s, e), score
    return best


@pytest.mark.parametrize("max_answer_length", [1, 3, 30, 100])
def test_best_span_matches_brute_force(max_answer_length):
    generator = torch.Generator().manual_seed(max_answer_length)
    for trial in range(20):
        length = int(torch.randint(2, 60, (1,), generator=generator))
        start_logits, end_logits = torch.randn(2, length, generator=generator)
        context_mask = torch.rand(length, generator=generator) < 0.7
        context_mask[int(torch.randint(length, (1,), generator=generator))] = True
        start, end = best_span(start_logits, end_logits, context_mask, max_answer_length)
        assert start.shape == () and end.shape == ()
        expected = _brute_force_best_span(start_logits, end_logits, context_mask, max_answer_length)
        assert (int(start), int(end)) == expected, f"trial {trial}"


def test_best_span_batched_and_by_hand():
    start_logits = torch.tensor([[9.0, 1.0, 0.0, 5.0], [0.0, 0.0, 3.0, 0.0]])
    end_logits = torch.tensor([[9.0, 0.0, 4.0, 0.0], [0.0, 2.0, 0.0, 1.0]])
    context_mask = torch.tensor([[False, True, True, True], [True, True, True, True]])
    start, end = best_span(start_logits, end_logits, context_mask, max_answer_length=2)  # (B,)
    # row 0: [CLS] is excluded and (3, 2) has e < s, so (1, 2); row 1: (2, 3), as (1, 1) scores 2 < 4.
    assert start.tolist() == [1, 2] and end.tolist() == [2, 3]
    with pytest.raises(ValueError, match="no context token"):
        best_span(start_logits, end_logits, torch.zeros(2, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="same shape"):
        best_span(start_logits, end_logits[:, :3], context_mask)


# --------------------------------------------------------------------------------------------------
# The SQuAD metrics, against the official SQuAD v1.1 evaluation script
# --------------------------------------------------------------------------------------------------

# The logic of the official script, ``evaluate-v1.1.py`` (Rajpurkar et al., 2016; distributed at
# https://rajpurkar.github.io/SQuAD-explorer/, repository rajpurkar/SQuAD-explorer), rewritten here
# step by step as an independent implementation: normalize_answer, f1_score, exact_match_score,
# metric_max_over_ground_truths and evaluate.


def official_normalize_answer(s):
    lowered = s.lower()
    exclude = set(string.punctuation)
    no_punctuation = "".join(ch for ch in lowered if ch not in exclude)
    no_articles = re.sub(r"\b(a|an|the)\b", " ", no_punctuation)
    return " ".join(no_articles.split())


def official_f1_score(prediction, ground_truth):
    prediction_tokens = official_normalize_answer(prediction).split()
    ground_truth_tokens = official_normalize_answer(ground_truth).split()
    common = collections.Counter(prediction_tokens) & collections.Counter(ground_truth_tokens)
    num_same = sum(common.values())
    if num_same == 0:
        return 0
    precision = 1.0 * num_same / len(prediction_tokens)
    recall = 1.0 * num_same / len(ground_truth_tokens)
    return (2 * precision * recall) / (precision + recall)


def official_exact_match_score(prediction, ground_truth):
    return official_normalize_answer(prediction) == official_normalize_answer(ground_truth)


def official_metric_max_over_ground_truths(metric_fn, prediction, ground_truths):
    return max(metric_fn(prediction, ground_truth) for ground_truth in ground_truths)


def official_evaluate(dataset, predictions):
    f1 = exact_match = total = 0
    for article in dataset:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                total += 1
                if qa["id"] not in predictions:
                    continue  # "Unanswered question ... will receive score 0."
                ground_truths = [answer["text"] for answer in qa["answers"]]
                prediction = predictions[qa["id"]]
                exact_match += official_metric_max_over_ground_truths(official_exact_match_score, prediction,
                                                                      ground_truths)
                f1 += official_metric_max_over_ground_truths(official_f1_score, prediction, ground_truths)
    return {"exact_match": 100.0 * exact_match / total, "f1": 100.0 * f1 / total}


def test_squad_metrics_by_hand():
    assert squad_normalize("The  Denver Broncos!") == "denver broncos"
    assert squad_normalize("An apple, a day") == "apple day"
    assert squad_normalize("theater") == "theater", "articles are removed as whole words only"
    assert squad_normalize("  Über-cool\tthe\n") == "übercool"
    assert squad_exact_match("the Denver Broncos", ["Broncos", "Denver Broncos"]) == 1.0
    assert squad_exact_match("Denver", ["Denver Broncos"]) == 0.0
    # prediction "denver broncos won", truth "the denver broncos": common 2, P = 2/3, R = 1, F1 = 0.8
    assert squad_f1("Denver Broncos won", ["the Denver Broncos"]) == pytest.approx(0.8)
    assert squad_f1("Denver Broncos won", ["Carolina", "Broncos"]) == pytest.approx(2 * (1 / 3) / (1 / 3 + 1))
    assert squad_f1("", ["Broncos"]) == 0.0 and squad_f1("the", ["a"]) == 0.0
    scores = squad_scores({"q1": "Denver Broncos", "q2": "Carolina"}, {"q1": ["Denver Broncos"], "q2": ["Panthers"],
                                                                      "q3": ["x"]})
    assert scores.exact_match == pytest.approx(100 / 3) and scores.f1 == pytest.approx(100 / 3)
    with pytest.raises(ValueError, match="at least one answer"):
        squad_f1("x", [])
    with pytest.raises(ValueError, match="answer no question"):
        squad_scores({"q9": "x"}, {"q1": ["y"]})


def test_squad_scores_match_the_official_script():
    generator = torch.Generator().manual_seed(0)
    words = ["the", "a", "an", "Denver", "Broncos", "won", "Super", "Bowl", "50", "!", ",", "Panthers",
             "theatre", "Santa", "Clara", "\u00e9t\u00e9", "50.", "(", "1,000", "Levi's"]

    def phrase():
        length = int(torch.randint(0, 6, (1,), generator=generator))
        indices = torch.randint(len(words), (length,), generator=generator).tolist()
        return "  ".join(words[i] for i in indices) if length % 2 else " ".join(words[i] for i in indices)

    dataset, predictions, references = [{"paragraphs": [{"qas": []}]}], {}, {}
    for index in range(300):
        answers = [phrase() or "Broncos" for _ in range(int(torch.randint(1, 4, (1,), generator=generator)))]
        dataset[0]["paragraphs"][0]["qas"].append({"id": f"q{index}", "answers": [{"text": a} for a in answers]})
        references[f"q{index}"] = answers
        if index % 7:  # some questions left unanswered
            predictions[f"q{index}"] = phrase() if index % 3 else answers[0].upper()
        for answer in answers:
            prediction = predictions.get(f"q{index}", "")
            assert squad_normalize(answer) == official_normalize_answer(answer)
            assert squad_f1(prediction, [answer]) == pytest.approx(official_f1_score(prediction, answer))
    ours, theirs = squad_scores(predictions, references), official_evaluate(dataset, predictions)
    assert 0 < ours.exact_match < 100 and 0 < ours.f1 < 100
    assert ours.exact_match == pytest.approx(theirs["exact_match"])
    assert ours.f1 == pytest.approx(theirs["f1"])


# --------------------------------------------------------------------------------------------------
# The real SQuAD v1.1 dev set
# --------------------------------------------------------------------------------------------------


@pytest.fixture
def squad_dev():
    """The SQuAD v1.1 dev set from ``../shared/datasets``; skips when absent."""
    if not SQUAD_DEV.exists():
        pytest.skip(f"SQuAD v1.1 dev set not found at {SQUAD_DEV}")
    with gzip.open(SQUAD_DEV, "rt", encoding="utf-8") as file:
        return json.load(file)["data"]


def test_every_squad_dev_answer_is_recovered_from_its_token_span(squad_dev, tokenizer):
    """Each distinct answer (question, start, text) of the 34,726 answers of the dev set is mapped to
    its token span; decoding the context characters from the span's first piece to its last gives
    the answer back, after SQuAD's normalisation, and the span lies in the context. About 30 s on
    one busy core: 18,168 of the 18,216 answers come back; the 48 others begin or end inside a word
    piece ("gold" of "golden", "27,814" of "€27,814") and decode to text that contains them."""
    begin, answers, recovered, failures = time.perf_counter(), 0, 0, []
    for article in squad_dev:
        for paragraph in article["paragraphs"]:
            context = paragraph["context"]
            for qa in paragraph["qas"]:
                distinct = {(answer["answer_start"], answer["text"]) for answer in qa["answers"]}
                for answer_start, answer_text in sorted(distinct):
                    answers += 1
                    windows = squad_windows(qa["question"], context, answer_start, answer_text, tokenizer)
                    spans = [window for window in windows if window.start_position > 0]
                    if not spans:
                        failures.append((qa["id"], answer_text, "in no window"))
                        continue
                    window = spans[0]
                    assert window.context_mask[window.start_position] and window.context_mask[window.end_position]
                    decoded = context[window.offsets[window.start_position][0] : window.offsets[window.end_position][1]]
                    if squad_normalize(decoded) == squad_normalize(answer_text):
                        recovered += 1
                    else:
                        failures.append((qa["id"], answer_text, decoded))
    assert answers == 18_216  # distinct (question, start, text) among the 34,726 answers
    # An answer that ends or starts inside a word piece ("Broncos" of "Broncos'") decodes to the
    # whole piece; every other answer must come back exactly.
    for question_id, answer_text, decoded in failures:
        assert decoded != "in no window", f"{question_id}: {answer_text!r} is in no window"
        assert answer_text in decoded, f"{question_id}: {answer_text!r} decoded as {decoded!r}"
    assert recovered / answers > 0.99, f"{len(failures)} of {answers} answers not recovered: {failures[:5]}"
    print(f"{recovered} of {answers} answers recovered in {time.perf_counter() - begin:.1f} s")


def predictions_near_the_answers(questions: list[dict], seed: int = 0) -> dict[str, str]:
    """Answers a reader might give: the right span, the span moved or stretched by a few characters into
    the context (cut words, extra words, punctuation), another stretch of the context, or nothing."""
    rng = random.Random(seed)
    predictions = {}
    for question in questions:
        context, answer = question["context"], question["answers"][0]
        start, end = answer["answer_start"], answer["answer_start"] + len(answer["text"])
        kind = rng.randrange(5)
        if kind == 1:
            start, end = max(0, start - rng.randint(1, 12)), min(len(context), end + rng.randint(0, 12))
        elif kind == 2:
            start, end = start + rng.randint(0, len(answer["text"]) // 2), end
        elif kind == 3:
            start = rng.randrange(len(context))
            end = min(len(context), start + rng.randint(1, 40))
        predictions[question["id"]] = "" if kind == 4 else context[start:end]
    return predictions


def torchmetrics_squad(predictions: dict[str, str], questions: list[dict]) -> dict[str, float]:
    from torchmetrics.text import SQuAD

    metric = SQuAD()
    scores = metric([{"prediction_text": text, "id": question_id} for question_id, text in predictions.items()],
                    [{"answers": {"answer_start": [a["answer_start"] for a in q["answers"]],
                                  "text": [a["text"] for a in q["answers"]]}, "id": q["id"]} for q in questions])
    return {name: float(value) for name, value in scores.items()}


def test_squad_scores_agree_with_torchmetrics_on_the_dev_set(squad_dev):
    """torchmetrics' SQuAD metric, an independent implementation of the official script, on predictions
    near the answers of every question of the real dev set."""
    pytest.importorskip("torchmetrics")
    questions = [{"id": q["id"], "context": p["context"], "answers": q["answers"]}
                 for article in squad_dev for p in article["paragraphs"] for q in p["qas"]]
    predictions = predictions_near_the_answers(questions)
    ours = squad_scores(predictions, {q["id"]: [a["text"] for a in q["answers"]] for q in questions})
    theirs = torchmetrics_squad(predictions, questions)
    assert 20 < ours.exact_match < 60
    assert ours.exact_match == pytest.approx(theirs["exact_match"], abs=1e-3)
    assert ours.f1 == pytest.approx(theirs["f1"], abs=1e-3)
