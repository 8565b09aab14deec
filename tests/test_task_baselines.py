"""Tests of bertlab.task_baselines on hand-made data whose answers are worked out by hand."""

import dataclasses
import math

import pytest
import torch

from bertlab.task_baselines import (
    ContextWord,
    context_words,
    majority_label,
    majority_predictions,
    pair_baselines,
    pair_words,
    sliding_window_answer,
    sliding_window_answers,
    train_most_frequent_tagger,
    train_pair_bag_of_words,
)
from bertlab.task_data import SentencePair, SquadAnswer, SquadQuestion, TaggedSentence
from bertlab.finetuning import prediction_result
from bertlab.task_data import squad_references
from bertlab.tasks import word_accuracy
from bertlab.tasks import squad_scores

# --------------------------------------------------------------------------------------------------
# Sentence pairs


def test_majority_label_and_its_predictions():
    assert majority_label([2, 1, 2, 0, 1, 2]) == 2
    assert majority_label([1, 0, 1, 0]) == 0  # a tie goes to the smallest label
    train = [SentencePair("p", "h", label) for label in (1, 1, 2)]
    assert majority_predictions(train, train + train).tolist() == [1] * 6
    with pytest.raises(ValueError, match="no label"):
        majority_label([])


def test_pair_scores_by_hand():
    pairs = [SentencePair("p", "h", label) for label in (0, 0, 1, 2)]
    scores = prediction_result(torch.tensor([0, 1, 1, 1]), [pair.label for pair in pairs], 3).scores
    # class 0: TP 1, FP 0, FN 1 -> F1 2/3; class 1: TP 1, FP 2, FN 0 -> 1/2; class 2: TP 0 -> 0
    assert scores == pytest.approx({"accuracy": 0.5, "macro_f1": (2 / 3 + 1 / 2 + 0) / 3})


def test_pair_words_by_hand():
    pair = SentencePair("A dog runs.", "The dog sleeps.", 2)
    assert pair_words(pair) == [
        "premise:a", "premise:dog", "premise:runs", "premise:.",
        "hypothesis:the", "hypothesis:dog", "hypothesis:sleeps", "hypothesis:.",
        "both:dog", "both:.",
    ]
    assert pair_words(pair, hypothesis_only=True) == ["hypothesis:the", "hypothesis:dog", "hypothesis:sleeps",
                                                      "hypothesis:."]


INSTRUMENTS = ("guitar", "piano", "drums", "violin", "flute", "cello")


def instrument_pairs(players):
    """Entailment (0) when the hypothesis names the premise's instrument, contradiction (2) otherwise: the
    hypothesis alone says nothing of the label, its overlap with the premise says everything."""
    return [SentencePair(f"{player} plays the {played} tonight.", f"{player} plays the {named}.",
                         0 if played == named else 2)
            for player in players for played in INSTRUMENTS for named in INSTRUMENTS]


def test_the_pair_bag_of_words_reads_the_overlap_that_the_hypothesis_alone_lacks():
    train, test = instrument_pairs(["A man", "A woman", "The boy"]), instrument_pairs(["The girl", "An old man"])
    full = train_pair_bag_of_words(train, epochs=10, seed=0)
    assert prediction_result(full.predict(test), [pair.label for pair in test], 3).scores \
        == {"accuracy": 1.0, "macro_f1": 1.0}
    hypothesis_only = train_pair_bag_of_words(train, hypothesis_only=True, epochs=10, seed=0)
    # every hypothesis word goes with both labels (1 entailment for 5 contradictions): no better than the
    # majority class, contradiction, 30 of the 36 pairs of each player
    predictions = hypothesis_only.predict(test)
    assert predictions.tolist() == [2] * len(test)
    assert prediction_result(predictions, [pair.label for pair in test], 3).scores["accuracy"] == pytest.approx(5 / 6)


def test_the_hypothesis_alone_reveals_annotation_artefacts():
    """Gururangan et al. (2018): words such as "nobody" or "sleeping" give a contradiction away."""
    premises = ["A man plays a guitar.", "Two kids run on a beach.", "A woman reads a book.", "A dog jumps."]
    train = [pair for premise in premises for pair in (
        SentencePair(premise, "Nobody is outside.", 2), SentencePair(premise, "The cat is sleeping.", 2),
        SentencePair(premise, "Someone is moving.", 0), SentencePair(premise, "A person is present.", 0))]
    test = [SentencePair("A chef cooks pasta.", "Nobody cooks.", 2), SentencePair("A chef cooks pasta.",
                                                                                  "A person is cooking.", 0)]
    model = train_pair_bag_of_words(train, hypothesis_only=True, epochs=10, seed=0)
    assert model.predict(test).tolist() == [2, 0]


def test_pairs_without_premises_get_one_bag_of_words_named_for_what_it_reads():
    """The hypothesis-only experiment's best baseline must not be named for a premise it never saw."""
    train, test = instrument_pairs(["A man", "A woman", "The boy"]), instrument_pairs(["The girl"])
    assert list(pair_baselines(train, [], test)) == ["majority class", "bag of words, premise and hypothesis",
                                                    "bag of words, hypothesis only"]
    alone = [dataclasses.replace(pair, premise="") for pair in (*train, *test)]
    baselines = pair_baselines(alone[:len(train)], [], alone[len(train):])
    assert list(baselines) == ["majority class", "bag of words, hypothesis only"]
    assert baselines["bag of words, hypothesis only"].scores["accuracy"] == pytest.approx(5 / 6)


