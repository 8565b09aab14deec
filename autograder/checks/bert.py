"""Checks of chapter 06 (BERT: tokenization and model), called by the hidden tests of ``chapters/06_bert``.

Four exercises, graded against the reference package:

- ``wordpiece_tokenize(word, vocab, unk_token="[UNK]", max_input_chars_per_word=100)`` against
  :func:`bertlab.tokenization.wordpiece_tokenize`;
- ``encode(tokens_a, tokens_b, vocab, max_length=None)`` against :func:`bertlab.tokenization.encode`
  (truncation and padding to ``max_length`` when it is given);
- the class ``BertEmbeddings(config)`` against :class:`bertlab.bert.BertEmbeddings`: the student's
  module gets the reference's weights and must give the same output, and drop entries in training;
- ``count_parameters(config, pooler=True)`` against :func:`bertlab.bert.count_parameters`.

Each ``check_<name>`` draws its cases from a generator seeded by the exercise's name, names the
typical mistakes it recognises, and forbids the reference and the library code that does the
exercise's job. ``forbid=False`` lifts that rule (the tests use it to run a check on the reference).
"""

import math
from dataclasses import dataclass
from functools import partial

import tokenizers
import torch
import torch.nn.functional as F
from torch import nn

from autograder.checks.framework import (
    Case,
    DEFAULT_TOLERANCES,
    Exercise,
    Mistake,
    check_functions,
    describe_difference,
    diagnose,
    fail,
    generator_for,
    random_choice,
    random_integer,
    run_student,
)
from autograder.checks.modules import DropoutHints, build_with_reference_weights, check_dropout, tiny_bert_config
from bertlab import bert as bert_reference
from bertlab import tokenization as tokenization_reference
from bertlab.bert import BertConfig

SPECIAL_TOKENS = tokenization_reference.SPECIAL_TOKENS  # [PAD], [UNK], [CLS], [SEP], [MASK]


# --------------------------------------------------------------------------------------------------
# wordpiece_tokenize
# --------------------------------------------------------------------------------------------------

#: The Rust library behind Hugging Face's fast tokenizers: its methods are built-ins.
TOKENIZERS_LIBRARY_ENCODING = (tokenizers.Tokenizer.encode, tokenizers.Tokenizer.encode_batch,
                               tokenizers.Tokenizer.encode_batch_fast, tokenizers.Tokenizer.async_encode,
                               tokenizers.Tokenizer.async_encode_batch, tokenizers.Tokenizer.async_encode_batch_fast)

WORDPIECE_FORBIDDEN = (
    *TOKENIZERS_LIBRARY_ENCODING,
    tokenizers.models.Model.tokenize,
    tokenization_reference.wordpiece_tokenize,
    tokenization_reference.WordPieceTokenizer.tokenize_word,
    tokenization_reference.WordPieceTokenizer.tokenize,
    tokenization_reference.BertTokenizer.tokenize,
    "transformers.models.bert.tokenization_bert_legacy.WordpieceTokenizer.tokenize",
    "transformers.tokenization_utils_tokenizers.TokenizersBackend.tokenize",
    "transformers.tokenization_python.PythonBackend.tokenize",
)

#: The example of BERT's tokenizer, "unaffable" -> un ##aff ##able, with pieces that a wrong
#: search would pick instead: single characters (shortest match), pieces without "##".
UNAFFABLE_VOCAB = ["[PAD]", "[UNK]", "un", "u", "n", "aff", "able", "##aff", "##able", "##a", "##b", "##e",
                   "##f", "##l", "##n", "##ab", "##ff", "##s"]
#: What the words of the cases over UNAFFABLE_VOCAB are made of: the long pieces, each both a first
#: piece and a continuation (so that a wrong use of "##" still finds pieces, and the mistakes give
#: different outputs), and single characters whose continuation ("##e") no longer piece contains.
UNAFFABLE_LONG_PIECES = ("aff", "able")
UNAFFABLE_SINGLE_CHARACTERS = ("e", "l", "n", "s")
UNAFFABLE_UNSTARTED = "befls"  # letters that begin no first piece (they only continue a word)
#: The realistic vocabulary: stems, and suffixes of which the longest match is not the only cut.
REALISTIC_VOCAB = ["[UNK]", "play", "##ing", "##ed", "##er", "##s", "token", "##ization", "##ize", "##izer", "##iz",
                   "##ation", "to", "##ken", "the", "t", "##o", "##k"]
REALISTIC_STEMS = ("play", "token", "to", "the")
REALISTIC_SUFFIXES = ("ing", "ed", "er", "s", "ization", "ize", "izer", "ation", "ken", "o", "k")
#: Characters that no vocabulary of the cases contains, and the unk_tokens a case may ask for.
UNKNOWN_CHARACTERS = "\u2603\u00e9\u00df\u03a9\u4e2d\u00f1\u20ac\u2605?!"
OTHER_UNK_TOKENS = ("<unk>", "[UNKNOWN]", "<?>", "@@UNK@@")


def _as_vocab_dict(tokens) -> dict[str, int]:
    return {token: index for index, token in enumerate(tokens)}


def _random_wordpiece_case(generator: torch.Generator, number: int) -> Case:
    """A vocabulary of random pieces over the alphabet "abcd" and a random word: many overlapping
    candidates, so the longest match differs from other choices."""
    alphabet = "abcd"

    def random_string(length):
        return "".join(alphabet[random_integer(generator, 0, 3)] for _ in range(length))

    letters = [letter for letter in alphabet if number % 2 == 0 or letter != "d"]  # odd cases: "d" unknown
    pieces = set(letters) | {"##" + letter for letter in letters}
    while len(pieces) < 24:
        piece = random_string(random_integer(generator, 2, 4)).replace("d", "" if number % 2 else "d") or "a"
        pieces.add(piece if random_integer(generator, 0, 1) else "##" + piece)
    word = random_string(random_integer(generator, 5, 12))
    vocab = _as_vocab_dict(["[UNK]", *sorted(pieces)])
    return Case(f"word {word!r}, a random vocabulary of {len(vocab)} pieces over 'abcd'", (word, vocab))


