"""Tests of bertlab.tokenization against Hugging Face's BERT tokenizers, on real text and on edge cases.

transformers 5's ``BertTokenizer`` (with ``BertTokenizerFast`` an alias of it) runs the ``tokenizers``
library; ``BertTokenizerLegacy`` is its earlier pure-Python port of BERT's ``tokenization.py``. Both are
built from the same ``vocab.txt`` as ours; nothing is downloaded.
"""

import collections
import json
import random
import re

import pytest
import torch
import transformers
from tokenizers import Tokenizer, pre_tokenizers, trainers
from tokenizers.models import BPE

from bertlab.data import load_sentiment, pretraining_corpus, synthetic_sentiment
from bertlab.tokenization import (
    SPECIAL_TOKENS,
    BasicTokenizer,
    BertTokenizer,
    WordPieceTokenizer,
    apply_bpe,
    bpe_merges,
    train_wordpiece_vocab,
    truncate_longest_first,
)

try:
    from transformers.models.bert.tokenization_bert_legacy import BertTokenizerLegacy
except ImportError:  # older or newer transformers without the Python port
    BertTokenizerLegacy = None

# In transformers 5, BertTokenizerFast is another name for BertTokenizer: compare with each class once.
HF_CLASSES = ["BertTokenizer"]
if transformers.BertTokenizerFast is not transformers.BertTokenizer:
    HF_CLASSES.append("BertTokenizerFast")


def hugging_face(name: str, vocab_dir, do_lower_case: bool = True):
    cls = BertTokenizerLegacy if name == "BertTokenizerLegacy" else getattr(transformers, name)
    return cls.from_pretrained(str(vocab_dir), do_lower_case=do_lower_case)  # a local folder: no download


# --------------------------------------------------------------------------------------------------
# Fixtures: a vocabulary learned from the pydoc corpus, and the texts to compare on
# --------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def documents():
    return pretraining_corpus()


@pytest.fixture(scope="module")
def sentences(documents):
    return [sentence for document in documents for sentence in document]


@pytest.fixture(scope="module")
def vocab_dir(tmp_path_factory, sentences):
    """A 2,000-token vocabulary: small enough that real text needs many ## pieces and some [UNK]."""
    folder = tmp_path_factory.mktemp("vocab")
    BertTokenizer(train_wordpiece_vocab(sentences, vocab_size=2000)).save_vocabulary(folder)
    return folder


@pytest.fixture(scope="module")
def tokenizer(vocab_dir):
    return BertTokenizer(vocab_dir / "vocab.txt")


@pytest.fixture(scope="module")
def pairs(documents):
    """Consecutive sentences of the same document, as in next sentence prediction."""
    pairs = [(a, b) for document in documents for a, b in zip(document, document[1:])]
    return random.Random(0).sample(pairs, 400)


@pytest.fixture
def mr_sentences(mr_dir):
    """2,000 MR snippets, raw bytes decoded as the loader does (skips when MR is absent)."""
    splits = load_sentiment("mr", root=mr_dir)
    texts = [text for text, _ in splits.train + splits.dev + splits.test]
    return random.Random(0).sample(texts, 2000)


# --------------------------------------------------------------------------------------------------
# Token for token against Hugging Face, on real text
# --------------------------------------------------------------------------------------------------


def assert_same_tokens(ours, theirs, texts) -> list[str]:
    """Check every text; return all the tokens, to see what the comparison exercised."""
    tokens = []
    for text in texts:
        tokenized = ours.tokenize(text)
        assert tokenized == theirs.tokenize(text), text
        tokens += tokenized
    return tokens


@pytest.mark.parametrize("name", HF_CLASSES)
def test_tokens_match_hugging_face_on_pydoc_text(tokenizer, vocab_dir, sentences, name):
    tokens = assert_same_tokens(tokenizer, hugging_face(name, vocab_dir), sentences)
    assert sum(token.startswith("##") for token in tokens) > 1000  # ## continuations were exercised


@pytest.mark.skipif(BertTokenizerLegacy is None, reason="transformers has no BertTokenizerLegacy")
def test_tokens_match_the_python_port_on_pydoc_text(tokenizer, vocab_dir, sentences):
    assert_same_tokens(tokenizer, hugging_face("BertTokenizerLegacy", vocab_dir), sentences)


