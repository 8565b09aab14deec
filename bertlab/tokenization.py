"""BERT's WordPiece tokenizer, written out in plain Python (chapter 06).

Text becomes token ids in three steps, as in BERT's ``tokenization.py`` (Devlin et al., 2019):

1. ``BasicTokenizer``: clean the text, lower-case it and strip accents, put spaces around CJK
   characters, then split on whitespace and punctuation: "Don't panic!" -> don ' t panic !
2. ``WordPieceTokenizer``: cut every word into the longest vocabulary pieces, left to right; a piece
   that continues a word carries the prefix ``##`` (Wu et al., 2016): "unaffable" -> un ##aff ##able.
3. ``BertTokenizer``: map pieces to ids and frame them for the model,
   [CLS] A [SEP] (segment 0) B [SEP] (segment 1) [PAD] ...

``BertTokenizer`` matches Hugging Face ``transformers.BertTokenizer`` (transformers 5, where
``BertTokenizerFast`` is the same class, backed by the ``tokenizers`` library) token for token, and
in its pair truncation and decoding too; tests/test_tokenization.py checks this over real text.
``train_wordpiece_vocab`` learns a vocabulary with the ``tokenizers`` library. ``bpe_merges`` learns
byte-pair encoding's merges in plain Python (Sennrich et al., 2016), and ``apply_bpe`` applies them.
"""

import os
import re
import unicodedata
from collections import Counter
from collections.abc import Container, Iterable, Mapping, Sequence
from pathlib import Path

import torch
from tokenizers import Tokenizer, normalizers, pre_tokenizers, trainers
from tokenizers.models import WordPiece

SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
MODEL_INPUT_NAMES = ("input_ids", "token_type_ids", "attention_mask")

# --------------------------------------------------------------------------------------------------
# Character classes, as BERT defines them
# --------------------------------------------------------------------------------------------------

# CJK Unified Ideographs and their extensions and compatibility blocks. Hangul, Hiragana and
# Katakana are not in these blocks: they are written with spaces and are split like other letters.
_CJK_RANGES = (
    (0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F),
)


def _is_whitespace(char: str) -> bool:
    """Space, tab, newline, carriage return, or any Unicode space separator (category Zs)."""
    return char in " \t\n\r" or unicodedata.category(char) == "Zs"


def _is_control(char: str) -> bool:
    """A Unicode control or format character (category C*), except tab and newlines (whitespace)."""
    return char not in "\t\n\r" and unicodedata.category(char).startswith("C")


def _is_punctuation(char: str) -> bool:
    """Any ASCII non-letter, non-digit symbol (so "$", "+", "^" too) or Unicode punctuation (P*)."""
    code = ord(char)
    if 33 <= code <= 47 or 58 <= code <= 64 or 91 <= code <= 96 or 123 <= code <= 126:
        return True
    return unicodedata.category(char).startswith("P")


def _is_cjk_character(char: str) -> bool:
    code = ord(char)
    return any(low <= code <= high for low, high in _CJK_RANGES)


# --------------------------------------------------------------------------------------------------
# Step 1 and 2: words, then word pieces
# --------------------------------------------------------------------------------------------------


class BasicTokenizer:
    """Split raw text into words and punctuation marks, as BERT does before WordPiece.

    In order: drop NUL, U+FFFD and control characters and turn every whitespace into a space; put
    spaces around CJK ideographs (each becomes a word); split on whitespace; when ``do_lower_case``,
    lower-case and strip accents (NFD decomposition, then drop the combining marks, category Mn:
    "Héllo" -> "hello"); finally make every punctuation character a token of its own.

    Lower-casing is one character at a time, as in Hugging Face's ``tokenizers``: a capital sigma that
    ends a word becomes "σ", where Python's ``str.lower`` of the word (and BERT's original Python
    tokenizer, which calls it) gives the final sigma "ς".
    """

    def __init__(self, do_lower_case: bool = True):
        self.do_lower_case = do_lower_case

    def tokenize(self, text: str) -> list[str]:
        """Return the words and punctuation marks of ``text``: "Hello, World!" -> hello , world !"""
        tokens = []
        for word in self._space_out_cjk(self._clean(text)).split():
            if self.do_lower_case:
                word = _strip_accents("".join(char.lower() for char in word))
            tokens.extend(_split_on_punctuation(word))
        return tokens

    @staticmethod
    def _clean(text: str) -> str:
        characters = []
        for char in text:
            if char in "\x00\ufffd" or _is_control(char):
                continue
            characters.append(" " if _is_whitespace(char) else char)
        return "".join(characters)

    @staticmethod
    def _space_out_cjk(text: str) -> str:
        return "".join(f" {char} " if _is_cjk_character(char) else char for char in text)