def wordpiece_tokenize_cases() -> list[Case]:
    """BERT's "unaffable" vocabulary, with distracting shorter pieces, then the edge cases: a word that is
    a piece, one-character continuations, realistic pieces, a greedy cut that gets stuck, unknown
    characters, the length limit on both sides, a set, another unk_token, random vocabularies.

    The words (and the stuck greedy cut's letters) are drawn: made of the pieces of their vocabulary,
    so that each case still tests what its description says whatever the run's seed.
    """
    g = generator_for("wordpiece_tokenize")
    unaffable = _as_vocab_dict(UNAFFABLE_VOCAB)
    realistic = _as_vocab_dict(REALISTIC_VOCAB)

    def joined(pieces, low=1, high=3):
        return "".join(random_choice(g, pieces) for _ in range(random_integer(g, low, high)))

    def unaffable_word(first, low=5, high=12):
        """``first`` (a long piece when None) and ``low`` to ``high`` long pieces: a word that needs no
        one-character piece."""
        first = random_choice(g, UNAFFABLE_LONG_PIECES) if first is None else first
        return first + joined(UNAFFABLE_LONG_PIECES, low, high)

    def with_unknown_character(word):
        """``word`` with a character no piece contains, after its first character (so pieces come before it)."""
        position = random_integer(g, 1, len(word))
        return word[:position] + random_choice(g, UNKNOWN_CHARACTERS) + word[position:]

    letters = "abcdefghijklmnopqrstuvwxyz"
    long_pieces, like_unaffable = unaffable_word(None), unaffable_word("un")
    whole = joined(letters, 3, 8)
    single_characters = (random_choice(g, ("un", *UNAFFABLE_LONG_PIECES)) + joined(UNAFFABLE_LONG_PIECES, 2, 6)
                         + joined(UNAFFABLE_SINGLE_CHARACTERS, 2, 5))
    realistic_words = [random_choice(g, REALISTIC_STEMS) + joined(REALISTIC_SUFFIXES, 2, 5) for _ in range(2)]
    # four distinct letters x, y, z, w: the word xyz and the vocabulary {x, xy, ##yz, ##w}
    stuck = "".join(letters[i] for i in torch.randperm(26, generator=g)[:4].tolist())
    greedy = _as_vocab_dict(["[UNK]", stuck[0], stuck[:2], "##" + stuck[1:3], "##" + stuck[3]])
    unknown = with_unknown_character(unaffable_word("un"))
    unstarted = random_choice(g, UNAFFABLE_UNSTARTED) + unaffable_word("")
    long_word = unaffable_word(None)
    in_a_set = unaffable_word("un")
    other_unk = random_choice(g, OTHER_UNK_TOKENS)
    with_other_unk = with_unknown_character(unaffable_word("un"))
    too_long = joined("ab", 101, 140)
    return [
        Case(f"word {long_pieces!r}, vocab with aff, ##able, ##aff, able and single characters",
             (long_pieces, unaffable)),
        Case(f"word {like_unaffable!r}, like BERT's example 'unaffable': vocab with un, ##aff, ##able and shorter "
             "pieces", (like_unaffable, unaffable)),
        Case(f"word {whole!r}, which is itself in the vocabulary (added to it)",
             (whole, _as_vocab_dict([*UNAFFABLE_VOCAB, whole]))),
        Case(f"word {single_characters!r}: one-character continuations", (single_characters, unaffable)),
        *(Case(f"word {word!r}, a realistic vocabulary", (word, realistic)) for word in realistic_words),
        Case(f"word {stuck[:3]!r} with vocab {{{', '.join(list(greedy)[1:])}}}: greedy longest match, no backtracking",
             (stuck[:3], greedy)),
        Case(f"word {unknown!r} with a character that no piece contains", (unknown, unaffable)),
        Case(f"word {unstarted!r}: no piece starts it", (unstarted, unaffable)),
        Case(f"word {long_word!r} ({len(long_word)} characters), max_input_chars_per_word={len(long_word)}",
             (long_word, unaffable), {"max_input_chars_per_word": len(long_word)}),
        Case(f"word {long_word!r} ({len(long_word)} characters), max_input_chars_per_word={len(long_word) - 1}",
             (long_word, unaffable), {"max_input_chars_per_word": len(long_word) - 1}),
        Case(f"word {in_a_set!r}, vocab given as a set", (in_a_set, frozenset(UNAFFABLE_VOCAB))),
        Case(f"word {with_other_unk!r}, unk_token={other_unk!r}", (with_other_unk, unaffable),
             {"unk_token": other_unk}),
        *(_random_wordpiece_case(g, number) for number in range(6)),
        Case(f"a word of {len(too_long)} letters a and b: longer than the default max_input_chars_per_word=100",
             (too_long, {"a": 0, "b": 1, "##a": 2, "##b": 3})),
    ]


def _wordpiece_variant(*, shortest=False, prefix_first=False, prefix_never=False, on_failure="unk",
                       shortest_candidate=1, whole_rest=True, limit="greater", unk="given"):
    """A WordPiece with one of the typical mistakes, chosen by the keyword arguments."""

    def wordpiece_tokenize(word, vocab, unk_token="[UNK]", max_input_chars_per_word=100):
        unknown = unk_token if unk == "given" else "[UNK]"
        too_long = {"greater": len(word) > max_input_chars_per_word,
                    "greater_equal": len(word) >= max_input_chars_per_word, "none": False}[limit]
        if too_long:
            return [unknown]
        pieces, start = [], 0
        while start < len(word):
            last = len(word) if whole_rest else len(word) - 1
            ends = range(last, start + shortest_candidate - 1, -1)
            found = None
            for end in (reversed(ends) if shortest else ends):
                prefixed = (start > 0 or prefix_first) and not prefix_never
                piece = ("##" if prefixed else "") + word[start:end]
                if piece in vocab:
                    found = piece, end
                    break
            if found is None:
                if on_failure == "unk":
                    return [unknown]
                if on_failure == "keep":
                    return pieces + [unknown]
                pieces.append(unknown)  # "skip": one [UNK] for the character, then go on
                start += 1
                continue
            pieces.append(found[0])
            start = found[1]
        return pieces

    return wordpiece_tokenize


def _wordpiece_backtracking(word, vocab, unk_token="[UNK]", max_input_chars_per_word=100):
    """A segmentation into vocabulary pieces found by trying every split (not greedy)."""
    if len(word) > max_input_chars_per_word:
        return [unk_token]

    def search(start):
        if start == len(word):
            return []
        for end in range(len(word), start, -1):
            piece = word[start:end] if start == 0 else "##" + word[start:end]
            if piece in vocab:
                rest = search(end)
                if rest is not None:
                    return [piece, *rest]
        return None

    found = search(0)
    return [unk_token] if found is None else found


WHOLE_WORD_HINT = ("when no piece matches at some position, the WHOLE word becomes unk_token: return "
                   "[unk_token], not the pieces found so far, and do not skip the character and go on.")

#: In this order: a mistake that gives [UNK] for most words (whole_rest=False) comes last.
WORDPIECE_MISTAKES = (
    Mistake(_wordpiece_backtracking,
            "WordPiece is greedy: it takes the longest match and never goes back to try a shorter one, "
            "so a word whose greedy cut gets stuck becomes unk_token even if another cut would work."),
    Mistake(_wordpiece_variant(shortest=True),
            "take the LONGEST piece in the vocabulary at each position: try the end positions from "
            "len(word) down to start + 1 and stop at the first match, not the other way round."),
    Mistake(_wordpiece_variant(shortest_candidate=2),
            "a piece may be a single character (word[start:start + 1], e.g. '##a'): let the end position "
            "go down to start + 1."),
    Mistake(_wordpiece_variant(prefix_first=True),
            "only continuations carry '##': the first piece of a word (start = 0) is looked up and "
            "returned without the prefix."),
    Mistake(_wordpiece_variant(prefix_never=True),
            "a piece that continues a word (start > 0) is looked up and returned as '##' + "
            "word[start:end]."),
    Mistake(_wordpiece_variant(on_failure="keep"), WHOLE_WORD_HINT),
    Mistake(_wordpiece_variant(on_failure="skip"), WHOLE_WORD_HINT),
    Mistake(_wordpiece_variant(limit="greater_equal"),
            "a word is too long when it has MORE than max_input_chars_per_word characters (>, not >=)."),
    Mistake(_wordpiece_variant(limit="none"),
            "a word longer than max_input_chars_per_word characters becomes [unk_token] without being cut."),
    Mistake(_wordpiece_variant(unk="fixed"), "return the given unk_token, not the string '[UNK]'."),
    Mistake(_wordpiece_variant(whole_rest=False),
            "word[start:end] stops before word[end], so the longest candidate is word[start:len(word)]: "
            "let end start at len(word) (range(len(word), start, -1)), or the last character is never covered."),
)