@pytest.mark.parametrize("name", HF_CLASSES)
def test_tokens_match_hugging_face_on_mr(tokenizer, vocab_dir, mr_sentences, name):
    # MR has characters (…, é, –) outside the pydoc vocabulary's alphabet: they become [UNK].
    tokens = assert_same_tokens(tokenizer, hugging_face(name, vocab_dir), mr_sentences)
    assert "[UNK]" in tokens


@pytest.mark.parametrize("name", HF_CLASSES)
def test_encode_matches_hugging_face_on_single_sentences(tokenizer, vocab_dir, sentences, name):
    hf = hugging_face(name, vocab_dir)
    for text in sentences[:500]:
        assert tokenizer.encode(text) == dict(hf(text, return_token_type_ids=True)), text
        for max_length in (8, 13):
            ours = tokenizer.encode(text, max_length=max_length, truncation=True, padding="max_length")
            theirs = hf(text, max_length=max_length, truncation=True, padding="max_length", return_token_type_ids=True)
            assert ours == dict(theirs), text


@pytest.mark.parametrize("name", HF_CLASSES)
def test_encode_matches_hugging_face_on_pairs_with_longest_first_truncation(tokenizer, vocab_dir, pairs, name):
    hf = hugging_face(name, vocab_dir)
    truncated = 0
    for a, b in pairs:
        assert tokenizer.encode(a, b) == dict(hf(a, b, return_token_type_ids=True))
        for max_length in (16, 25):  # an odd budget decides who keeps the odd token
            ours = tokenizer.encode(a, b, max_length=max_length, truncation="longest_first")
            theirs = hf(a, b, max_length=max_length, truncation="longest_first", return_token_type_ids=True)
            assert ours == dict(theirs), (a, b, max_length)
            truncated += len(tokenizer.encode(a, b)["input_ids"]) > max_length
    assert truncated > 500


@pytest.mark.parametrize("name", HF_CLASSES)
def test_batches_match_hugging_face(tokenizer, vocab_dir, pairs, name):
    hf = hugging_face(name, vocab_dir)
    for start in range(0, 160, 32):
        first, second = map(list, zip(*pairs[start : start + 32]))
        for kwargs in (
            {"padding": True},
            {"padding": True, "max_length": 24, "truncation": True},
            {"padding": "max_length", "max_length": 48, "truncation": True},
        ):
            ours = tokenizer.batch_encode(first, second, **kwargs)
            theirs = hf(first, second, return_tensors="pt", return_token_type_ids=True, **kwargs)
            assert ours.keys() == {"input_ids", "token_type_ids", "attention_mask"}
            for key, value in ours.items():
                assert value.dtype == torch.long
                assert torch.equal(value, theirs[key]), (key, kwargs)
        ours = tokenizer(first, padding=True)  # __call__, single texts
        theirs = hf(first, padding=True, return_tensors="pt", return_token_type_ids=True)
        assert all(torch.equal(ours[key], theirs[key]) for key in ours)


@pytest.mark.parametrize("name", HF_CLASSES)
def test_special_tokens_mask_and_decode_match_hugging_face(tokenizer, vocab_dir, pairs, name):
    hf = hugging_face(name, vocab_dir)
    for a, b in pairs[:300]:
        ids = tokenizer.encode(a, b, max_length=64, truncation=True, padding="max_length")["input_ids"]
        expected_mask = hf.get_special_tokens_mask(ids, already_has_special_tokens=True)
        assert tokenizer.get_special_tokens_mask(ids) == expected_mask
        for skip in (True, False):
            assert tokenizer.decode(ids, skip_special_tokens=skip) == hf.decode(ids, skip_special_tokens=skip)
    assert tokenizer.decode(torch.tensor(ids)) == tokenizer.decode(ids)


@pytest.mark.parametrize("name", HF_CLASSES)
def test_decode_matches_hugging_face_on_random_ids(tokenizer, vocab_dir, name):
    """Any id sequence, e.g. a model's predictions: ## pieces at the start, specials anywhere."""
    hf = hugging_face(name, vocab_dir)
    rng = random.Random(0)
    for _ in range(500):
        ids = [rng.randrange(tokenizer.vocab_size) for _ in range(rng.randint(0, 12))]
        for skip in (True, False):
            assert tokenizer.decode(ids, skip_special_tokens=skip) == hf.decode(ids, skip_special_tokens=skip)