def _strip_accents(word: str) -> str:
    return "".join(char for char in unicodedata.normalize("NFD", word) if unicodedata.category(char) != "Mn")


def _split_on_punctuation(word: str) -> list[str]:
    """ "well-known!" -> ["well", "-", "known", "!"] """
    pieces, current = [], ""
    for char in word:
        if _is_punctuation(char):
            pieces += [current, char] if current else [char]
            current = ""
        else:
            current += char
    return pieces + [current] if current else pieces


def wordpiece_tokenize(
    word: str, vocab: Container[str], unk_token: str = "[UNK]", max_input_chars_per_word: int = 100
) -> list[str]:
    """Word pieces of one word, by greedy longest-match-first WordPiece (Wu et al., 2016).

    The word w is cut left to right: at position i take the longest w[i:j] in ``vocab``, written
    "##" + w[i:j] when i > 0 (a continuation), and go on from j. If some position has no match, or
    the word has more than ``max_input_chars_per_word`` characters, the whole word becomes
    ``unk_token``. With un, ##aff and ##able in the vocabulary: "unaffable" -> un ##aff ##able.

    Args:
        word: one word, as the BasicTokenizer produces it (no whitespace).
        vocab: anything that answers ``piece in vocab``: a set of tokens or a ``{token: id}`` dict.
    """
    if len(word) > max_input_chars_per_word:
        return [unk_token]
    pieces, start = [], 0
    while start < len(word):
        for end in range(len(word), start, -1):  # longest candidate first
            piece = word[start:end] if start == 0 else "##" + word[start:end]
            if piece in vocab:
                break
        else:
            return [unk_token]
        pieces.append(piece)
        start = end
    return pieces


class WordPieceTokenizer:
    """Greedy longest-match-first WordPiece (Wu et al., 2016), on text the BasicTokenizer produced:
    :func:`wordpiece_tokenize` applied to every word, "unaffable" -> un ##aff ##able, "xyz\u2603" -> [UNK]."""

    def __init__(self, vocab: Iterable[str], unk_token: str = "[UNK]", max_input_chars_per_word: int = 100):
        self.vocab = frozenset(vocab)  # a dict gives its tokens
        self.unk_token = unk_token
        self.max_input_chars_per_word = max_input_chars_per_word

    def tokenize(self, text: str) -> list[str]:
        """Word pieces of every whitespace-separated word of ``text``."""
        return [piece for word in text.split() for piece in self.tokenize_word(word)]

    def tokenize_word(self, word: str) -> list[str]:
        """Word pieces of one word: "playing" -> ["play", "##ing"]."""
        return wordpiece_tokenize(word, self.vocab, self.unk_token, self.max_input_chars_per_word)


# --------------------------------------------------------------------------------------------------
# Vocabulary files
# --------------------------------------------------------------------------------------------------


def load_vocab(vocab: Sequence[str] | dict[str, int] | str | os.PathLike) -> dict[str, int]:
    """Return the vocabulary as ``{token: id}``, with ids 0 .. V-1.

    ``vocab`` is a list of tokens (the id is the position), a ``{token: id}`` dict, or the path of a
    ``vocab.txt`` (one token per line, line i holding the token of id i) or of a folder holding one.
    """
    if isinstance(vocab, (str, os.PathLike)):
        tokens = _read_vocab_file(Path(vocab))
    elif isinstance(vocab, dict):
        if sorted(vocab.values()) != list(range(len(vocab))):
            raise ValueError(f"the ids of a vocabulary dict must be 0 .. {len(vocab) - 1}, each used once")
        return dict(sorted(vocab.items(), key=lambda item: item[1]))
    else:
        tokens = list(vocab)
    ids = {}
    for index, token in enumerate(tokens):
        if token in ids:
            raise ValueError(f"token {token!r} appears twice in the vocabulary (ids {ids[token]} and {index})")
        ids[token] = index
    return ids


