"""Simple baselines for BERT's other task types, scored by the same metrics as the fine-tuned models.

Each task type's ``baselines`` (``bertlab.task_finetuning.TASKS``; sentences:
:func:`bertlab.finetuning.sentence_baselines`) is one function here, returning a
:class:`~bertlab.finetuning.BaselineResult` per baseline:

- **Sentence pairs** (SNLI, :func:`pair_baselines`): the majority class (:func:`majority_predictions`),
  and logistic regression on bags of words of the premise and the hypothesis
  (:func:`train_pair_bag_of_words`), also on the hypothesis alone, which shows SNLI's annotation
  artefacts: a hypothesis-only model scores far above the majority class without reading the premise
  (Gururangan et al., 2018; Poliak et al., 2018). Scored by accuracy and macro-F1.
- **Tagging** (UPOS, :func:`tagging_baselines`): the most frequent tag of each word in the training
  split (:func:`train_most_frequent_tagger`). Scored by :func:`bertlab.tasks.word_accuracy`.
- **Spans** (SQuAD, :func:`span_baselines`): the sliding-window baseline of Rajpurkar et al. (2016),
  adapted from Richardson et al. (2013) (:func:`sliding_window_answer`). Scored by
  :func:`bertlab.tasks.squad_scores` against :func:`bertlab.task_data.squad_references`.
"""

import bisect
import math
import re
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import torch

from bertlab.finetuning import (
    BagOfWordsClassifier,
    BaselineResult,
    ExampleScores,
    fit_bag_of_words,
    majority_label,
    prediction_result,
)
from bertlab.task_data import SNLI_LABELS, SentencePair, SquadQuestion, TaggedSentence, squad_references
from bertlab.tasks import SquadScores, squad_f1, squad_normalize, squad_scores, word_accuracy, words_tagged_right
from bertlab.tokenization import BasicTokenizer

# --------------------------------------------------------------------------------------------------
# Sentence pairs
# --------------------------------------------------------------------------------------------------


def majority_predictions(train: Sequence[SentencePair], pairs: Sequence[SentencePair]) -> torch.Tensor:
    """The majority-class baseline: the most frequent label of ``train`` for every pair, (len(pairs),)."""
    return torch.full((len(pairs),), majority_label([pair.label for pair in train]), dtype=torch.long)


_BASIC_TOKENIZER = BasicTokenizer(do_lower_case=True)


def pair_words(pair: SentencePair, hypothesis_only: bool = False) -> list[str]:
    """The features of a sentence pair, as words for a bag of words.

    The premise's and the hypothesis's words (BERT's basic tokens: lower-cased, punctuation split
    off) become ``premise:w`` and ``hypothesis:w``, so that a word weighs differently on each side,
    and each hypothesis word also found in the premise adds ``both:w``, the simplest cross feature
    (lexical overlap signals entailment). ``hypothesis_only``: the ``hypothesis:w`` words alone.
    """
    hypothesis = _BASIC_TOKENIZER.tokenize(pair.hypothesis)
    words = [f"hypothesis:{word}" for word in hypothesis]
    if hypothesis_only:
        return words
    premise = _BASIC_TOKENIZER.tokenize(pair.premise)
    in_premise = set(premise)
    shared = [f"both:{word}" for word in hypothesis if word in in_premise]
    return [f"premise:{word}" for word in premise] + words + shared


@dataclass
class PairBagOfWords:
    """Logistic regression on the bag of :func:`pair_words` of a pair: p(y | pair) = softmax(W phi + b)."""

    classifier: BagOfWordsClassifier
    hypothesis_only: bool

    @torch.no_grad()
    def predict(self, pairs: Sequence[SentencePair]) -> torch.Tensor:
        """The predicted label of each pair, argmax_y p(y | pair), (len(pairs),)."""
        words = [pair_words(pair, self.hypothesis_only) for pair in pairs]
        return self.classifier(self.classifier.word_indices(words)).argmax(dim=-1).cpu()