# --------------------------------------------------------------------------------------------------
# Handcrafted cases, checked by hand and against Hugging Face
# --------------------------------------------------------------------------------------------------

SMALL_VOCAB = SPECIAL_TOKENS + [
    "the", "un", "##aff", "##able", "play", "##ing", "##s", "hello", "world", "cafe", "caf", "##é", "é",
    "naive", ",", ".", "!", "?", "'", "-", "$", "don", "t", "well", "known", "我", "爱", "北", "京",
    "a", "##a", "b", "x", "e", "##e", "ü", "i", "m",
]  # fmt: skip

HANDCRAFTED = [
    "",
    "   \t\n ",
    "The unaffable playing plays!",
    "Héllo, WÖRLD! Café naïve",  # accents are stripped when lower-casing
    "cafe\u0301 e\u0301",  # a decomposed accent (e + combining acute)
    "我爱北京, 北京!",  # each CJK ideograph is a word
    "don't well-known $5 ¿qué? «quoted» — dash",
    "zebra xylophone qqq",  # unknown words
    "a" * 100 + " " + "a" * 101,  # max_input_chars_per_word = 100
    "hello\x00world\ufffd \u200bhello\x07 \u00a0world\u2003hello",  # NUL, U+FFFD, controls, odd spaces
    "the [MASK] is a[MASK]b, not [mask] nor [UNK] [CLS][SEP][PAD]",  # special tokens typed in
    "한국어 ひらがな カタカナ Ελληνικά русский",
]


@pytest.fixture(scope="module")
def small_vocab_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("small_vocab")
    BertTokenizer(SMALL_VOCAB).save_vocabulary(folder)
    return folder


@pytest.mark.parametrize("do_lower_case", [True, False])
@pytest.mark.parametrize("name", HF_CLASSES)
def test_handcrafted_cases_match_hugging_face(small_vocab_dir, name, do_lower_case):
    ours = BertTokenizer(small_vocab_dir, do_lower_case=do_lower_case)
    hf = hugging_face(name, small_vocab_dir, do_lower_case=do_lower_case)
    for text in HANDCRAFTED:
        assert ours.tokenize(text) == hf.tokenize(text), text
        assert ours.encode(text, "hello world") == dict(hf(text, "hello world", return_token_type_ids=True)), text
        ids = ours.encode(text)["input_ids"]
        assert ours.decode(ids) == hf.decode(ids, skip_special_tokens=True), text


def test_handcrafted_cases_by_hand(small_vocab_dir):
    tokenizer = BertTokenizer(small_vocab_dir)
    assert tokenizer.tokenize("The unaffable playing plays!") == [
        "the", "un", "##aff", "##able", "play", "##ing", "play", "##s", "!"
    ]  # fmt: skip
    assert tokenizer.tokenize("Héllo, WÖRLD! Café") == ["hello", ",", "world", "!", "cafe"]
    assert tokenizer.tokenize("我爱北京") == ["我", "爱", "北", "京"]
    assert tokenizer.tokenize("don't well-known") == ["don", "'", "t", "well", "-", "known"]
    assert tokenizer.tokenize("zebra the") == ["[UNK]", "the"]
    assert tokenizer.tokenize("a" * 100) == ["a"] + ["##a"] * 99
    assert tokenizer.tokenize("a" * 101) == ["[UNK]"]
    assert tokenizer.tokenize("the [MASK] a[MASK]") == ["the", "[MASK]", "a", "[MASK]"]
    assert tokenizer.tokenize("") == [] and tokenizer.tokenize(" \n\t") == []
    assert tokenizer.encode("") == {"input_ids": [2, 3], "token_type_ids": [0, 0], "attention_mask": [1, 1]}
    cased = BertTokenizer(small_vocab_dir, do_lower_case=False)
    assert cased.tokenize("Hello hello é") == ["[UNK]", "hello", "é"]