def _validate_token_list(output) -> str | None:
    if not isinstance(output, list) or not all(isinstance(token, str) for token in output):
        return f"output: you returned {output!r}; return a list of strings (the word pieces)."
    return None


WORDPIECE_TOKENIZE = Exercise("wordpiece_tokenize", tokenization_reference.wordpiece_tokenize, wordpiece_tokenize_cases,
                              mistakes=WORDPIECE_MISTAKES, forbidden=WORDPIECE_FORBIDDEN, validate=_validate_token_list,
                              summary="""
                              Compare ``wordpiece_tokenize(word, vocab, unk_token="[UNK]",
                              max_input_chars_per_word=100)`` with :func:`bertlab.tokenization.wordpiece_tokenize`.

                              Cases: words like BERT's "unaffable" with distracting shorter pieces, a word that is one
                              piece, one-character continuations, realistic pieces, a greedy cut that gets stuck (no
                              backtracking), unknown characters, the length limit on both sides, a set instead of a
                              dict, another unk_token, random vocabularies over "abcd"; the words are drawn from their
                              vocabularies' pieces. Exact comparison (a list of strings). Forbidden: the reference,
                              ``WordPieceTokenizer``, ``BertTokenizer.tokenize``, Hugging Face's tokenizers and the Rust
                              ``tokenizers`` library behind them.
                              """)


# --------------------------------------------------------------------------------------------------
# bpe_merges
# --------------------------------------------------------------------------------------------------

BPE_MERGES_FORBIDDEN = (
    tokenization_reference.bpe_merges,
    tokenization_reference.apply_bpe,
    tokenizers.Tokenizer.train,
    tokenizers.Tokenizer.train_from_iterator,
)


def _random_word(g: torch.Generator, letters: str, low: int, high: int) -> str:
    return "".join(random_choice(g, letters) for _ in range(random_integer(g, low, high)))


def bpe_merges_cases() -> list[Case]:
    """Sennrich et al.'s toy words with drawn counts; a tie; a run of one letter (no overlap); a frequent
    short word against many rarer ones (the counts weigh); a pair twice in one word; a pair whose letters
    end a longer symbol (merge whole symbols); an empty word and more merges than pairs (stop); no merge;
    random corpora. The counts, the numbers of merges and the letters are drawn."""
    g = generator_for("bpe_merges")
    count = partial(random_integer, g)

    def letters(number: int) -> list[str]:
        """``number`` different letters, drawn."""
        drawn = []
        while len(drawn) < number:
            letter = random_choice(g, "abcdefghijklmnopqrstuvwxyz")
            drawn += [letter] if letter not in drawn else []
        return drawn

    toy = {"low": count(4, 40), "lower": count(1, 3), "newest": count(41, 60), "widest": count(2, 30)}
    a, b, c, d, e, f = letters(6)
    same = count(2, 99)
    run = random_choice(g, "abcdxyz") * count(4, 6)
    frequent, rare = "".join(letters(2)), ["".join(letters(count(3, 4))) for _ in range(4)]
    x, y, z, w = letters(4)
    twice = count(20, 40)
    p, q, r = letters(3)
    cases = [
        Case("Sennrich et al.'s words low, lower, newest, widest", (toy, count(5, 8))),
        Case("three words with the same count: the first merge is a tie", ({a + b: same, c + d: same, e + f: same}, 2)),
        Case(f"one word {run!r}: a run of one letter", ({run: count(1, 99)}, 3)),
        Case("a frequent short word and rarer longer ones: the counts weigh",
             ({frequent: count(40, 99), **{word: count(2, 9) for word in rare}}, 3)),
        Case("a pair that occurs twice in one word, more often than another word's pair",
             ({x + y + x + y: twice, z + w: count(twice + 1, 2 * twice - 1)}, 2)),
        Case("a pair whose letters also end a longer symbol: (a, b) after xa is made",
             ({p + q: count(50, 99), p + q + r: count(1, 20), q + r: count(21, 49)}, 3)),
        Case("an empty word, and more merges than pairs",
             ({"": count(1, 99), "".join(letters(3)): count(1, 99)}, count(5, 9))),
        Case("num_merges=0", ({"".join(letters(count(2, 5))): count(1, 99)}, 0)),
    ]
    for number in range(3):
        words = {_random_word(g, "abcde", 1, 6): count(1, 9) for _ in range(count(4, 8))}
        cases.append(Case(f"random words over 'abcde' ({number + 1})", (words, count(5, 12))))
    return cases


def _pair_counts_variant(words, *, weighted=True, once_per_word=False):
    counts = {}
    for symbols, count in words.items():
        pairs = list(zip(symbols, symbols[1:]))
        for pair in dict.fromkeys(pairs) if once_per_word else pairs:
            counts[pair] = counts.get(pair, 0) + (count if weighted else 1)
    return counts


def _merge_variant(symbols, pair, *, overlapping=False, as_text=False):
    if as_text:  # the symbols joined by spaces and the text "a b" replaced: it also matches inside longer symbols
        return tuple(" ".join(symbols).replace(f"{pair[0]} {pair[1]}", pair[0] + pair[1]).split(" "))
    merged, i = [], 0
    while i < len(symbols):
        if i + 1 < len(symbols) and (symbols[i], symbols[i + 1]) == pair:
            merged.append(symbols[i] + symbols[i + 1])
            if overlapping and i + 2 < len(symbols) and symbols[i + 2] == pair[1]:
                i += 1  # the second symbol is used again by the next occurrence
            else:
                i += 2
        else:
            merged.append(symbols[i])
            i += 1
    return tuple(merged)


def _bpe_variant(*, weighted=True, once_per_word=False, tie="smallest", overlapping=False, as_text=False,
                 recount=True, stop=True):
    """A wrong bpe_merges: one of the typical mistakes, chosen by the arguments."""

    def bpe_merges(word_counts, num_merges):
        words = {tuple(word): count for word, count in word_counts.items() if word}
        merges = []
        first_counts = _pair_counts_variant(words, weighted=weighted, once_per_word=once_per_word)
        ranked = sorted(first_counts, key=lambda pair: (-first_counts[pair], pair))
        for step in range(num_merges):
            if not recount:  # the pairs of the words as they were at the start, in order of their counts
                if step == len(ranked):
                    break
                best = ranked[step]
            else:
                counts = _pair_counts_variant(words, weighted=weighted, once_per_word=once_per_word)
                if not counts and stop:
                    break
                best = {"smallest": lambda: min(counts, key=lambda pair: (-counts[pair], pair)),
                        "largest": lambda: max(counts, key=lambda pair: (counts[pair], pair)),
                        "first": lambda: max(counts, key=counts.get)}[tie]()
            merges.append(best)
            words = {_merge_variant(symbols, best, overlapping=overlapping, as_text=as_text): count
                     for symbols, count in words.items()}
        return merges

    return bpe_merges