def train_pair_bag_of_words(train: Sequence[SentencePair], *, hypothesis_only: bool = False,
                            **settings) -> PairBagOfWords:
    """Fit a :class:`PairBagOfWords` on ``train`` (with ``hypothesis_only``, on the hypotheses alone):
    :func:`bertlab.finetuning.fit_bag_of_words` on the :func:`pair_words` of each pair, with its
    ``settings``, the same logistic regression as chapter 08's baseline, over the three SNLI labels."""
    if len(train) == 0:
        raise ValueError("train is empty")
    classifier = fit_bag_of_words([pair_words(pair, hypothesis_only) for pair in train], [pair.label for pair in train],
                                  num_labels=len(SNLI_LABELS), **settings)
    return PairBagOfWords(classifier, hypothesis_only)


def pair_baselines(train: Sequence[SentencePair], dev: Sequence[SentencePair],
                   test: Sequence[SentencePair]) -> dict[str, BaselineResult]:
    """The pairs task's baselines, trained on ``train`` and scored on ``test`` over the three SNLI labels
    (none has a setting to choose on ``dev``): the majority class, and the bag of words of the premise and
    the hypothesis, then of the hypothesis alone (seed 0). Pairs that have no premise (the hypothesis-only
    experiment) get the last two as one: the hypothesis-only bag."""
    labels = [pair.label for pair in test]

    def scored(predictions: torch.Tensor) -> BaselineResult:
        return prediction_result(predictions, labels, len(SNLI_LABELS))

    with_premise = any(pair.premise for pair in (*train, *test))
    return {
        "majority class": scored(majority_predictions(train, test)),
        **({"bag of words, premise and hypothesis": scored(train_pair_bag_of_words(train, seed=0).predict(test))}
           if with_premise else {}),
        "bag of words, hypothesis only":
            scored(train_pair_bag_of_words(train, hypothesis_only=True, seed=0).predict(test)),
    }


# --------------------------------------------------------------------------------------------------
# Tagging
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MostFrequentTagger:
    """Tags each word with its most frequent tag in the training split; a word never seen there gets
    ``unknown_word_tag``, the most frequent tag of all (NOUN in English)."""

    tag_of_word: dict[str, str]
    unknown_word_tag: str

    def tag(self, words: Sequence[str]) -> list[str]:
        """The tag of each word."""
        return [self.tag_of_word.get(word, self.unknown_word_tag) for word in words]

    def predict(self, sentences: Sequence[TaggedSentence]) -> list[list[str]]:
        """The tags of the words of each sentence (their gold tags are not read)."""
        return [self.tag(sentence.words) for sentence in sentences]


def train_most_frequent_tagger(train: Sequence[TaggedSentence]) -> MostFrequentTagger:
    """The most frequent tag of each word form of ``train``, as written (case kept: "May" and "may"
    are two words), and the most frequent tag overall for unknown words; ties go to the tag first in
    alphabetical order."""
    tags_of_word: dict[str, Counter] = defaultdict(Counter)
    for sentence in train:
        for word, tag in zip(sentence.words, sentence.tags):
            tags_of_word[word][tag] += 1
    if not tags_of_word:
        raise ValueError("train has no tagged word")
    overall = sum(tags_of_word.values(), Counter())
    return MostFrequentTagger({word: _most_frequent(counts) for word, counts in tags_of_word.items()},
                              _most_frequent(overall))


def _most_frequent(counts: Counter) -> str:
    return min(counts, key=lambda tag: (-counts[tag], tag))


def tagging_baselines(train: Sequence[TaggedSentence], dev: Sequence[TaggedSentence],
                      test: Sequence[TaggedSentence]) -> dict[str, BaselineResult]:
    """The tagging task's baseline: the most frequent tag of each word of ``train``, its word accuracy on
    ``test`` and the words of each test sentence it tags right (``dev`` is not needed)."""
    predictions = train_most_frequent_tagger(train).predict(test)
    right = ExampleScores(words_tagged_right(predictions, test), [len(sentence.tags) for sentence in test])
    return {"most frequent tag of each word": BaselineResult({"accuracy": word_accuracy(predictions, test)}, right)}


# --------------------------------------------------------------------------------------------------
# Spans: the sliding-window baseline
# --------------------------------------------------------------------------------------------------