def test_basic_and_wordpiece_tokenizers_alone():
    assert BasicTokenizer().tokenize("Héllo,  WORLD!\n北京") == ["hello", ",", "world", "!", "北", "京"]
    assert BasicTokenizer(do_lower_case=False).tokenize("Héllo,WORLD") == ["Héllo", ",", "WORLD"]
    wordpiece = WordPieceTokenizer(["un", "##aff", "##able", "[UNK]"], max_input_chars_per_word=9)
    assert wordpiece.tokenize("unaffable unaff affable") == ["un", "##aff", "##able", "un", "##aff", "[UNK]"]
    assert wordpiece.tokenize("unaffables") == ["[UNK]"]  # 10 characters > 9


def test_encode_pairs_padding_and_truncation_by_hand(small_vocab_dir):
    tokenizer = BertTokenizer(small_vocab_dir)
    hello, world, the = tokenizer.convert_tokens_to_ids(["hello", "world", "the"])
    encoded = tokenizer.encode("hello world", "the", max_length=8, padding="max_length")
    assert encoded["input_ids"] == [2, hello, world, 3, the, 3, 0, 0]
    assert encoded["token_type_ids"] == [0, 0, 0, 0, 1, 1, 0, 0]
    assert encoded["attention_mask"] == [1, 1, 1, 1, 1, 1, 0, 0]
    assert tokenizer.encode("hello world", max_length=3, truncation=True)["input_ids"] == [2, hello, 3]
    assert tokenizer.encode("hello world hello", padding=True, max_length=2)["input_ids"] == [2, hello, world, hello, 3]


def test_truncate_longest_first_by_hand():
    a, b = list(range(10)), list(range(100, 110))
    assert truncate_longest_first(a, b, 5) == (a[:2], b[:3])  # a tie: the second text keeps the odd token
    assert truncate_longest_first(a + [10, 11], b, 5) == (a[:3], b[:2])  # the longer keeps it
    assert truncate_longest_first(a[:2], b, 5) == (a[:2], b[:3])  # the short one is kept whole
    assert truncate_longest_first(a[:2], b[:3], 5) == (a[:2], b[:3])
    assert truncate_longest_first(a, None, 4) == (a[:4], None)


def test_batch_encode_options(small_vocab_dir):
    tokenizer = BertTokenizer(small_vocab_dir)
    batch = tokenizer.batch_encode(["hello", "hello world the"])
    assert batch["input_ids"].shape == (2, 5)
    assert batch["attention_mask"].tolist() == [[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]]
    assert tokenizer.batch_encode("hello")["input_ids"].shape == (1, 3)  # one string: a batch of one
    assert tokenizer.batch_encode(["hello"], padding="max_length", max_length=6)["input_ids"].shape == (1, 6)
    hello, world = tokenizer.convert_tokens_to_ids(["hello", "world"])
    as_lists = tokenizer.batch_encode(["hello", "hello world"], padding=False, return_tensors=None)
    assert as_lists["input_ids"] == [[2, hello, 3], [2, hello, world, 3]]


def test_ids_tokens_and_attributes(small_vocab_dir):
    tokenizer = BertTokenizer(small_vocab_dir)
    assert (tokenizer.pad_token_id, tokenizer.unk_token_id, tokenizer.cls_token_id) == (0, 1, 2)
    assert (tokenizer.sep_token_id, tokenizer.mask_token_id) == (3, 4)
    assert tokenizer.vocab_size == len(SMALL_VOCAB) == len(tokenizer.vocab)
    assert tokenizer.convert_tokens_to_ids("hello") == SMALL_VOCAB.index("hello")
    assert tokenizer.convert_tokens_to_ids(["zebra", "the"]) == [1, SMALL_VOCAB.index("the")]
    assert tokenizer.convert_ids_to_tokens([0, 5]) == ["[PAD]", "the"]
    assert tokenizer.convert_ids_to_tokens(torch.tensor([2, 3])) == ["[CLS]", "[SEP]"]
    assert tokenizer.get_special_tokens_mask([2, 5, 1, 4, 3, 0]) == [1, 0, 1, 1, 1, 1]
    assert tokenizer.decode(tokenizer.encode("The unaffable, playing!")["input_ids"]) == "the unaffable, playing!"