def _validate_merges(output) -> str | None:
    if not isinstance(output, list) or not all(
            isinstance(merge, tuple) and len(merge) == 2 and all(isinstance(symbol, str) for symbol in merge)
            for merge in output):
        return f"output: you returned {output!r}; return a list of pairs (a, b), tuples of two strings."
    return None


BPE_MERGES_MISTAKES = (
    Mistake(_bpe_variant(weighted=False),
            "weigh every pair by the count of its word: count(a, b) adds c_w for each occurrence in word w, "
            "not 1 per word."),
    Mistake(_bpe_variant(once_per_word=True),
            "count every occurrence of a pair in a word: (a, b) twice in a word of count c_w adds 2 c_w."),
    Mistake(_bpe_variant(tie="largest"),
            "on a tie take the SMALLEST pair in string order, min(counts, key=lambda pair: (-counts[pair], pair)), "
            "not the largest."),
    Mistake(_bpe_variant(tie="first"),
            "on a tie take the smallest pair in string order, min(counts, key=lambda pair: (-counts[pair], pair)), "
            "not the first one counted."),
    Mistake(_bpe_variant(overlapping=True),
            "occurrences of a pair do not overlap: merge left to right and continue after the merged pair, so "
            "'a a a' becomes 'aa a'."),
    Mistake(_bpe_variant(as_text=True),
            "merge whole symbols: replacing the text 'a b' in the symbols joined by spaces also matches the end "
            "of a longer symbol ('xa b'). Compare the symbols pair by pair."),
    Mistake(_bpe_variant(recount=False),
            "count the pairs again after every merge: a merge changes the symbols of the words, and so their pairs."),
    Mistake(_bpe_variant(stop=False),
            "stop when no word has two symbols left: there is no pair to merge (return the merges learned so far)."),
)


BPE_MERGES = Exercise("bpe_merges", tokenization_reference.bpe_merges, bpe_merges_cases,
                      mistakes=BPE_MERGES_MISTAKES, forbidden=BPE_MERGES_FORBIDDEN, validate=_validate_merges,
                      summary="""
                      Compare ``bpe_merges(word_counts, num_merges)`` with :func:`bertlab.tokenization.bpe_merges`.

                      Cases: Sennrich et al.'s toy words, a tie, a run of one letter, a frequent word against rarer
                      ones, a pair twice in a word, a pair whose letters end a longer symbol, an empty word and more
                      merges than pairs, no merge, random corpora; counts and numbers of merges are drawn. Exact
                      comparison (a list of pairs). Forbidden: the reference, ``apply_bpe``, and the ``tokenizers``
                      library's training.
                      """)


# --------------------------------------------------------------------------------------------------
# encode
# --------------------------------------------------------------------------------------------------

ENCODE_FORBIDDEN = (
    *TOKENIZERS_LIBRARY_ENCODING,
    tokenizers.Tokenizer.post_process,
    tokenization_reference.encode,
    tokenization_reference.truncate_longest_first,
    tokenization_reference._pad,
    tokenization_reference.BertTokenizer.encode,
    tokenization_reference.BertTokenizer.batch_encode,
    "transformers.tokenization_utils_base.PreTrainedTokenizerBase.encode",
    "transformers.tokenization_utils_base.PreTrainedTokenizerBase.__call__",
    "transformers.tokenization_utils_tokenizers.TokenizersBackend._encode_plus",
    "transformers.tokenization_python.PythonBackend.prepare_for_model",
    "transformers.tokenization_python.PythonBackend.truncate_sequences",
    "transformers.tokenization_python.PythonBackend.create_token_type_ids_from_sequences",
    "transformers.models.bert.tokenization_bert_legacy.BertTokenizerLegacy.build_inputs_with_special_tokens",
)

ENCODE_WORDS = ["the", "cat", "sat", "on", "mat", "a", "dog", "ran", "home", "it", "was", "late", "play", "##ing",
                "##ed", "##s", "token", "##ize", "bert", "reads", "both", "ways", ".", ","]


def _encode_vocab(generator: torch.Generator) -> dict[str, int]:
    """The words and the special tokens in a shuffled order: [CLS] is not 101, nor [PAD] 0."""
    tokens = SPECIAL_TOKENS + ENCODE_WORDS
    order = torch.randperm(len(tokens), generator=generator).tolist()
    return {tokens[i]: position for position, i in enumerate(order)}


def encode_cases() -> list[Case]:
    g = generator_for("encode")
    vocab = _encode_vocab(g)

    def words(count):
        return [ENCODE_WORDS[random_integer(g, 0, len(ENCODE_WORDS) - 1)] for _ in range(count)]

    def case(description, length_a, length_b=None, max_length=None):
        tokens_b = None if length_b is None else words(length_b)
        kwargs = {} if max_length is None else {"max_length": max_length}
        return Case(description, (words(length_a), tokens_b, vocab), kwargs)

    return [
        case("one text of 5 tokens, no max_length", 5),
        case("a pair of 4 and 3 tokens, no max_length", 4, 3),
        case("one text of 4 tokens, max_length=9 (padding)", 4, max_length=9),
        case("a pair of 3 and 2 tokens, max_length=12 (padding)", 3, 2, max_length=12),
        case("one text of 10 tokens, max_length=6 (truncation)", 10, max_length=6),
        case("a pair of 9 and 3 tokens, max_length=10 (the longer text is cut)", 9, 3, max_length=10),
        case("a pair of 2 and 10 tokens, max_length=9 (the longer text is cut)", 2, 10, max_length=9),
        case("a pair of 7 and 7 tokens, max_length=8 (both cut; 5 places for an odd split)", 7, 7, max_length=8),
        case("a pair of 8 and 6 tokens, max_length=10 (both cut)", 8, 6, max_length=10),
        case("a pair of 6 and 5 tokens, max_length=14 (fits exactly)", 6, 5, max_length=14),
        Case("one text with a token that is not in the vocabulary ('zebra')",
             (["the", "zebra", "ran", "home"], None, vocab)),
        Case("an empty text: tokens_a = []", ([], None, vocab)),
        Case("a pair whose second text is empty: tokens_b = []", (["the", "cat"], [], vocab)),
        Case("a pair of 4 and 4 tokens, max_length=3 (room for the special tokens only)",
             (words(4), words(4), vocab), {"max_length": 3}),
        case("a pair of 20 and 15 tokens, max_length=32", 20, 15, max_length=32),
        case("one text of 30 tokens, max_length=32 (padding)", 30, max_length=32),
    ]