def _read_vocab_file(path: Path) -> list[str]:
    if path.is_dir():
        path = path / "vocab.txt"
    if not path.is_file():
        raise FileNotFoundError(f"vocabulary file {path} does not exist")
    try:
        lines = path.read_text(encoding="utf-8").split("\n")
    except UnicodeDecodeError as error:
        raise ValueError(f"vocabulary file {path} is not UTF-8 text ({error.reason} at byte {error.start}): "
                         "a vocab.txt holds one token per line") from None
    if lines[-1] == "":  # the newline that ends the last line
        lines.pop()
    return [line.rstrip("\r") for line in lines]


# --------------------------------------------------------------------------------------------------
# Step 3: the full tokenizer
# --------------------------------------------------------------------------------------------------


class BertTokenizer:
    """BERT's tokenizer: text -> word pieces -> ids, framed as [CLS] A [SEP] B [SEP] [PAD] ...

    Args:
        vocab: a list of tokens, a ``{token: id}`` dict, or the path of a ``vocab.txt`` (or of its
            folder). It must contain the five ``SPECIAL_TOKENS``, anywhere.
        do_lower_case: lower-case and strip accents (an "uncased" model) or not ("cased").

    The special tokens are recognized in raw text when written exactly ("a [MASK] b"), as Hugging
    Face does, so that masked sentences can be typed in. Everything matches
    ``transformers.BertTokenizer`` built from the same ``vocab.txt``.
    """

    def __init__(self, vocab: Sequence[str] | dict[str, int] | str | os.PathLike, do_lower_case: bool = True):
        self.vocab = load_vocab(vocab)
        missing = [token for token in SPECIAL_TOKENS if token not in self.vocab]
        if missing:
            raise ValueError(f"the vocabulary lacks the special token(s) {missing}; BERT needs all of {SPECIAL_TOKENS}")
        self.ids_to_tokens = list(self.vocab)  # load_vocab orders the tokens by id
        self.do_lower_case = do_lower_case
        self.basic_tokenizer = BasicTokenizer(do_lower_case)
        self.wordpiece_tokenizer = WordPieceTokenizer(self.vocab, unk_token="[UNK]")
        self.pad_token_id, self.unk_token_id, self.cls_token_id, self.sep_token_id, self.mask_token_id = (
            self.vocab[token] for token in SPECIAL_TOKENS
        )
        self.all_special_ids = frozenset(self.vocab[token] for token in SPECIAL_TOKENS)
        self._special_token_pattern = re.compile("(" + "|".join(map(re.escape, SPECIAL_TOKENS)) + ")")

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def tokenize(self, text: str) -> list[str]:
        """Word pieces of ``text``: "The unaffable [MASK]." -> the un ##aff ##able [MASK] ."""
        if not isinstance(text, str):
            raise TypeError(f"expected a string to tokenize, got {type(text).__name__}")
        tokens = []
        for chunk in self._special_token_pattern.split(text):  # odd positions hold special tokens
            if chunk in SPECIAL_TOKENS:
                tokens.append(chunk)
            else:
                for word in self.basic_tokenizer.tokenize(chunk):
                    tokens.extend(self.wordpiece_tokenizer.tokenize_word(word))
        return tokens

    def convert_tokens_to_ids(self, tokens: str | Sequence[str]) -> int | list[int]:
        """Id of one token, or ids of a list of tokens; tokens outside the vocabulary give [UNK]."""
        if isinstance(tokens, str):
            return self.vocab.get(tokens, self.unk_token_id)
        return [self.vocab.get(token, self.unk_token_id) for token in tokens]

    def convert_ids_to_tokens(self, ids: int | Sequence[int] | torch.Tensor) -> str | list[str]:
        """Token of one id, or tokens of a sequence of ids (a list or a 1-D tensor)."""
        if isinstance(ids, int) or (isinstance(ids, torch.Tensor) and ids.dim() == 0):
            return self._token(int(ids))
        return [self._token(index) for index in _as_id_list(ids)]

    def _token(self, index: int) -> str:
        if not 0 <= index < self.vocab_size:
            raise ValueError(f"token id {index} is outside the vocabulary (ids 0 .. {self.vocab_size - 1})")
        return self.ids_to_tokens[index]

    def encode(
        self,
        text: str,
        text_pair: str | None = None,
        max_length: int | None = None,
        padding: bool | str = False,
        truncation: bool | str = False,
    ) -> dict[str, list[int]]:
        """Ids of one text, or of a pair of texts, framed for BERT.

        [CLS] A [SEP] has token_type_ids 0; a pair adds B [SEP] with token_type_ids 1. The
        attention_mask is 1 on tokens and 0 on padding.

        Args:
            max_length: the length to truncate to and to pad to with ``padding="max_length"``.
            padding: ``"max_length"`` pads with [PAD] up to ``max_length``; ``True`` (or
                ``"longest"``) pads to the longest sequence of a batch, so nothing for one text.
            truncation: ``True`` or ``"longest_first"`` trims A and B so that the whole fits in
                ``max_length`` (see ``truncate_longest_first``). Without it, a longer text is kept.

        Returns:
            ``{"input_ids", "token_type_ids", "attention_mask"}``, each a list of ints.
        """
        padding = _padding_strategy(padding, max_length)
        truncate = _truncation_strategy(truncation)
        if truncate and max_length is None:
            raise ValueError("truncation needs a max_length")
        second = None if text_pair is None else self.tokenize(text_pair)
        return encode(self.tokenize(text), second, self.vocab, max_length, truncation=truncate,
                      padding=padding == "max_length")

    def batch_encode(
        self,
        texts: str | Sequence[str],
        text_pairs: str | Sequence[str] | None = None,
        max_length: int | None = None,
        padding: bool | str = True,
        truncation: bool | str = False,
        return_tensors: str | None = "pt",
    ) -> dict[str, torch.Tensor] | dict[str, list[list[int]]]:
        """Encode a batch of texts (or of pairs) with ``encode``, padded to a common length.

        ``padding=True`` (or ``"longest"``) pads to the longest sequence of the batch,
        ``"max_length"`` to ``max_length``. One string counts as a batch of one.

        Returns:
            ``{"input_ids", "token_type_ids", "attention_mask"}``: with ``return_tensors="pt"``
            each a (B, N) ``torch.long`` tensor; with ``return_tensors=None`` lists of lists.
        """
        texts = [texts] if isinstance(texts, str) else list(texts)
        if text_pairs is not None:
            text_pairs = [text_pairs] if isinstance(text_pairs, str) else list(text_pairs)
            if len(text_pairs) != len(texts):
                raise ValueError(f"got {len(texts)} texts but {len(text_pairs)} text_pairs")
        if not texts:
            raise ValueError("texts is empty: there is nothing to encode")
        if return_tensors not in ("pt", None):
            raise ValueError(f'return_tensors must be "pt" or None, got {return_tensors!r}')
        padding = _padding_strategy(padding, max_length)
        encodings = [
            self.encode(text, None if text_pairs is None else text_pairs[i], max_length, truncation=truncation)
            for i, text in enumerate(texts)
        ]
        if padding is not None:
            length = max_length if padding == "max_length" else max(len(e["input_ids"]) for e in encodings)
            encodings = [self._pad(encoding, length) for encoding in encodings]
        batch = {name: [encoding[name] for encoding in encodings] for name in MODEL_INPUT_NAMES}
        if return_tensors is None:
            return batch
        lengths = sorted({len(ids) for ids in batch["input_ids"]})
        if len(lengths) > 1:
            raise ValueError(
                f"the encoded texts have different lengths {lengths} and cannot form one tensor: "
                "use padding=True, or truncation=True with padding='max_length'"
            )
        return {name: torch.tensor(values, dtype=torch.long) for name, values in batch.items()}

    __call__ = batch_encode

    def _pad(self, encoding: dict[str, list[int]], length: int) -> dict[str, list[int]]:
        return _pad(encoding, length, self.pad_token_id)

    def decode(self, ids: Sequence[int] | torch.Tensor, skip_special_tokens: bool = True) -> str:
        """Text of a sequence of ids: word pieces joined, as Hugging Face's WordPiece decoder.

        A ``##`` piece is glued to the token before it, every other token is preceded by a space,
        and ".", ",", "?" and "!" are glued to the word before them. ``skip_special_tokens`` drops
        all five special tokens ([UNK] too, as Hugging Face does). Lower-casing and the spaces the
        BasicTokenizer added are not undone: "Don't!" decodes to "don ' t!".
        """
        tokens = self.convert_ids_to_tokens(_as_id_list(ids))
        if skip_special_tokens:
            tokens = [token for token in tokens if token not in SPECIAL_TOKENS]
        pieces = []
        for position, token in enumerate(tokens):
            if position > 0:
                token = token[2:] if token.startswith("##") else " " + token
            pieces.append(_cleanup_spaces(token))
        return "".join(pieces)

    def get_special_tokens_mask(self, ids: Sequence[int] | torch.Tensor) -> list[int]:
        """1 where ``ids`` (already framed) holds one of the five special tokens, else 0."""
        return [int(index in self.all_special_ids) for index in _as_id_list(ids)]

    def save_vocabulary(self, folder: str | os.PathLike) -> Path:
        """Write ``folder/vocab.txt`` (one token per line, in id order) and return its path."""
        path = Path(folder) / "vocab.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(token + "\n" for token in self.ids_to_tokens), encoding="utf-8")
        return path