_WORD = re.compile(r"\w+")
# A sentence ends at ".", "!" or "?" (with any closing quotes or brackets) followed by whitespace.
_SENTENCE_END = re.compile(r"""[.!?]+["'”’)\]]*\s+""")


class ContextWord(NamedTuple):
    """A word of a context: lower-cased, its characters [start, end), and its sentence's index."""

    text: str
    start: int
    end: int
    sentence: int


def context_words(context: str) -> list[ContextWord]:
    """The words of ``context`` (runs of letters, digits and "_"; punctuation dropped), lower-cased,
    with their characters and sentences (a sentence ends at ".", "!" or "?" followed by whitespace)."""
    ends = [match.end() for match in _SENTENCE_END.finditer(context)]
    return [ContextWord(match.group().lower(), match.start(), match.end(), bisect.bisect_right(ends, match.start()))
            for match in _WORD.finditer(context)]


def sliding_window_answer(question: str, context: str, max_answer_words: int = 10) -> str:
    """The sliding-window baseline of Rajpurkar et al. (2016, section 5): the answer to ``question``,
    a span of ``context``.

    Rajpurkar et al. take as candidate answers the constituents of each sentence's parse, keep the
    candidates whose sentence, without the candidate, shares the most unigrams and bigrams with the
    question, and among those choose the best by the sliding window of Richardson et al. (2013),
    using the candidate's sentence as its context. Richardson et al.'s window, for an answer A and a
    question Q, slides |S| words over the text, S = words(A) u words(Q), and scores

        sw(A) = max_j  sum_{k = j .. j + |S| - 1}  IC(t_k) [t_k in S],   IC(w) = log(1 + 1 / C(w))

    where t_k is the k-th word of the text and C(w) counts w in the passage: a rare word matched
    weighs more. What is implemented here, with the differences from the paper:

    1. Words: runs of letters and digits, lower-cased (:func:`context_words`); no punctuation, stop
       words or lemmas. Sentences end at ".", "!" or "?" followed by whitespace (no parser:
       "U.S. Army" is cut after "U.S.").
    2. Candidates: every span of 1 to ``max_answer_words`` consecutive words within one sentence,
       in place of the constituents, which would need a parser. The default bound, 10, scored the
       best F1 (the task's metric) among 1 to 6, 8, 10, 12, 15, 20 and 30 on the course's SQuAD dev
       split (seed 0); F1 is flat from 6 on, and exact match is best at 3 (longer candidates cover
       more of the answer, and match it exactly less often).
    3. Overlap of a candidate (s, e) in sentence T: the number of distinct question words that occur
       in T outside positions s..e, plus the number of distinct question bigrams that occur in T with
       both words outside s..e. The candidates with the highest overlap in the whole context are kept.
    4. Among them, the highest sw(A) above, the window sliding over the candidate's sentence (a
       window as long as the sentence when it is shorter than |S|), C(w) counted over the context.
       Ties go to the candidate that starts first, then to the shorter one.
    5. Richardson et al.'s distance-based extension, which Rajpurkar et al. also tried, is left out.

    Returns:
        ``context[start:end]`` of the chosen candidate's first and last words, or "" for a context
        without words.
    """
    if max_answer_words < 1:
        raise ValueError(f"max_answer_words must be at least 1, got {max_answer_words}")
    words = context_words(context)
    if not words:
        return ""
    counts = Counter(word.text for word in words)
    inverse_count = {word: math.log(1 + 1 / count) for word, count in counts.items()}
    question_words = [word.lower() for word in _WORD.findall(question)]
    question_unigrams, question_bigrams = set(question_words), set(zip(question_words, question_words[1:]))

    sentences: dict[int, list[ContextWord]] = defaultdict(list)
    for word in words:
        sentences[word.sentence].append(word)
    candidates = []  # (overlap, sentence's words, s, e), in the order of the context
    for sentence in sentences.values():
        texts = [word.text for word in sentence]
        # the first and last position of each question unigram, and bigram, in the sentence
        unigram_spans, bigram_spans = {}, {}
        for position, text in enumerate(texts):
            if text in question_unigrams:
                first, _ = unigram_spans.get(text, (position, position))
                unigram_spans[text] = (first, position)
        for position, bigram in enumerate(zip(texts, texts[1:])):
            if bigram in question_bigrams:
                first, _ = bigram_spans.get(bigram, (position, position))
                bigram_spans[bigram] = (first, position)
        for start in range(len(texts)):
            for end in range(start, min(start + max_answer_words, len(texts))):
                # a unigram at p is outside s..e when p < s or p > e; a bigram at (p, p + 1) when p + 1 < s or p > e
                overlap = (sum(first < start or last > end for first, last in unigram_spans.values())
                           + sum(first < start - 1 or last > end for first, last in bigram_spans.values()))
                candidates.append((overlap, sentence, start, end))

    most_overlap = max(overlap for overlap, *_ in candidates)
    best_score, best = -1.0, None
    for overlap, sentence, start, end in candidates:
        if overlap < most_overlap:
            continue
        texts = [word.text for word in sentence]
        targets = set(texts[start : end + 1]) | question_unigrams
        weights = [inverse_count[text] if text in targets else 0.0 for text in texts]
        size = len(targets)
        score = max(math.fsum(weights[j : j + size]) for j in range(max(1, len(texts) - size + 1)))
        if score > best_score:  # strictly: a tie keeps the earlier, then the shorter, candidate
            best_score, best = score, (sentence[start].start, sentence[end].end)
    return context[best[0] : best[1]]