# --------------------------------------------------------------------------------------------------
# Tagging


def test_most_frequent_tagger_by_hand():
    train = [
        TaggedSentence(["the", "dog", "runs"], ["DET", "NOUN", "VERB"]),
        TaggedSentence(["the", "runs", "ended"], ["DET", "NOUN", "VERB"]),
        TaggedSentence(["dog", "days"], ["NOUN", "NOUN"]),
    ]
    tagger = train_most_frequent_tagger(train)
    # NOUN 4, DET 2, VERB 2; "runs": NOUN 1, VERB 1, a tie that goes to NOUN (alphabetical order)
    assert tagger.unknown_word_tag == "NOUN"
    assert tagger.tag_of_word == {"the": "DET", "dog": "NOUN", "runs": "NOUN", "ended": "VERB", "days": "NOUN"}
    assert tagger.tag(["The", "dog", "ended", "quickly"]) == ["NOUN", "NOUN", "VERB", "NOUN"]  # case kept
    test = [TaggedSentence(["the", "dog", "runs", "home"], ["DET", "NOUN", "VERB", "ADV"])]
    assert word_accuracy(tagger.predict(test), test) == pytest.approx(2 / 4)


# --------------------------------------------------------------------------------------------------
# Spans: the sliding window


def test_context_words_keep_characters_and_sentences():
    assert context_words("Hello, world! It's 3.5 km.") == [
        ContextWord("hello", 0, 5, 0), ContextWord("world", 7, 12, 0), ContextWord("it", 14, 16, 1),
        ContextWord("s", 17, 18, 1), ContextWord("3", 19, 20, 1), ContextWord("5", 21, 22, 1),
        ContextWord("km", 23, 25, 1),
    ]


def test_the_sentence_that_shares_the_most_with_the_question_gives_the_answer():
    # Candidate "Paris" leaves is, the, capital, of, france (5 unigrams) and 4 bigrams of the question in its
    # sentence: overlap 9. Every other candidate of that sentence covers a question word, and the second
    # sentence shares at most 4 unigrams and 3 bigrams.
    context = "Paris is the capital of France. Rome is the capital of Italy."
    assert sliding_window_answer("What is the capital of France?", context) == "Paris"


def test_the_window_chooses_among_the_candidates_of_most_overlap():
    context = "Paris is the capital of France, said Bob. Bob said hello."
    question = "What is the capital of France?"
    # Overlap 9 for "Paris", "said", "Bob" and "said Bob" (none covers a question word); counts in the context:
    # said 2, bob 2, the others 1, so IC = log 2 or log 1.5. Windows over the first sentence (8 words):
    #   Paris:    S = {paris} + Q (7 words), best window paris .. said: 6 log 2             = 4.159
    #   said:     S = {said} + Q (7), best window is .. said (or is .. bob): 5 log 2 + log 1.5 = 3.871
    #   Bob:      S = {bob} + Q (7), best window is .. bob: 5 log 2 + log 1.5                = 3.871
    #   said Bob: S = {said, bob} + Q (8), the whole sentence: 5 log 2 + 2 log 1.5          = 4.277
    assert 5 * math.log(2) + 2 * math.log(1.5) > 6 * math.log(2) > 5 * math.log(2) + math.log(1.5)
    assert sliding_window_answer(question, context, max_answer_words=2) == "said Bob"
    assert sliding_window_answer(question, context, max_answer_words=1) == "Paris"


def test_ties_go_to_the_earlier_then_the_shorter_candidate():
    # No question word in the context: every overlap is 0, and each word occurs once (IC = log 2). A
    # one-word candidate scores log 2, a two-word one 2 log 2: "Alpha beta" and "Gamma delta" tie.
    assert sliding_window_answer("Zeta?", "Alpha beta. Gamma delta.", max_answer_words=2) == "Alpha beta"
    assert sliding_window_answer("Zeta?", "Alpha beta. Gamma delta.", max_answer_words=1) == "Alpha"
    assert sliding_window_answer("Zeta?", " ... ") == ""
    with pytest.raises(ValueError, match="max_answer_words must be at least 1"):
        sliding_window_answer("Zeta?", "Alpha.", max_answer_words=0)


def test_sliding_window_answers_are_graded_by_the_squad_scores():
    context = "Paris is the capital of France. Rome is the capital of Italy."
    questions = [
        SquadQuestion("q1", "T", context, "What is the capital of France?", [SquadAnswer("Paris", 0)]),
        SquadQuestion("q2", "T", context, "What is the capital of Italy?", [SquadAnswer("Rome", 32)]),
        SquadQuestion("q3", "T", context, "Which city is the capital of France?", [SquadAnswer("Rome", 32)]),
    ]
    answers = sliding_window_answers(questions)
    assert answers == {"q1": "Paris", "q2": "Rome", "q3": "Paris"}
    scores = squad_scores(answers, squad_references(questions))
    assert (scores.exact_match, scores.f1) == pytest.approx((200 / 3, 200 / 3))