def encode(
    tokens_a: Sequence[str],
    tokens_b: Sequence[str] | None,
    vocab: dict[str, int],
    max_length: int | None = None,
    *,
    truncation: bool = True,
    padding: bool = True,
) -> dict[str, list[int]]:
    """Frame one text, or a pair, of word pieces for BERT: ids, segments and attention mask.

        input_ids       [CLS] A ... [SEP]                or  [CLS] A ... [SEP] B ... [SEP]
        token_type_ids    0   0 ...   0                        0   0 ...   0   1 ...   1
        attention_mask    1   1 ...   1                        1   1 ...   1   1 ...   1

    A token that is not in ``vocab`` gets the id of [UNK]. With ``max_length``, A and B are first
    trimmed to fit in it together with the special tokens (``truncate_longest_first``, when
    ``truncation``), then [PAD] is appended (token type 0, attention 0) up to ``max_length`` (when
    ``padding``). Without ``max_length`` nothing is trimmed or padded.

    Args:
        tokens_a: the word pieces of the first text (segment A).
        tokens_b: those of the second text (segment B), or None for a single text.
        vocab: ``{token: id}``, holding the special tokens [PAD], [UNK], [CLS] and [SEP].

    Returns:
        ``{"input_ids", "token_type_ids", "attention_mask"}``, each a list of ints.

    Raises:
        ValueError: when ``max_length`` leaves no room for the special tokens, or ``vocab`` lacks one.
    """
    missing = [token for token in ("[PAD]", "[UNK]", "[CLS]", "[SEP]") if token not in vocab]
    if missing:
        raise ValueError(f"the vocabulary lacks the special token(s) {missing}")
    unk, cls, sep = vocab["[UNK]"], vocab["[CLS]"], vocab["[SEP]"]
    first = [vocab.get(token, unk) for token in tokens_a]
    second = None if tokens_b is None else [vocab.get(token, unk) for token in tokens_b]
    num_special = 2 if second is None else 3
    if max_length is not None and max_length < num_special:
        framing = "[CLS] A [SEP]" if second is None else "[CLS] A [SEP] B [SEP]"
        raise ValueError(f"max_length={max_length} is too small for the {num_special} special tokens of {framing}")
    if truncation and max_length is not None:
        first, second = truncate_longest_first(first, second, max_length - num_special)
    input_ids = [cls, *first, sep]
    token_type_ids = [0] * len(input_ids)
    if second is not None:
        input_ids += [*second, sep]
        token_type_ids += [1] * (len(second) + 1)
    encoding = {"input_ids": input_ids, "token_type_ids": token_type_ids, "attention_mask": [1] * len(input_ids)}
    return _pad(encoding, max_length, vocab["[PAD]"]) if padding and max_length is not None else encoding