def _encode_variant(*, final_sep=True, first_sep_type=0, final_sep_type=1, truncate="longest_first",
                    budget_counts_specials=True, pad="right", pad_attention=0, pad_type=0,
                    fixed_ids=False, unknown="unk", empty_b_is_none=False):
    """encode with one of the typical mistakes, chosen by the keyword arguments."""

    def encode(tokens_a, tokens_b, vocab, max_length=None):
        if empty_b_is_none and not tokens_b:
            tokens_b = None
        if fixed_ids:  # the ids of bert-base-uncased
            pad_id, unk_id, cls_id, sep_id = 0, 100, 101, 102
        else:
            pad_id, unk_id, cls_id, sep_id = (vocab[token] for token in ("[PAD]", "[UNK]", "[CLS]", "[SEP]"))
        lookup = (lambda token: vocab.get(token, unk_id)) if unknown == "unk" else (lambda token: vocab[token])
        first = [lookup(token) for token in tokens_a]
        second = None if tokens_b is None else [lookup(token) for token in tokens_b]
        if max_length is not None:
            specials = (2 if second is None else 3) if budget_counts_specials else 0
            first, second = _truncate(first, second, max_length - specials, truncate)
        input_ids = [cls_id, *first, sep_id]
        types = [0] * (len(first) + 1) + [first_sep_type]
        if second is not None:
            input_ids += second + ([sep_id] if final_sep else [])
            types += [1] * len(second) + ([final_sep_type] if final_sep else [])
        encoding = {"input_ids": input_ids, "token_type_ids": types, "attention_mask": [1] * len(input_ids)}
        if max_length is not None and pad != "none":
            extra = max(max_length - len(input_ids), 0)
            fill = {"input_ids": pad_id, "token_type_ids": pad_type, "attention_mask": pad_attention}
            encoding = {name: (values + [fill[name]] * extra if pad == "right" else [fill[name]] * extra + values)
                        for name, values in encoding.items()}
        return encoding

    return encode