def sliding_window_answers(questions: Sequence[SquadQuestion], max_answer_words: int = 10) -> dict[str, str]:
    """:func:`sliding_window_answer` for each question: question id -> its answer text."""
    return {question.id: sliding_window_answer(question.question, question.context, max_answer_words)
            for question in questions}


#: The sliding window's longest answer, in words, that :func:`span_baselines` chooses from on dev.
WINDOW_ANSWER_WORDS = (1, 2, 3, 4, 5, 10)


def answer_words(text: str) -> int:
    """The words of an answer, as SQuAD's normalisation splits them (articles and punctuation aside)."""
    return len(squad_normalize(text).split())


def span_baselines(train: Sequence[SquadQuestion], dev: Sequence[SquadQuestion],
                   test: Sequence[SquadQuestion]) -> dict[str, BaselineResult]:
    """The spans task's baseline: the sliding window, its longest answer (:data:`WINDOW_ANSWER_WORDS`)
    chosen on ``dev`` by F1 (ties: the shortest), scored on ``test`` (exact match and F1, in percent, and
    each question's F1 in [0, 1]; ``train`` is not needed). Its details: the length chosen, the dev and test
    F1 at every length, and the mean length in words of its test answers and of the gold ones (each
    question's shortest)."""
    def window(questions: Sequence[SquadQuestion], limit: int) -> tuple[dict[str, str], SquadScores]:
        answers = sliding_window_answers(questions, max_answer_words=limit)
        return answers, squad_scores(answers, squad_references(questions))

    dev_f1 = {limit: window(dev, limit)[1].f1 for limit in WINDOW_ANSWER_WORDS}
    chosen = max(WINDOW_ANSWER_WORDS, key=lambda limit: dev_f1[limit])  # ties: the shortest
    test_f1 = {limit: window(test, limit)[1].f1 for limit in WINDOW_ANSWER_WORDS}
    answers, scores = window(test, chosen)
    f1 = ExampleScores([squad_f1(answers[question.id], [answer.text for answer in question.answers])
                        if question.id in answers else 0.0 for question in test])
    details = {"max_answer_words": chosen, "dev_f1_by_max_answer_words": dev_f1, "test_f1_by_max_answer_words": test_f1,
               "answer_words": sum(answer_words(answer) for answer in answers.values()) / len(test),
               "gold_answer_words": sum(min(answer_words(answer.text) for answer in question.answers)
                                        for question in test) / len(test)}
    return {"sliding window": BaselineResult({"exact_match": scores.exact_match, "f1": scores.f1}, f1, details)}