def _pad(encoding: dict[str, list[int]], length: int, pad_token_id: int) -> dict[str, list[int]]:
    """Right-pad to ``length`` with [PAD] ids, token type 0 and attention 0 (never truncates)."""
    extra = max(length - len(encoding["input_ids"]), 0)
    fill = {"input_ids": pad_token_id, "token_type_ids": 0, "attention_mask": 0}
    return {name: values + [fill[name]] * extra for name, values in encoding.items()}


# The replacements the ``tokenizers`` WordPiece decoder applies to each token (with its leading space).
_CLEANUP_REPLACEMENTS = (
    (" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"), (" n't", "n't"), (" 'm", "'m"),
    (" do not", " don't"), (" 's", "'s"), (" 've", "'ve"), (" 're", "'re"),
)


def _cleanup_spaces(token: str) -> str:
    for old, new in _CLEANUP_REPLACEMENTS:
        token = token.replace(old, new)
    return token


def _as_id_list(ids: Sequence[int] | torch.Tensor) -> list[int]:
    if isinstance(ids, torch.Tensor):
        if ids.dim() != 1:
            raise ValueError(f"expected a 1-D tensor of ids, got shape {tuple(ids.shape)}")
        return ids.tolist()
    return [int(index) for index in ids]


def _padding_strategy(padding: bool | str | None, max_length: int | None) -> str | None:
    """None (no padding), "longest" or "max_length", from the Hugging Face style argument."""
    strategies = {False: None, None: None, "do_not_pad": None, True: "longest", "longest": "longest",
                  "max_length": "max_length"}
    if padding not in strategies:
        raise ValueError(f"padding must be True, False, 'longest' or 'max_length', got {padding!r}")
    if strategies[padding] == "max_length" and max_length is None:
        raise ValueError("padding='max_length' needs a max_length")
    return strategies[padding]