def test_vocabulary_forms_and_save(tmp_path):
    """A list, a dict, a vocab.txt path and its folder give the same tokenizer; special tokens may sit anywhere."""
    tokens = ["hello", "world"] + SPECIAL_TOKENS[::-1]  # as in bert-base-uncased, [PAD] need not be id 0
    from_list = BertTokenizer(tokens)
    path = from_list.save_vocabulary(tmp_path / "saved")
    assert path == tmp_path / "saved" / "vocab.txt"
    assert path.read_text(encoding="utf-8").split("\n")[:-1] == tokens
    for vocab in ({token: i for i, token in enumerate(tokens)}, path, str(path), tmp_path / "saved"):
        assert BertTokenizer(vocab).vocab == from_list.vocab
    assert from_list.pad_token_id == tokens.index("[PAD]") and from_list.mask_token_id == 2
    (tmp_path / "crlf.txt").write_bytes("\r\n".join(tokens).encode() + b"\r\n")
    assert BertTokenizer(tmp_path / "crlf.txt").vocab == from_list.vocab


def test_clear_errors(tmp_path, small_vocab_dir):
    with pytest.raises(ValueError, match=r"\[MASK\]"):
        BertTokenizer(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "hello"])
    with pytest.raises(FileNotFoundError, match="no_such_vocab.txt"):
        BertTokenizer(tmp_path / "no_such_vocab.txt")
    with pytest.raises(ValueError, match="appears twice"):
        BertTokenizer(SPECIAL_TOKENS + ["a", "a"])
    with pytest.raises(ValueError, match="ids"):
        BertTokenizer({token: 2 * i for i, token in enumerate(SPECIAL_TOKENS)})
    tokenizer = BertTokenizer(small_vocab_dir)
    with pytest.raises(ValueError, match="max_length=2 is too small"):
        tokenizer.encode("hello", "world", max_length=2, truncation=True)
    with pytest.raises(ValueError, match="max_length=1 is too small"):
        tokenizer.encode("hello", max_length=1, truncation=True)
    with pytest.raises(ValueError, match="needs a max_length"):
        tokenizer.encode("hello", truncation=True)
    with pytest.raises(ValueError, match="needs a max_length"):
        tokenizer.encode("hello", padding="max_length")
    with pytest.raises(ValueError, match="truncation must be"):
        tokenizer.encode("hello", "world", max_length=5, truncation="only_second")
    with pytest.raises(ValueError, match="padding must be"):
        tokenizer.batch_encode(["hello"], padding="left")
    with pytest.raises(ValueError, match="different lengths"):
        tokenizer.batch_encode(["hello", "hello world"], padding=False)
    with pytest.raises(ValueError, match="2 texts but 1 text_pairs"):
        tokenizer.batch_encode(["hello", "world"], ["the"])
    with pytest.raises(ValueError, match="outside the vocabulary"):
        tokenizer.decode([tokenizer.vocab_size])
    with pytest.raises(TypeError, match="expected a string"):
        tokenizer.encode(None)


# --------------------------------------------------------------------------------------------------
# Learning a vocabulary
# --------------------------------------------------------------------------------------------------


def test_train_wordpiece_vocab_is_deterministic_with_special_tokens_first(sentences):
    vocab = train_wordpiece_vocab(sentences, vocab_size=600)
    assert vocab[:5] == SPECIAL_TOKENS == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert len(vocab) == 600 == len(set(vocab))
    assert all(train_wordpiece_vocab(sentences, vocab_size=600) == vocab for _ in range(2))
    assert any(token.startswith("##") and len(token) > 3 for token in vocab)  # merged continuations
    tokenizer = BertTokenizer(vocab)
    assert tokenizer.pad_token_id == 0
    unknown = sum(token == "[UNK]" for text in sentences[:500] for token in tokenizer.tokenize(text))
    assert unknown == 0  # every character of the training text is in the vocabulary


def test_train_wordpiece_vocab_min_frequency_and_errors():
    texts = [text for text, _ in synthetic_sentiment(num_examples=200)]
    alphabet_only = train_wordpiece_vocab(texts, vocab_size=500, min_frequency=10**9)
    learned = train_wordpiece_vocab(texts, vocab_size=500, min_frequency=2)
    assert all(len(token.removeprefix("##")) == 1 for token in alphabet_only[5:])  # no pair is frequent enough
    assert len(learned) > len(alphabet_only) and "movie" in learned
    with pytest.raises(ValueError, match="vocab_size"):
        train_wordpiece_vocab(texts, vocab_size=5)
    with pytest.raises(TypeError, match="not one string"):
        train_wordpiece_vocab("a single string", vocab_size=100)