def _truncate(first, second, budget, rule):
    """Trim like truncate_longest_first, or in one of the typical wrong ways."""
    if rule == "longest_first":
        return tokenization_reference.truncate_longest_first(first, second, budget)
    if rule == "keep_last":
        kept_first, kept_second = tokenization_reference.truncate_longest_first(first, second, budget)
        return (first[len(first) - len(kept_first):],
                None if second is None else second[len(second) - len(kept_second):])
    if second is None or len(first) + len(second) <= budget:
        return first[:max(budget, 0)], second
    if rule == "only_second":
        return first, second[:max(budget - len(first), 0)]
    if rule == "halves":
        return first[:budget // 2], second[:budget - budget // 2]
    # "one_at_a_time": BERT's original _truncate_seq_pair, which pops from the longer list (the
    # second on a tie) until the pair fits.
    first, second = list(first), list(second)
    while len(first) + len(second) > budget:
        (first if len(first) > len(second) else second).pop()
    return first, second


ENCODE_MISTAKES = (
    Mistake(_encode_variant(unknown="key_error"),
            "a token that is not in the vocabulary gets the id of [UNK]: vocab.get(token, vocab['[UNK]'])."),
    Mistake(_encode_variant(fixed_ids=True),
            "look the special tokens up in `vocab` (vocab['[CLS]'], ...): their ids differ from one "
            "vocabulary to another (101 and 102 are bert-base-uncased's)."),
    Mistake(_encode_variant(empty_b_is_none=True),
            "an empty second text is still a pair ([CLS] A [SEP] [SEP]): test `tokens_b is None`, not "
            "`if tokens_b`."),
    Mistake(_encode_variant(final_sep=False),
            "a pair ends with a second [SEP]: [CLS] A [SEP] B [SEP]."),
    Mistake(_encode_variant(first_sep_type=1),
            "the first [SEP] belongs to segment A: its token_type_id is 0; segment B (token type 1) "
            "starts after it."),
    Mistake(_encode_variant(final_sep_type=0),
            "the [SEP] that closes the second text belongs to segment B: its token_type_id is 1."),
    Mistake(_encode_variant(budget_counts_specials=False),
            "the special tokens count towards max_length: A and B together keep at most max_length - 2 "
            "tokens (one text) or max_length - 3 (a pair)."),
    Mistake(_encode_variant(truncate="keep_last"),
            "truncation removes tokens from the END of a text: keep its first tokens (tokens[:n])."),
    Mistake(_encode_variant(truncate="only_second"),
            "truncation cuts the LONGER text first (longest first), not always the second one."),
    Mistake(_encode_variant(truncate="halves"),
            "when one text is short enough it is kept whole and the other gets the rest of the room; only "
            "when both are long does each get about half."),
    Mistake(_encode_variant(truncate="one_at_a_time"),
            "this is the rule of BERT's original code, which gives an odd last place to the first text; "
            "the course (like Hugging Face) follows the `longest_first` rule: with s the length of the "
            "shorter text and b the room, if 2s > b the shorter keeps b // 2 tokens and the longer "
            "b - b // 2, the first text counting as the shorter on a tie."),
    Mistake(_encode_variant(pad="left"), "pad on the right: [PAD] tokens go after the last [SEP]."),
    Mistake(_encode_variant(pad_attention=1),
            "padding gets attention_mask 0, so that no token attends to it (1 marks real tokens)."),
    Mistake(_encode_variant(pad_type=1), "padding gets token_type_id 0."),
    Mistake(_encode_variant(pad="none"),
            "with max_length, pad with [PAD] up to max_length: every output list has max_length entries."),
)

ENCODE_KEYS = ("input_ids", "token_type_ids", "attention_mask")


def _validate_encoding(output) -> str | None:
    if not isinstance(output, dict) or set(output) != set(ENCODE_KEYS):
        keys = sorted(output) if isinstance(output, dict) else None
        return (f"output: you returned {type(output).__name__}" + (f" with keys {keys}" if keys is not None else "")
                + f"; return a dict with the keys {list(ENCODE_KEYS)}.")
    for name in ENCODE_KEYS:
        values = output[name]
        if not isinstance(values, list) or not all(type(value) is int for value in values):
            return f"{name}: you returned {values!r}; return a list of Python ints (not a tensor, not bools)."
    lengths = {name: len(output[name]) for name in ENCODE_KEYS}
    if len(set(lengths.values())) > 1:
        return f"the three lists must have the same length, got {lengths}."
    return None


ENCODE = Exercise("encode", tokenization_reference.encode, encode_cases, mistakes=ENCODE_MISTAKES,
                  forbidden=ENCODE_FORBIDDEN, validate=_validate_encoding,
                  summary="""
                  Compare ``encode(tokens_a, tokens_b, vocab, max_length=None)`` with
                  :func:`bertlab.tokenization.encode` (truncation and padding to ``max_length`` when given).

                  Cases: one text and pairs; padding; truncation of one text, of the longer of two, of both with an odd
                  budget; an exact fit; a token outside the vocabulary; empty texts; max_length = 3 for a pair; a
                  vocabulary whose special tokens have unusual ids. Exact comparison (a dict of three lists). Forbidden:
                  the reference and its helpers (``truncate_longest_first``), ``BertTokenizer.encode``, Hugging Face's
                  encoding and truncation, and the Rust ``tokenizers`` library's encoding.
                  """)


# --------------------------------------------------------------------------------------------------
# BertEmbeddings
# --------------------------------------------------------------------------------------------------

EMBEDDINGS_FORBIDDEN = (
    bert_reference.BertEmbeddings.__init__,
    bert_reference.BertEmbeddings.forward,
    bert_reference.BertModel.__init__,
    bert_reference.BertModel.forward,
    "transformers.models.bert.modeling_bert.BertEmbeddings.__init__",
    "transformers.models.bert.modeling_bert.BertEmbeddings.forward",
)


#: (description, config, scale of the random embeddings). The first has BERT's initialization scale
#: and layer_norm_eps = 1e-12, where nn.LayerNorm's default eps (1e-5) makes a visible difference.
EMBEDDINGS_CONFIGS = (
    ("vocab_size=40, hidden_size=16, max_position_embeddings=24, type_vocab_size=2, layer_norm_eps=1e-12, "
     "hidden_dropout_prob=0.25", tiny_bert_config(1, hidden_dropout_prob=0.25), 0.02),
    ("vocab_size=30, hidden_size=12, max_position_embeddings=10, type_vocab_size=3, layer_norm_eps=1e-6, "
     "pad_token_id=2, hidden_dropout_prob=0.0",
     tiny_bert_config(1, vocab_size=30, hidden_size=12, max_position_embeddings=10, type_vocab_size=3,
                      layer_norm_eps=1e-6, pad_token_id=2, hidden_dropout_prob=0.0), 1.0),
)


def _reference_embeddings(config: BertConfig, scale: float, generator: torch.Generator) -> nn.Module:
    """The reference module with random weights (every parameter, LayerNorm included), in eval mode."""
    module = bert_reference.BertEmbeddings(config)
    with torch.no_grad():
        for name, parameter in module.named_parameters():
            noise = torch.randn(parameter.shape, generator=generator)
            if name == "norm.weight":
                parameter.copy_(1.0 + 0.2 * noise)
            elif name == "norm.bias":
                parameter.copy_(0.2 * noise)
            else:
                parameter.copy_(scale * noise)
    return module.eval()


def _embeddings_inputs(config: BertConfig, generator: torch.Generator) -> list[Case]:
    def ids(batch, length):
        input_ids = torch.randint(0, config.vocab_size, (batch, length), generator=generator)
        token_type_ids = torch.randint(0, config.type_vocab_size, (batch, length), generator=generator)
        return input_ids, token_type_ids

    P = config.max_position_embeddings
    pair_ids, _ = ids(2, 7)
    pair_types = torch.tensor([[0, 0, 0, 0, 1, 1, 1], [0, 0, 1, 1, 1, 1, 1]])
    padded, padded_types = ids(2, 6)
    padded[1, 4:] = config.pad_token_id
    padded_types[1, 4:] = 0
    return [
        Case("input_ids (2, 7) of a pair of segments, token_type_ids 0 then 1", (pair_ids, pair_types)),
        Case("input_ids (3, 5), random token_type_ids", ids(3, 5)),
        Case("input_ids (1, 1): one token", ids(1, 1)),
        Case(f"input_ids (2, {P}): the longest sequence, max_position_embeddings = {P}", ids(2, P)),
        Case("input_ids (2, 6), the second sequence padded with [PAD]", (padded, padded_types)),
    ]


@dataclass(frozen=True)
class EmbeddingsCase:
    """A configuration, the reference module with its random weights (in eval mode), the batches it embeds
    in eval mode, the batch of the training-mode test when the configuration has dropout, and whether the
    first batch is embedded again with the modules in float64."""

    description: str
    config: BertConfig
    reference: nn.Module
    inputs: list[Case]
    training: Case | None
    in_float64: bool = False


def bert_embeddings_cases() -> list[EmbeddingsCase]:
    """The two configurations of EMBEDDINGS_CONFIGS with random weights; for each, random batches (a pair
    of segments, random segments, one token, the longest sequence, padding) and, with dropout, a batch
    (4, 16) for the training mode; the first batch of the first configuration again in float64."""
    g = generator_for("BertEmbeddings")
    cases = []
    for index, (description, config, scale) in enumerate(EMBEDDINGS_CONFIGS):
        reference = _reference_embeddings(config, scale, g)
        inputs = _embeddings_inputs(config, g)
        training = None
        if config.hidden_dropout_prob > 0:
            training = Case("input_ids (4, 16), in training mode (model.train())",
                            (torch.randint(0, config.vocab_size, (4, 16), generator=g),
                             torch.randint(0, config.type_vocab_size, (4, 16), generator=g)))
        cases.append(EmbeddingsCase(description, config, reference, inputs, training, in_float64=index == 0))
    return cases


def _state(module: nn.Module) -> dict[str, torch.Tensor]:
    return {name: tensor.detach() for name, tensor in module.state_dict().items()}


def _embedding_variant(*, positions=True, segments=True, norm="after", eps=None, affine=True, first_position=0,
                       token_scale=False, positions_from_ids=False, positions_along_batch=False):
    """The embedding layer's output with one of the typical mistakes: f(state, config, input_ids, token_type_ids)."""

    def embeddings(state, config, input_ids, token_type_ids):
        H, N = config.hidden_size, input_ids.shape[1]
        epsilon = config.layer_norm_eps if eps is None else eps

        def layer_norm(x):
            weight, bias = (state["norm.weight"], state["norm.bias"]) if affine else (None, None)
            return F.layer_norm(x, (H,), weight, bias, epsilon)

        tokens = F.embedding(input_ids, state["word_embeddings.weight"])
        if token_scale:
            tokens = tokens * math.sqrt(H)
        if positions_from_ids:
            position_vectors = F.embedding(input_ids, state["position_embeddings.weight"])
        elif positions_along_batch:  # (B, 1, H): one position per sequence
            position_vectors = state["position_embeddings.weight"][: input_ids.shape[0], None]
        else:
            position_vectors = state["position_embeddings.weight"][first_position:first_position + N]
        segment_vectors = F.embedding(token_type_ids, state["token_type_embeddings.weight"])
        if norm == "before":
            tokens = layer_norm(tokens)
        x = tokens + (position_vectors if positions else 0) + (segment_vectors if segments else 0)
        return layer_norm(x) if norm == "after" else x

    return embeddings


EMBEDDINGS_MISTAKES = (
    Mistake(_embedding_variant(positions=False),
            "add the position embeddings: E_position[i] for the positions i = 0 .. N - 1 "
            "(torch.arange(N)), the same for every sequence of the batch."),
    Mistake(_embedding_variant(segments=False),
            "add the segment embeddings: token_type_embeddings(token_type_ids)."),
    Mistake(_embedding_variant(positions=False, segments=False),
            "add the position and the segment embeddings to the token embeddings."),
    Mistake(_embedding_variant(norm="before"),
            "apply the LayerNorm to the SUM of the three embeddings, not to the token embeddings before "
            "adding the others."),
    Mistake(_embedding_variant(norm="none"), "apply the LayerNorm (self.norm) to the sum of the three embeddings."),
    Mistake(_embedding_variant(eps=1e-5),
            "give the LayerNorm the config's epsilon, nn.LayerNorm(H, eps=config.layer_norm_eps): BERT's "
            "is 1e-12, nn.LayerNorm's default 1e-5."),
    Mistake(_embedding_variant(affine=False),
            "use the LayerNorm's weight and bias (its learned gain and shift) in the normalization."),
    Mistake(_embedding_variant(first_position=1), "positions start at 0: the first token gets E_position[0]."),
    Mistake(_embedding_variant(positions_from_ids=True),
            "the position embeddings are indexed by the position i = 0 .. N - 1 (torch.arange(N)), not "
            "by the token ids."),
    Mistake(_embedding_variant(positions_along_batch=True),
            "the positions run along the sequence, dim 1 of input_ids (B, N): torch.arange(input_ids.shape[1]), "
            "one per token; yours count the sequences of the batch (dim 0)."),
    Mistake(_embedding_variant(token_scale=True),
            "BERT does not multiply the token embeddings by sqrt(H) (the original Transformer did): just "
            "add the three embeddings."),
)

def embeddings_mistakes(reference: nn.Module, config: BertConfig) -> list[Mistake]:
    """The mistakes of EMBEDDINGS_MISTAKES with the weights of ``reference``, as functions of the case's arguments
    (to diagnose an output, or an exception)."""
    state = _state(reference)
    return [Mistake(partial(mistake.implementation, state, config), mistake.hint) for mistake in EMBEDDINGS_MISTAKES]


EMBEDDINGS_NAMING_HINT = ("Name the submodules word_embeddings, position_embeddings, token_type_embeddings, norm "
                          "and dropout, as in the exercise (nn.Embedding and nn.LayerNorm give a .weight, and the "
                          "LayerNorm a .bias).")

EMBEDDINGS_DROPOUT_HINTS = DropoutHints(
    nothing_dropped="apply dropout with probability config.hidden_dropout_prob after the LayerNorm, e.g. "
                    "self.dropout = nn.Dropout(config.hidden_dropout_prob); it is active in training mode only.",
    no_zeros="apply the dropout AFTER the LayerNorm: Dropout(LayerNorm(sum)); a LayerNorm after the dropout "
             "mixes the zeros away.",
    not_scaled="use nn.Dropout (or F.dropout), which scales the kept entries by 1 / (1 - p) so that the expected "
               "value is unchanged.",
    kept_differ="the dropout must be the last step, applied to LayerNorm(sum).",
    wrong_share="drop with probability config.hidden_dropout_prob.",
)


def _check_embeddings_dropout(student_module, reference, config, case, context, forbidden) -> None:
    """In training mode, the output must be a dropout of the eval-mode output (see :func:`check_dropout`)."""
    student_module.train()
    output = run_student(student_module, case, check="BertEmbeddings", forbidden=forbidden, context=context)
    student_module.eval()
    args, _ = case.fresh_arguments()
    with torch.no_grad():
        expected = reference(*args)
    check_dropout(output, expected, config.hidden_dropout_prob, check="BertEmbeddings", context=context,
                  hints=EMBEDDINGS_DROPOUT_HINTS)


def _compare_configuration(exercise: Exercise, student_cls, case: EmbeddingsCase, context: str, forbidden) -> int:
    """One configuration: the student's module, built with the reference's weights, against the reference on
    each batch in eval mode (and in float64), then its dropout in training mode; returns the number of batches."""
    description, config, reference = case.description, case.config, case.reference
    context = f"BertEmbeddings(config) with {description}"
    module = build_with_reference_weights(student_cls, (config,), {}, reference, check=exercise.name, context=context,
                                          naming_hint=exercise.naming_hint, forbidden=forbidden, own_buffers=True)
    module.eval()
    inputs = list(case.inputs)
    for batch in inputs:
        _compare_embeddings(exercise, module, reference, config, batch, f"{batch.description}; config {description}",
                            forbidden)
    if case.in_float64:  # the first batch again, with the module and the reference in float64
        batch = Case(inputs[0].description + ", module in float64 (model.double())", inputs[0].args)
        module.double()
        _compare_embeddings(exercise, module, _reference_copy(reference, config).double(), config, batch,
                            f"{batch.description}; config {description}", forbidden)
        module.float()
        inputs.append(batch)
    if case.training is not None:
        batch = case.training
        _check_embeddings_dropout(module, reference, config, batch, f"{batch.description}; config {description}",
                                  forbidden)
        inputs.append(batch)
    return len(inputs)


BERT_EMBEDDINGS = Exercise("BertEmbeddings", bert_reference.BertEmbeddings, bert_embeddings_cases,
                           mistakes=embeddings_mistakes, forbidden=EMBEDDINGS_FORBIDDEN,
                           naming_hint=EMBEDDINGS_NAMING_HINT, compare=_compare_configuration,
                           summary="""
                           Compare the class ``BertEmbeddings(config)`` with :class:`bertlab.bert.BertEmbeddings`.

                           For two configurations (BERT's initialization scale with layer_norm_eps 1e-12; large weights,
                           three segment types, another [PAD] id), the student's module is built, must have the
                           reference's parameter names and shapes, gets the reference's (random) weights, and in eval
                           mode must give the reference's output on batches of pairs, random segments, one token, the
                           longest sequence and padded sequences; then in float64. In training mode (p = 0.25) every
                           entry must be either 0 or the eval output / (1 - p), with about a fraction p dropped.
                           Tolerance: the framework's defaults. Forbidden: the reference's and Hugging Face's
                           BertEmbeddings and BertModel.
                           """)


def _reference_copy(reference: nn.Module, config: BertConfig) -> nn.Module:
    copy = bert_reference.BertEmbeddings(config)
    copy.load_state_dict(reference.state_dict())
    return copy.eval()


def _compare_embeddings(exercise: Exercise, module, reference, config, case, context, forbidden) -> None:
    mistakes = exercise.mistakes(reference, config)
    output = run_student(module, case, check="BertEmbeddings", forbidden=forbidden, mistakes=mistakes, context=context)
    args, _ = case.fresh_arguments()
    with torch.no_grad():
        expected = reference(*args)
    difference = describe_difference(output, expected, DEFAULT_TOLERANCES)
    if difference is None:
        return
    if isinstance(output, torch.Tensor) and output.shape == expected.shape:
        p, zeros = config.hidden_dropout_prob, output == 0
        if p > 0 and zeros.any() and describe_difference(output[~zeros], expected[~zeros] / (1 - p)) is None:
            fail("BertEmbeddings", context, difference, "in eval mode (model.eval()) the dropout must do nothing: "
                 "use nn.Dropout, or F.dropout(x, p, training=self.training).")
    fail("BertEmbeddings", context, difference, diagnose(output, case, mistakes))


# --------------------------------------------------------------------------------------------------
# count_parameters
# --------------------------------------------------------------------------------------------------

COUNT_PARAMETERS_FORBIDDEN = (
    bert_reference.count_parameters,
    nn.Module.__init__,
    nn.Module.parameters,
    nn.Module.named_parameters,
    nn.Module.state_dict,
    "transformers.modeling_utils.PreTrainedModel.num_parameters",
    "transformers.models.bert.modeling_bert.BertModel.__init__",
)


def _random_config(generator: torch.Generator) -> tuple[str, BertConfig]:
    heads = random_integer(generator, 1, 12)
    hidden = heads * random_choice(generator, (8, 16, 32, 64))
    fields = dict(
        vocab_size=random_integer(generator, 50, 40000),
        hidden_size=hidden,
        num_attention_heads=heads,
        intermediate_size=random_integer(generator, hidden, 5 * hidden),
        num_hidden_layers=random_integer(generator, 1, 24),
        max_position_embeddings=random_choice(generator, (64, 128, 512, 1024)),
        type_vocab_size=random_integer(generator, 1, 4),
    )
    return ", ".join(f"{name}={value}" for name, value in fields.items()), BertConfig(**fields)


def count_parameters_cases() -> list[Case]:
    """A small configuration whose feed-forward width is not 4H, the presets' sizes (tiny to large) with
    a drawn vocabulary, one without the pooler, one with sinusoidal positions, and random
    configurations; every size that is not a preset's is drawn.

    In the first case each wrong count gives its own number (2 to 6 layers, and 3 segment types: 3H
    differs from the 2H of the embeddings' norm, the 2LH of a layer's norm and the (2L + 1)H of half
    of every norm), so that its hint names the mistake.
    """
    g = generator_for("count_parameters")
    heads = random_integer(g, 2, 8)
    hidden = heads * random_choice(g, (8, 16))
    intermediate = random_integer(g, hidden + 1, 5 * hidden)
    small_fields = dict(vocab_size=random_integer(g, 500, 5000), hidden_size=hidden,
                        num_hidden_layers=random_integer(g, 2, 6), num_attention_heads=heads,
                        intermediate_size=intermediate + 1 if intermediate == 4 * hidden else intermediate,
                        max_position_embeddings=random_choice(g, (64, 128, 256, 512)),
                        type_vocab_size=3)
    cases = [Case(", ".join(f"{name}={value}" for name, value in small_fields.items()), (BertConfig(**small_fields),))]
    for name in ("tiny", "mini", "base", "large"):
        vocab_size = random_integer(g, 1000, 50000)
        cases.append(Case(f"BertConfig.preset({name!r}, vocab_size={vocab_size})",
                          (BertConfig.preset(name, vocab_size=vocab_size),)))
    vocab_size = random_integer(g, 1000, 50000)
    cases.append(Case(f"BertConfig.preset('small', vocab_size={vocab_size}), pooler=False",
                      (BertConfig.preset("small", vocab_size=vocab_size),), {"pooler": False}))
    vocab_size = random_integer(g, 1000, 50000)
    cases.append(Case(f"BertConfig.preset('medium', vocab_size={vocab_size}, position_embedding_type='sinusoidal') "
                      "(fixed sinusoids: no position parameters)",
                      (BertConfig.preset("medium", vocab_size=vocab_size, position_embedding_type="sinusoidal"),)))
    for number in range(8):
        description, config = _random_config(g)
        kwargs = {"pooler": False} if number % 3 == 1 else {}
        if number % 4 == 3:
            config.position_embedding_type = "sinusoidal"
            description += ", position_embedding_type='sinusoidal'"
        cases.append(Case(description + (", pooler=False" if kwargs else ""), (config,), kwargs))
    return cases


def _count_variant(*, linear_bias=True, norms_per_layer=2, embedding_norm=True, norm_size=2, positions="learned",
                   segments=True, pooler_rule="flag", projections=4, ffn="config", tied_decoder=False):
    """count_parameters with one of the typical mistakes, chosen by the keyword arguments."""

    def count_parameters(config, pooler=True):
        V, P, T = config.vocab_size, config.max_position_embeddings, config.type_vocab_size
        H, L = config.hidden_size, config.num_hidden_layers
        I = config.intermediate_size if ffn == "config" else 4 * H  # noqa: E741
        bias = 1 if linear_bias else 0
        use_positions = {"learned": config.position_embedding_type == "learned", "always": True, "never": False}
        embeddings = (V + (P if use_positions[positions] else 0) + (T if segments else 0)) * H
        embeddings += norm_size * H if embedding_norm else 0
        layer = projections * (H * H + bias * H) + (H * I + bias * I) + (I * H + bias * H)
        layer += norms_per_layer * norm_size * H
        with_pooler = {"flag": pooler, "always": True, "never": False}[pooler_rule]
        total = embeddings + L * layer + ((H * H + bias * H) if with_pooler else 0)
        return total + (V * H if tied_decoder else 0)

    return count_parameters


COUNT_PARAMETERS_MISTAKES = (
    Mistake(_count_variant(linear_bias=False),
            "every linear layer has a bias: a layer from a to b features has a * b + b parameters (query, "
            "key, value, output, both feed-forward layers and the pooler)."),
    Mistake(_count_variant(norms_per_layer=0, embedding_norm=False),
            "count the LayerNorms: one after the embeddings and two in every layer, each with a gain and a "
            "shift of H values (2H)."),
    Mistake(_count_variant(norms_per_layer=1),
            "a post-norm encoder layer has TWO LayerNorms (after attention and after the feed-forward network)."),
    Mistake(_count_variant(embedding_norm=False), "count the LayerNorm after the embeddings too (2H)."),
    Mistake(_count_variant(norm_size=1), "a LayerNorm has a gain AND a shift: 2H parameters, not H."),
    Mistake(_count_variant(pooler_rule="always"),
            "with pooler=False, leave out the pooler (H * H + H): it belongs only to a model built with one."),
    Mistake(_count_variant(pooler_rule="never"), "with pooler=True (the default), count the pooler: H * H + H."),
    Mistake(_count_variant(tied_decoder=True),
            "count each parameter once: the MLM decoder is tied to the word embeddings (the same tensor), "
            "and BertModel has no MLM head anyway."),
    Mistake(_count_variant(segments=False), "count the segment (token type) embeddings: type_vocab_size * H."),
    Mistake(_count_variant(positions="never"),
            "count the learned position embeddings: max_position_embeddings * H."),
    Mistake(_count_variant(positions="always"),
            "with position_embedding_type='sinusoidal' the positions are a fixed table, not parameters: "
            "count max_position_embeddings * H only for learned positions."),
    Mistake(_count_variant(ffn="4H"),
            "use config.intermediate_size for the feed-forward width; it is 4H in the presets but need not be."),
    Mistake(_count_variant(projections=3),
            "self-attention has FOUR projections of H * H + H: query, key, value and the output projection."),
)


COUNT_PARAMETERS = Exercise("count_parameters", bert_reference.count_parameters, count_parameters_cases,
                            mistakes=COUNT_PARAMETERS_MISTAKES, forbidden=COUNT_PARAMETERS_FORBIDDEN,
                            summary="""
                            Compare ``count_parameters(config, pooler=True)`` with
                            :func:`bertlab.bert.count_parameters`.

                            Cases: a small configuration (intermediate size not 4H, 3 segment types); the tiny, mini,
                            base and large presets with a vocabulary of 1,000 to 50,000; small without the pooler,
                            medium with sinusoidal positions; 8 random configurations (intermediate size not 4H, 1 to 4
                            segment types, 1 to 24 layers, with and without pooler, learned and sinusoidal positions).
                            Every size but the presets' is drawn. Exact comparison (an int). Forbidden: the reference,
                            and building modules to count them (``nn.Module.__init__``, ``parameters``,
                            ``named_parameters``, ``state_dict``, Hugging Face's ``num_parameters``).
                            """)


#: The chapter whose exercises this module checks, and their records, in the order of the chapter.
CHAPTER = "06_bert"


__getattr__ = check_functions(globals())  # check_<name> for each record above