def _truncation_strategy(truncation: bool | str | None) -> bool:
    """Whether to truncate; only Hugging Face's default strategy, "longest_first", is offered."""
    strategies = {False: False, None: False, "do_not_truncate": False, True: True, "longest_first": True}
    if truncation not in strategies:
        raise ValueError(f"truncation must be True, False or 'longest_first', got {truncation!r}")
    return strategies[truncation]


def truncate_longest_first(
    first: list[int], second: list[int] | None, budget: int
) -> tuple[list[int], list[int] | None]:
    """Trim one or two token lists so that together they keep at most ``budget`` tokens.

    One list keeps its first ``budget`` tokens. For a pair, with lengths s <= l (the shorter and
    the longer one; on a tie, the first text counts as the shorter): if s <= budget - s, the shorter
    is kept whole and the longer cut to budget - s; otherwise the shorter keeps floor(budget / 2)
    and the longer ceil(budget / 2). This is the "longest_first" rule of the ``tokenizers`` library
    that ``transformers.BertTokenizer`` uses. (BERT's original ``_truncate_seq_pair`` drops one
    token at a time from the longer text, the second on a tie, and so gives the odd token to the
    first text instead.)
    """
    if second is None:
        return first[:budget], None
    if len(first) + len(second) <= budget:
        return first, second
    shorter, longer = sorted((len(first), len(second)))
    if 2 * shorter <= budget:
        keep_shorter, keep_longer = shorter, budget - shorter
    else:
        keep_shorter, keep_longer = budget // 2, budget - budget // 2
    if len(first) > len(second):
        return first[:keep_longer], second[:keep_shorter]
    return first[:keep_shorter], second[:keep_longer]


# --------------------------------------------------------------------------------------------------
# Learning a vocabulary
# --------------------------------------------------------------------------------------------------