# --------------------------------------------------------------------------------------------------
# Byte-pair encoding: bpe_merges against the tokenizers library's BpeTrainer
# --------------------------------------------------------------------------------------------------


def hugging_face_bpe_merges(word_counts: dict[str, int], num_merges: int) -> list[tuple[str, str]]:
    """The merges the ``tokenizers`` library's BpeTrainer learns from the same word counts."""
    alphabet = {char for word in word_counts for char in word}
    tokenizer = Tokenizer(BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    trainer = trainers.BpeTrainer(vocab_size=len(alphabet) + num_merges, min_frequency=0, special_tokens=[],
                                  show_progress=False)
    tokenizer.train_from_iterator([" ".join([word] * count) for word, count in word_counts.items()], trainer)
    return [tuple(merge) for merge in json.loads(tokenizer.to_str())["model"]["merges"]]


def merges_before_the_first_tie(word_counts: dict[str, int], merges: list[tuple[str, str]]) -> int:
    """How many of ``merges`` (learned from ``word_counts``) were chosen without a tie for the most frequent
    pair: where two pairs tie, the two implementations may choose differently. Counted here by splitting
    the words' strings, independently of bpe_merges."""
    words = {word: count for word, count in word_counts.items()}
    symbols = {word: list(word) for word in words}
    for step, pair in enumerate(merges):
        counts = collections.Counter()
        for word, count in words.items():
            for adjacent in zip(symbols[word], symbols[word][1:]):
                counts[adjacent] += count
        top = counts.most_common(2)
        if len(top) == 2 and top[0][1] == top[1][1]:
            return step
        for word in words:
            merged, rest = [], symbols[word]
            while rest:
                if len(rest) > 1 and (rest[0], rest[1]) == pair:
                    merged.append(rest[0] + rest[1])
                    rest = rest[2:]
                else:
                    merged.append(rest[0])
                    rest = rest[1:]
            symbols[word] = merged
    return len(merges)


def test_bpe_merges_match_the_tokenizers_library_on_pydoc_words():
    words = collections.Counter(word for document in pretraining_corpus() for sentence in document
                                for word in BasicTokenizer().tokenize(sentence))
    untied = merges_before_the_first_tie(dict(words), bpe_merges(dict(words), 300))
    assert untied >= 50, "too few merges without a tie to compare"
    assert bpe_merges(dict(words), untied) == hugging_face_bpe_merges(dict(words), untied)


def test_bpe_merges_by_hand():
    word_counts = {"low": 5, "lower": 2, "newest": 6, "widest": 3}
    merges = bpe_merges(word_counts, 5)
    # e-s occurs in newest (6) and widest (3): 9, the most; then es-t 9; l-o 7; lo-w 7; e-w 6 (in newest)
    assert merges == [("e", "s"), ("es", "t"), ("l", "o"), ("lo", "w"), ("e", "w")]
    assert apply_bpe("lowest", merges) == ["low", "est"] and apply_bpe("xyz", merges) == ["x", "y", "z"]
    # the tie between (n, ew) and (ew, est), 6 each, goes to the smaller pair in string order
    assert bpe_merges(word_counts, 6)[-1] == ("ew", "est")
    assert bpe_merges({"aaa": 1}, 5) == [("a", "a"), ("aa", "a")]  # left to right, no overlap: aa a, then aaa
    assert bpe_merges({"ab": 2, "": 3}, 10) == [("a", "b")]  # stops when no word has two symbols


@pytest.mark.parametrize("word_counts, num_merges, problem", [
    ({"a": 0}, 1, "positive counts"), ({"a": 1.5}, 1, "positive counts"), ({1: 2}, 1, "words (str)"),
    ({"ab": 1}, -1, "non-negative int"), ({"ab": 1}, 2.0, "non-negative int"),
])
def test_bpe_merges_names_bad_input(word_counts, num_merges, problem):
    with pytest.raises(ValueError, match=re.escape(problem)):
        bpe_merges(word_counts, num_merges)