def train_wordpiece_vocab(
    texts: Iterable[str], vocab_size: int, min_frequency: int = 2, *, do_lower_case: bool = True
) -> list[str]:
    """Learn a WordPiece vocabulary from ``texts`` with the ``tokenizers`` library.

    The texts are normalized and split into words as by ``BasicTokenizer`` (``BertNormalizer``,
    ``BertPreTokenizer``); the ``WordPieceTrainer`` starts from every character (and its ``##``
    continuation) and repeatedly merges the most frequent adjacent pair seen at least
    ``min_frequency`` times, until there are ``vocab_size`` tokens (more when the characters alone
    need more).

    Returns:
        The tokens in id order: ``SPECIAL_TOKENS`` first ([PAD] = 0, [UNK] = 1, [CLS] = 2,
        [SEP] = 3, [MASK] = 4), then the ``##`` characters, the characters and the merges.
        Training is deterministic: the same texts give the same list.
    """
    if isinstance(texts, str):
        raise TypeError("texts must be an iterable of strings, not one string")
    texts = list(texts)
    if vocab_size <= len(SPECIAL_TOKENS):
        raise ValueError(f"vocab_size must exceed the {len(SPECIAL_TOKENS)} special tokens, got {vocab_size}")
    if not any(text.strip() for text in texts):
        raise ValueError("texts holds no text to learn a vocabulary from")
    tokenizer = Tokenizer(WordPiece(unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=do_lower_case)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    # The trainer numbers the "##" characters in hash-map order and breaks ties between equally
    # frequent pairs by those numbers, so two runs could learn different vocabularies. Registering
    # the "##" characters first, in sorted order, fixes their numbers and makes training repeatable.
    continuations = set()
    for text in texts:
        for word, _ in tokenizer.pre_tokenizer.pre_tokenize_str(tokenizer.normalizer.normalize_str(text)):
            continuations.update(word[1:])
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=SPECIAL_TOKENS + ["##" + char for char in sorted(continuations)],
        continuing_subword_prefix="##",
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer)
    vocab = tokenizer.get_vocab()
    return sorted(vocab, key=vocab.get)


def _pair_counts(words: Mapping[tuple[str, ...], int]) -> Counter:
    """count(a, b) = sum over the words w of c_w times the number of adjacent pairs (a, b) in w."""
    counts = Counter()
    for symbols, count in words.items():
        for pair in zip(symbols, symbols[1:]):
            counts[pair] += count
    return counts


def _merge_pair(symbols: tuple[str, ...], pair: tuple[str, str]) -> tuple[str, ...]:
    """``symbols`` with every occurrence of ``pair``, left to right and without overlap, made one symbol."""
    merged, i = [], 0
    while i < len(symbols):
        if i + 1 < len(symbols) and (symbols[i], symbols[i + 1]) == pair:
            merged.append(symbols[i] + symbols[i + 1])
            i += 2
        else:
            merged.append(symbols[i])
            i += 1
    return tuple(merged)


def bpe_merges(word_counts: Mapping[str, int], num_merges: int) -> list[tuple[str, str]]:
    """Byte-pair encoding's merges learned from word counts (Sennrich et al., 2016, algorithm 1).

    Every word starts as its characters (no end-of-word marker, as in the ``tokenizers`` library's
    default). Each step counts the adjacent pairs of symbols over all the words, an occurrence in
    word w weighing its count c_w,

        count(a, b) = sum_w c_w * #{i : (s_i, s_{i+1}) = (a, b) in w},

    takes the most frequent pair (on a tie, the smallest pair in string order), and replaces its
    occurrences in every word, left to right without overlap ("aaa" -> "aa" "a"), by the symbol a + b.

    Args:
        word_counts: word -> number of occurrences (a positive int); empty words are ignored.
        num_merges: the number of merges to learn; fewer are returned when no word has two symbols left.

    Returns:
        The merges (a, b), in the order learned.
    """
    if isinstance(num_merges, bool) or not isinstance(num_merges, int) or num_merges < 0:
        raise ValueError(f"num_merges must be a non-negative int, got {num_merges!r}")
    for word, count in word_counts.items():
        if not isinstance(word, str) or isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ValueError(f"word_counts must map words (str) to positive counts (int), got {word!r}: {count!r}")
    words = {tuple(word): count for word, count in word_counts.items() if word}
    merges = []
    for _ in range(num_merges):
        counts = _pair_counts(words)
        if not counts:
            break
        best = min(counts, key=lambda pair: (-counts[pair], pair))
        merges.append(best)
        words = {_merge_pair(symbols, best): count for symbols, count in words.items()}
    return merges


def apply_bpe(word: str, merges: Sequence[tuple[str, str]]) -> list[str]:
    """The symbols of ``word`` after applying ``merges`` in the order they were learned."""
    symbols = tuple(word)
    for pair in merges:
        symbols = _merge_pair(symbols, pair)
    return list(symbols)
