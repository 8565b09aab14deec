"""Tests of bertlab.task_finetuning: batches, evaluation and fine-tuning of sentence pairs, tagging and spans.

The independent implementations: Hugging Face's tokenizer for the pair encoding and for the
alignment of tags to word pieces (``is_split_into_words`` and ``word_ids()``, first piece labelled,
as its token-classification examples do), scikit-learn and torchmetrics for accuracy and macro-F1,
and hand-computed values. The models are tiny random BERTs on the CPU; each test takes seconds.
"""

import gzip
import json
import shutil

import pytest
import torch
import transformers
from torch import nn

from bertlab import finetuning
from bertlab.bert import (
    IGNORE_INDEX,
    BertConfig,
    BertForQuestionAnswering,
    BertForSequenceClassification,
    BertForTokenClassification,
    QuestionAnsweringOutput,
    TokenClassifierOutput,
)
from bertlab.finetuning import ExampleScores, FineTuningRecipe, PaddedBatches, choose_learning_rate
from bertlab.task_data import (
    SNLI_LABELS,
    SentencePair,
    SquadAnswer,
    SquadQuestion,
    TaggedSentence,
    split_pairs_by_premise,
)
from bertlab.task_finetuning import (
    PAIRS,
    SPANS,
    TAGGING,
    TASKS,
    LabelVocabulary,
    SpanBatches,
    TaggingBatches,
    choose_task_learning_rate,
    evaluate_task,
    finetune_task,
    pair_batches,
    predict_answers,
    predict_tags,
    span_evaluation,
    span_task,
    tag_vocabulary,
    task_evaluation,
    task_example_scores,
    task_model,
    word_accuracy,
)
from bertlab.tasks import squad_windows
from bertlab.tokenization import BertTokenizer
from tests.conftest import REPO_ROOT, SHARED_DATASETS

pytestmark = pytest.mark.usefixtures("one_thread")

VOCAB = REPO_ROOT / "bertlab" / "course_bert" / "vocab.txt"
CPU = torch.device("cpu")
SHORT_SPANS = span_task(stride=16)  # windows of 64 tokens, the tests' max_length, cannot share 128 pieces

PAIRS_DATA = [
    SentencePair("A man plays a guitar on stage.", "A man is playing music.", 0),
    SentencePair("A man plays a guitar on stage.", "The man is asleep at home.", 2),
    SentencePair("A man plays a guitar on stage.", "The man is a famous singer.", 1),
    SentencePair("Two dogs run through the snow.", "Animals are outside.", 0),
    SentencePair("Two dogs run through the snow.", "The dogs are sleeping indoors.", 2),
    SentencePair("Two dogs run through the snow.", "The dogs chase a ball.", 1),
]
REVIEWS = [("a wonderful , moving film .", 1), ("dull and far too long .", 0), ("the cast is superb .", 1),
           ("a tedious mess .", 0)]
SENTENCES = [
    TaggedSentence(["The", "cat", "is", "playing", "."], ["DET", "NOUN", "AUX", "VERB", "PUNCT"]),
    TaggedSentence(["Dogs", "bark", "loudly", "!"], ["NOUN", "VERB", "ADV", "PUNCT"]),
    TaggedSentence(["She", "reads", "unaffable", "books"], ["PRON", "VERB", "ADJ", "NOUN"]),
    TaggedSentence(["Go", "home", "."], ["VERB", "ADV", "PUNCT"]),
]


def squad_question(identifier, title, context, question, answer):
    return SquadQuestion(identifier, title, context, question, [SquadAnswer(answer, context.index(answer))])


QUESTIONS = [
    squad_question("q1", "A", "The Chicago Bulls won the game in London.", "Who won the game?", "Chicago Bulls"),
    squad_question("q2", "A", "The Chicago Bulls won the game in London.", "Where was the game?", "London"),
    squad_question("q3", "B", "Rain falls from the clouds over Berlin.", "Where does rain fall?", "Berlin"),
    squad_question("q4", "B", "Rain falls from the clouds over Berlin.", "What falls from the clouds?", "Rain"),
]


@pytest.fixture(scope="module")
def tokenizer():
    return BertTokenizer(VOCAB)


@pytest.fixture(scope="module")
def hugging_face(tmp_path_factory):
    """Hugging Face's fast BERT tokenizer from the same vocab.txt (a local folder: no download)."""
    folder = tmp_path_factory.mktemp("hf_vocab")
    shutil.copy(VOCAB, folder / "vocab.txt")
    return transformers.BertTokenizerFast.from_pretrained(str(folder))


def tiny_config(tokenizer, num_layers=2):
    return BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=num_layers,
                      num_attention_heads=2, intermediate_size=64, max_position_embeddings=128,
                      hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


# --------------------------------------------------------------------------------------------------
# Batches


def test_padded_batches_cut_per_token_tensors_and_keep_per_example_ones():
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 0], [1, 0, 0, 0]])
    batches = PaddedBatches({"attention_mask": mask, "values": torch.arange(12).reshape(3, 4),
                             "labels": torch.tensor([7, 8, 9])}, batch_size=2)
    first, second = list(batches)
    assert torch.equal(first["values"], torch.tensor([[0, 1, 2], [4, 5, 6]]))  # longest of the batch: 3
    assert torch.equal(first["labels"], torch.tensor([7, 8])) and torch.equal(first["index"], torch.tensor([0, 1]))
    assert torch.equal(second["values"], torch.tensor([[8]])) and len(batches) == 2
    with pytest.raises(ValueError, match=r"values has shape \(3, 5\): expected \(3,\) or \(3, 4\)"):
        PaddedBatches({"attention_mask": mask, "values": torch.zeros(3, 5)})


def test_pair_batches_are_hugging_faces_pair_encoding(tokenizer, hugging_face):
    labels = LabelVocabulary(SNLI_LABELS)
    for max_length in (128, 12):  # 12: both sentences trimmed, the longer first
        batch = next(iter(pair_batches(PAIRS_DATA, tokenizer, labels, max_length=max_length, batch_size=6)))
        expected = hugging_face([pair.premise for pair in PAIRS_DATA], [pair.hypothesis for pair in PAIRS_DATA],
                                truncation="longest_first", max_length=max_length, padding=True, return_tensors="pt")
        for name in ("input_ids", "token_type_ids", "attention_mask"):
            assert torch.equal(batch[name], expected[name]), (name, max_length)
        assert batch["labels"].tolist() == [pair.label for pair in PAIRS_DATA]
    with pytest.raises(ValueError, match=r"dev\[1\] has the label 3, not one of the ids 0 .. 2"):
        pair_batches([PAIRS_DATA[0], SentencePair("a", "b", 3)], tokenizer, labels, what="dev")


def hugging_face_tag_labels(hugging_face, sentence, tags):
    """Hugging Face's token-classification recipe: the tag on the first piece of each word (word_ids())."""
    encoding = hugging_face(sentence.words, is_split_into_words=True)
    labels, previous = [], None
    for word in encoding.word_ids():
        labels.append(IGNORE_INDEX if word is None or word == previous else tags.id_of[sentence.tags[word]])
        previous = word
    return encoding["input_ids"], labels


def test_tagging_batches_label_first_pieces_as_hugging_face_does(tokenizer, hugging_face):
    tags = tag_vocabulary(SENTENCES)
    assert tags.names == ("ADJ", "ADV", "AUX", "DET", "NOUN", "PRON", "PUNCT", "VERB")  # sorted, distinct
    batches = TaggingBatches(SENTENCES, tokenizer, tags, batch_size=4)
    batch = next(iter(batches))
    for row, sentence in enumerate(SENTENCES):
        length = int(batch["attention_mask"][row].sum())
        input_ids, labels = hugging_face_tag_labels(hugging_face, sentence, tags)
        assert batch["input_ids"][row, :length].tolist() == input_ids
        assert batch["labels"][row, :length].tolist() == labels
        assert (batch["labels"][row, length:] == IGNORE_INDEX).all() and (batch["word_index"][row, length:] == -1).all()
        first_pieces = batch["word_index"][row] >= 0  # the labelled positions, word 0, 1, 2, ... in order
        assert torch.equal(first_pieces, batch["labels"][row] != IGNORE_INDEX)
        assert batch["word_index"][row][first_pieces].tolist() == list(range(len(sentence.words)))
        assert (batch["token_type_ids"][row] == 0).all()
    assert batches.num_words_without_piece == 0


def test_a_tag_unseen_in_training_is_a_clear_error(tokenizer):
    tags = tag_vocabulary(SENTENCES)
    dev = [SENTENCES[0], TaggedSentence(["Hmm", "..."], ["INTJ", "PUNCT"])]
    with pytest.raises(ValueError, match=r"dev\[1\]: the label 'INTJ' is not one of the 8 labels of the training"):
        TaggingBatches(dev, tokenizer, tags, what="dev")
    with pytest.raises(ValueError, match="at least 2 labels"):
        LabelVocabulary(("NOUN",))


class PieceTagger(nn.Module):
    """A stand-in token classifier: the logits of a token are a row of a table indexed by its id."""

    def __init__(self, table: torch.Tensor):
        super().__init__()
        self.table = nn.Parameter(table)

    def forward(self, input_ids, token_type_ids=None, attention_mask=None):
        return TokenClassifierOutput(None, self.table[input_ids])


def test_words_cut_off_by_max_length_count_as_errors(tokenizer):
    """A tagger right on every piece it sees: the accuracy is the share of words that kept a piece."""
    tags = tag_vocabulary(SENTENCES)
    table = torch.zeros(tokenizer.vocab_size, len(tags))
    for sentence in SENTENCES:
        for word, tag in zip(sentence.words, sentence.tags):
            table[tokenizer.convert_tokens_to_ids(tokenizer.tokenize(word)[0]), tags.id_of[tag]] = 1.0
    model = PieceTagger(table)
    full = TaggingBatches(SENTENCES, tokenizer, tags)
    assert word_accuracy(predict_tags(model, full, CPU), SENTENCES) == 1.0
    # 5 tokens: [CLS], 3 pieces, [SEP]. Cut: "playing" and "." of sentence 0 (the cat is playing .),
    # "!" of sentence 1 (dogs bark loud ##ly !), "books" of sentence 2 (she reads un ##aff ##able books).
    with pytest.warns(UserWarning, match="4 of the 16 words of sentences have no word piece within max_length=5"):
        cut = TaggingBatches(SENTENCES, tokenizer, tags, max_length=5)
    predictions = predict_tags(model, cut, CPU)
    assert predictions[0] == ["DET", "NOUN", "AUX", None, None] and predictions[2][-1] is None
    assert word_accuracy(predictions, SENTENCES) == pytest.approx(12 / 16)
    assert cut.num_words_without_piece == 4


def test_word_accuracy_by_hand():
    sentences = [TaggedSentence(["a", "b"], ["X", "Y"]), TaggedSentence(["c"], ["Z"])]
    assert word_accuracy([["X", "X"], ["Z"]], sentences) == pytest.approx(2 / 3)
    assert word_accuracy([["X", None], [None]], sentences) == pytest.approx(1 / 3)
    with pytest.raises(ValueError, match="sentence 1 has 1 words but 2 predicted tags"):
        word_accuracy([["X", "Y"], ["Z", "Z"]], sentences)


def test_span_batches_label_the_window_that_holds_the_answer(tokenizer):
    context = "Rain and snow fall from clouds. " * 4 + "The answer is the Chicago Bulls. " + "Wind blows. " * 4
    question = squad_question("long", "T", context, "Who?", "Chicago Bulls")
    batches = SpanBatches([question, QUESTIONS[2]], tokenizer, max_length=24, stride=6, batch_size=64)
    windows = squad_windows("Who?", context, question.answers[0].answer_start, "Chicago Bulls", tokenizer, 24, 6)
    assert len(windows) > 2 and batches.num_examples == len(windows) + 1
    assert batches.question_of_window == [0] * len(windows) + [1]
    batch = next(iter(batches))
    holding = [index for index, window in enumerate(windows) if window.start_position > 0]
    assert holding and holding == [i for i in range(len(windows)) if batch["start_positions"][i] > 0]
    for index, window in enumerate(windows):
        start, end = int(batch["start_positions"][index]), int(batch["end_positions"][index])
        if index in holding:
            assert tokenizer.convert_ids_to_tokens(batch["input_ids"][index, start : end + 1]) == \
                tokenizer.tokenize("Chicago Bulls")
            assert context[window.offsets[start][0] : window.offsets[end][1]] == "Chicago Bulls"
        else:
            assert (start, end) == (0, 0)
        length = len(window.input_ids)
        assert batch["context_mask"][index, :length].tolist() == window.context_mask
        assert not batch["context_mask"][index, length:].any()  # padding: never an answer


class TableReader(nn.Module):
    """A stand-in span extractor: the start and end logits of a token are entries of tables indexed by its id."""

    def __init__(self, start_table: torch.Tensor, end_table: torch.Tensor):
        super().__init__()
        self.start_table, self.end_table = nn.Parameter(start_table), nn.Parameter(end_table)

    def forward(self, input_ids, token_type_ids=None, attention_mask=None):
        return QuestionAnsweringOutput(None, self.start_table[input_ids], self.end_table[input_ids])


def reader(tokenizer, start_scores: dict[str, float], end_scores: dict[str, float]) -> TableReader:
    start, end = torch.zeros(tokenizer.vocab_size), torch.zeros(tokenizer.vocab_size)
    for table, scores in ((start, start_scores), (end, end_scores)):
        for token, score in scores.items():
            table[tokenizer.convert_tokens_to_ids(token)] = score
    return TableReader(start, end)


def test_predicted_answer_is_the_best_window_s_span_in_the_original_text(tokenizer):
    filler = "Rain falls on the hills. " * 3
    context = f"Paris  London is near. {filler}The  Café  Berlin is far. {filler}"
    question = squad_question("q", "T", context, "Which?", "Paris  London")
    batches = SpanBatches([question], tokenizer, max_length=24, stride=4)
    first_window = batches.offsets[0]
    assert len(batches.offsets) >= 3 and not any(span and context[span[0]:span[1]] == "Berlin" for span in first_window)
    # "paris london" (start 2 + end 2) only in the first window, "ca ##fe berlin" (3 + 3) in a later one
    berlin = reader(tokenizer, {"paris": 2.0, "ca": 3.0}, {"london": 2.0, "berlin": 3.0})
    assert predict_answers(berlin, batches, CPU) == {"q": "Café  Berlin"}  # characters of the context
    paris = reader(tokenizer, {"paris": 4.0, "ca": 3.0}, {"london": 4.0, "berlin": 3.0})
    assert predict_answers(paris, batches, CPU) == {"q": "Paris  London"}
    # an end before its start is no span: (paris, paris) scores 1 + 9, more than (london, london), 9 + 0
    backwards = reader(tokenizer, {"london": 9.0, "paris": 1.0}, {"paris": 9.0})
    assert predict_answers(backwards, batches, CPU) == {"q": "Paris"}
    shuffled = SpanBatches([question], tokenizer, max_length=24, stride=4, batch_size=1, shuffle=True)
    assert predict_answers(berlin, shuffled, CPU) == {"q": "Café  Berlin"}


def test_span_evaluation_grades_the_predicted_answers_by_hand(tokenizer):
    # "Chicago Bulls" (chicago bull ##s) for both questions: right for q1, wrong for q2 (London)
    model = reader(tokenizer, {"chicago": 5.0}, {"##s": 5.0})
    evaluation = span_evaluation(model, SpanBatches(QUESTIONS[:2], tokenizer, max_length=64, stride=16), CPU)
    assert evaluation.scores == {"exact_match": 50.0, "f1": 50.0}
    assert evaluation.example_scores == ExampleScores([1.0, 0.0])
    assert evaluation.predictions == {"q1": "Chicago Bulls", "q2": "Chicago Bulls"}
    q5 = squad_question("q5", "A", "The Chicago Bulls won.", "Who won?", "The Chicago Bulls won")
    # prediction "Chicago Bulls" against "Chicago Bulls won" (articles dropped): P = 1, R = 2/3, F1 = 0.8
    evaluation = span_evaluation(model, SpanBatches([q5], tokenizer, max_length=64, stride=16), CPU)
    assert evaluation.scores == pytest.approx({"exact_match": 0.0, "f1": 80.0})
    assert evaluation.example_scores.scores == pytest.approx([0.8])


# --------------------------------------------------------------------------------------------------
# Evaluation against independent implementations


def test_pair_evaluation_matches_scikit_learn_and_torchmetrics(tokenizer):
    metrics = pytest.importorskip("sklearn.metrics")
    torchmetrics = pytest.importorskip("torchmetrics.functional")
    labels = LabelVocabulary(SNLI_LABELS)
    torch.manual_seed(1)
    model = task_model(PAIRS, tiny_config(tokenizer), labels).eval()
    with torch.no_grad():  # one pair at a time, no padding
        logits = torch.cat([model(**tokenizer.batch_encode([pair.premise], [pair.hypothesis])).logits
                            for pair in PAIRS_DATA])
    predictions, truth = logits.argmax(-1), torch.tensor([pair.label for pair in PAIRS_DATA])
    scores = evaluate_task(PAIRS, model, tokenizer, PAIRS_DATA, labels=labels, batch_size=4, device="cpu",
                           precision="float32")
    assert scores["accuracy"] == pytest.approx(metrics.accuracy_score(truth, predictions))
    assert scores["macro_f1"] == pytest.approx(metrics.f1_score(truth, predictions, average="macro"))
    assert scores["loss"] == pytest.approx(float(nn.functional.cross_entropy(logits, truth)), rel=1e-5)
    assert scores["accuracy"] == pytest.approx(float(torchmetrics.accuracy(predictions, truth, task="multiclass",
                                                                          num_classes=3)))


def first_piece_tags(model, hugging_face, sentence) -> list[int]:
    """The tag id of each word of ``sentence``, encoded alone by Hugging Face: argmax_c logits[its first piece, c]."""
    encoding = hugging_face(sentence.words, is_split_into_words=True, return_tensors="pt")
    with torch.no_grad():
        tag_ids = model(encoding["input_ids"], encoding["token_type_ids"]).logits.argmax(-1)[0]  # (N,)
    word_ids = encoding.word_ids()
    firsts = [position for position, word in enumerate(word_ids) if word is not None and word != word_ids[position - 1]]
    return tag_ids[firsts].tolist()


def test_tagging_evaluation_matches_hugging_face_alignment_and_torchmetrics(tokenizer, hugging_face):
    torchmetrics = pytest.importorskip("torchmetrics.functional")
    tags = tag_vocabulary(SENTENCES)
    torch.manual_seed(2)
    model = task_model(TAGGING, tiny_config(tokenizer), tags).eval()
    predicted = [tag for sentence in SENTENCES for tag in first_piece_tags(model, hugging_face, sentence)]
    gold = [tags.id_of[tag] for sentence in SENTENCES for tag in sentence.tags]
    expected = float(torchmetrics.accuracy(torch.tensor(predicted), torch.tensor(gold), task="multiclass",
                                           num_classes=len(tags), average="micro"))
    scores = evaluate_task(TAGGING, model, tokenizer, SENTENCES, labels=tags, batch_size=3, device="cpu",
                           precision="float32")
    assert scores == {"accuracy": pytest.approx(expected)}


# --------------------------------------------------------------------------------------------------
# One pass over the examples: the scores, the score of each example and the predictions

#: A context cut into more than one window of 64 tokens sharing 16 pieces, the answer in a later one.
LONG_QUESTION = squad_question("long", "C", "Rain and snow fall from clouds. " * 6 + "The answer is the Chicago Bulls. "
                               + "Wind blows. " * 6, "Who is the answer?", "Chicago Bulls")
ONE_PASS_CASES = [(finetuning.SENTENCES, REVIEWS), (PAIRS, PAIRS_DATA), (TAGGING, SENTENCES),
                  (SHORT_SPANS, QUESTIONS + [LONG_QUESTION])]


def labels_by_hand(model, hugging_face, task, examples):
    """Each example alone (Hugging Face's encoding, no padding): the predicted labels argmax_c logits, their
    accuracy (scikit-learn), macro-F1 over the model's labels (scikit-learn) and mean cross-entropy, and
    each example right (1) or wrong (0)."""
    metrics = pytest.importorskip("sklearn.metrics")
    with torch.no_grad():
        logits = torch.cat([model(**hugging_face(*([example.premise, example.hypothesis] if task is PAIRS
                                                   else [example[0]]), return_tensors="pt")).logits
                            for example in examples])  # (num_examples, C)
    truth = torch.tensor([example.label if task is PAIRS else example[1] for example in examples])
    predictions = logits.argmax(-1)
    scores = {"accuracy": metrics.accuracy_score(truth, predictions),
              "macro_f1": metrics.f1_score(truth, predictions, average="macro"),
              "loss": float(nn.functional.cross_entropy(logits, truth))}
    return scores, [int(p == t) for p, t in zip(predictions, truth)], None, predictions


def tags_by_hand(model, hugging_face, labels, sentences):
    """Each sentence alone (Hugging Face's encoding): the tag of each word argmax_c logits[its first piece, c],
    the share of all words tagged right, and each sentence's words tagged right out of its words."""
    predicted = [[labels.names[tag] for tag in first_piece_tags(model, hugging_face, sentence)]
                 for sentence in sentences]
    right = [sum(p == t for p, t in zip(tags, sentence.tags)) for tags, sentence in zip(predicted, sentences)]
    weights = [len(sentence.tags) for sentence in sentences]
    return {"accuracy": sum(right) / sum(weights)}, right, weights, predicted


def answers_by_hand(model, hugging_face, questions, max_length=64, stride=16, max_answer_length=30):
    """Each question's windows (Hugging Face's, ``return_overflowing_tokens``), each window alone: every span
    (s, e) of context tokens with s <= e < s + max_answer_length scored start[s] + end[e], the best of all the
    windows (ties: the earlier) the answer; torchmetrics' SQuAD exact match and F1 of the answers, and of each
    answer alone its F1 in [0, 1]."""
    squad = pytest.importorskip("torchmetrics.functional.text").squad
    answers = {}
    with torch.no_grad():
        for question in questions:
            windows = hugging_face(question.question, question.context, truncation="only_second", max_length=max_length,
                                   stride=stride, return_overflowing_tokens=True, return_offsets_mapping=True)
            best = None  # (score, start character, end character)
            for window in range(len(windows["input_ids"])):
                output = model(torch.tensor([windows["input_ids"][window]]),
                               torch.tensor([windows["token_type_ids"][window]]))
                start, end = output.start_logits[0], output.end_logits[0]
                context = [position for position, sequence in enumerate(windows.sequence_ids(window)) if sequence == 1]
                offsets = windows["offset_mapping"][window]
                for s in context:
                    for e in context:
                        if s <= e < s + max_answer_length and (best is None or float(start[s] + end[e]) > best[0]):
                            best = (float(start[s] + end[e]), offsets[s][0], offsets[e][1])
            answers[question.id] = question.context[best[1] : best[2]]
    assert any(len(hugging_face(q.question, q.context, truncation="only_second", max_length=max_length, stride=stride,
                                return_overflowing_tokens=True)["input_ids"]) > 1 for q in questions)

    def scores(chosen):
        return {name: float(value) for name, value in squad(
            [{"prediction_text": answers[q.id], "id": q.id} for q in chosen],
            [{"answers": {"answer_start": [a.answer_start for a in q.answers], "text": [a.text for a in q.answers]},
              "id": q.id} for q in chosen]).items()}

    return scores(questions), [scores([q])["f1"] / 100 for q in questions], None, answers


@pytest.mark.parametrize("task, examples", ONE_PASS_CASES, ids=["sentence", "pairs", "tagging", "spans"])
def test_one_pass_evaluation_matches_the_logits(tokenizer, hugging_face, task, examples):
    """task_evaluation's scores, score of each example and predictions are those computed by hand from the
    model's logits, example by example; evaluate_task and task_example_scores give the same scores."""
    labels = task.labels(examples) if task.labels else None
    torch.manual_seed(3)
    model = task_model(task, tiny_config(tokenizer), labels).eval()
    if task.name == "tagging":
        scores, example_scores, weights, predictions = tags_by_hand(model, hugging_face, labels, examples)
    elif task.name == "spans":
        scores, example_scores, weights, predictions = answers_by_hand(model, hugging_face, examples)
    else:
        scores, example_scores, weights, predictions = labels_by_hand(model, hugging_face, task, examples)
    options = dict(labels=labels, max_length=64, batch_size=2, device="cpu", precision="float32")
    evaluation = task_evaluation(task, model, tokenizer, examples, **options)
    assert evaluation.scores == pytest.approx(scores, rel=1e-5)
    assert evaluation.example_scores.scores == pytest.approx(example_scores)
    assert evaluation.example_scores.weights == weights
    if task.name in ("sentence", "pairs"):
        assert torch.equal(evaluation.predictions, predictions)
    else:
        assert evaluation.predictions == predictions
    assert evaluate_task(task, model, tokenizer, examples, **options) == evaluation.scores
    assert task_example_scores(task, model, tokenizer, examples, **options) == evaluation.example_scores


@pytest.mark.parametrize("task, examples", ONE_PASS_CASES, ids=["sentence", "pairs", "tagging", "spans"])
def test_one_pass_evaluation_runs_the_model_once_per_batch(tokenizer, task, examples):
    labels = task.labels(examples) if task.labels else None
    model = task_model(task, tiny_config(tokenizer, num_layers=1), labels)
    calls = []
    model.register_forward_hook(lambda module, inputs, output: calls.append(1))
    task_evaluation(task, model, tokenizer, examples, labels=labels, max_length=64, batch_size=2, device="cpu")
    batches = task.batches(examples, tokenizer, labels, max_length=64, batch_size=2)
    assert len(calls) == len(batches) > 1


# --------------------------------------------------------------------------------------------------
# Fine-tuning


@pytest.mark.parametrize("task, examples", [(finetuning.SENTENCES, REVIEWS), (PAIRS, PAIRS_DATA), (TAGGING, SENTENCES),
                                            (SHORT_SPANS, QUESTIONS)], ids=["sentence", "pairs", "tagging", "spans"])
def test_a_tiny_model_learns_a_handful_of_examples(tokenizer, task, examples, tmp_path):
    labels = task.labels(examples) if task.labels else None
    torch.manual_seed(0)
    model = task_model(task, tiny_config(tokenizer), labels)
    recipe = FineTuningRecipe(epochs=60, batch_size=len(examples), encoder_lr=3e-3, warmup_ratio=0.0, max_length=64,
                              seed=0)
    history = finetune_task(task, model, tokenizer, examples, examples, recipe, labels=labels, device="cpu",
                            progress=False, output_dir=tmp_path, precision="float32")
    assert [record["epoch"] for record in history] == list(range(1, 61))
    assert history[-1]["train_loss"] < 0.25 * history[0]["train_loss"]
    best = {"sentence": "accuracy", "pairs": "accuracy", "tagging": "accuracy", "spans": "exact_match"}[task.name]
    assert history[-1][f"dev_{best}"] == {"accuracy": 1.0, "exact_match": 100.0}[best]
    assert set(history[-1]) == {"epoch", "train_loss", *(f"dev_{name}" for name in
                                                           {"sentence": ["accuracy", "macro_f1", "loss"],
                                                            "pairs": ["accuracy", "macro_f1", "loss"],
                                                            "tagging": ["accuracy"],
                                                            "spans": ["exact_match", "f1"]}[task.name])}
    assert json.loads((tmp_path / "history.json").read_text()) == history
    reloaded = task.model_class.from_pretrained(tmp_path)
    scores = evaluate_task(task, reloaded, tokenizer, examples, labels=labels, max_length=64, device="cpu",
                           precision="float32")
    assert scores == pytest.approx({name[len("dev_"):]: value for name, value in history[-1].items()
                                    if name.startswith("dev_")}, rel=1e-4)


@pytest.mark.parametrize("task, examples", [(finetuning.SENTENCES, REVIEWS), (PAIRS, PAIRS_DATA), (TAGGING, SENTENCES),
                                            (SHORT_SPANS, QUESTIONS)], ids=["sentence", "pairs", "tagging", "spans"])
def test_the_scores_of_each_example_make_the_task_s_score(tokenizer, task, examples):
    """Their weighted mean is evaluate_task's score (SQuAD's F1 is in percent there), example by example
    in the examples' order: an untrained model gets some right and some wrong."""
    labels = task.labels(examples) if task.labels else None
    torch.manual_seed(1)
    model = task_model(task, tiny_config(tokenizer, num_layers=1), labels)
    per_example = task_example_scores(task, model, tokenizer, examples, labels=labels, max_length=64,
                                      batch_size=2, device="cpu", precision="float32")
    weights = per_example.weights or [1] * len(examples)
    assert len(per_example.scores) == len(weights) == len(examples)
    score = evaluate_task(task, model, tokenizer, examples, labels=labels, max_length=64, device="cpu",
                          precision="float32")[task.metric]
    assert sum(per_example.scores) / sum(weights) * (100 if task.name == "spans" else 1) == pytest.approx(score)
    if task.name == "tagging":
        assert weights == [len(sentence.tags) for sentence in examples]
    for index, example in enumerate(examples):  # each alone: the same score as in the whole
        alone = task_example_scores(task, model, tokenizer, [example], labels=labels, max_length=64, device="cpu",
                                    precision="float32")
        assert alone.scores == pytest.approx([per_example.scores[index]])


@pytest.mark.parametrize("task, examples", [(finetuning.SENTENCES, REVIEWS), (PAIRS, PAIRS_DATA), (TAGGING, SENTENCES),
                                            (SHORT_SPANS, QUESTIONS)], ids=["sentence", "pairs", "tagging", "spans"])
def test_fine_tuning_and_evaluation_run_on_the_device(tokenizer, task, examples, device):
    labels = task.labels(examples) if task.labels else None
    model = task_model(task, tiny_config(tokenizer, num_layers=1), labels)
    recipe = FineTuningRecipe(epochs=2, batch_size=2, max_length=64)
    history = finetune_task(task, model, tokenizer, examples, examples, recipe, labels=labels, device=device,
                            progress=False)
    assert next(model.parameters()).device.type == device.type
    assert evaluate_task(task, model, tokenizer, examples, labels=labels, max_length=64) == \
        pytest.approx({name[len("dev_"):]: value for name, value in history[-1].items() if name.startswith("dev_")})


def test_fine_tuning_is_seeded(tokenizer):
    histories = []
    for _ in range(2):
        torch.manual_seed(5)
        model = task_model(SHORT_SPANS, tiny_config(tokenizer, num_layers=1), None)
        recipe = FineTuningRecipe(epochs=2, batch_size=2, max_length=64, seed=3)
        histories.append(finetune_task(SHORT_SPANS, model, tokenizer, QUESTIONS, recipe=recipe, device="cpu",
                         progress=False))
    assert histories[0] == histories[1]


def test_labels_must_fit_the_task_and_the_model(tokenizer):
    tags = tag_vocabulary(SENTENCES)
    tagger = task_model(TAGGING, tiny_config(tokenizer, num_layers=1), tags)
    assert isinstance(tagger, BertForTokenClassification) and tagger.num_labels == 8
    with pytest.raises(ValueError, match="the tagging task needs labels=task.labels"):
        evaluate_task(TAGGING, tagger, tokenizer, SENTENCES)
    with pytest.raises(ValueError, match="the model scores 8 labels but there are 3"):
        evaluate_task(TAGGING, tagger, tokenizer, SENTENCES, labels=LabelVocabulary(("A", "B", "C")))
    reader = task_model(SPANS, tiny_config(tokenizer, num_layers=1), None)
    assert isinstance(reader, BertForQuestionAnswering)
    with pytest.raises(ValueError, match="the spans task has no label names"):
        finetune_task(SPANS, reader, tokenizer, QUESTIONS, labels=tags, device="cpu", progress=False)
    assert isinstance(task_model(PAIRS, tiny_config(tokenizer, num_layers=1), LabelVocabulary(SNLI_LABELS)),
                      BertForSequenceClassification)
    assert TASKS == {"sentence": finetuning.SENTENCES, "pairs": PAIRS, "tagging": TAGGING, "spans": SPANS}


@pytest.mark.parametrize("task, examples", [(finetuning.SENTENCES, REVIEWS), (PAIRS, PAIRS_DATA), (TAGGING, SENTENCES),
                                            (SPANS, QUESTIONS)], ids=["sentence", "pairs", "tagging", "spans"])
def test_each_task_type_s_baselines_score_each_test_example(task, examples):
    """A task type declares its dataset and its baselines; each baseline's score is the weighted mean of its
    scores on the test examples (SQuAD's in percent), as the model's is (the paired tests read them)."""
    assert task.dataset and callable(task.load_splits)
    baselines = task.baselines(examples, examples, examples)
    assert baselines, f"{task.name} has no baseline"
    for name, result in baselines.items():
        weights = result.example_scores.weights or [1] * len(examples)
        assert len(result.example_scores.scores) == len(weights) == len(examples), name
        mean = sum(result.example_scores.scores) / sum(weights) * (100 if task.name == "spans" else 1)
        assert result.scores[task.metric] == pytest.approx(mean), name


def test_span_task_windows_with_its_stride(tokenizer):
    """A stride the windows cannot hold is refused by squad_windows; span_task carries its own."""
    model = task_model(SPANS, tiny_config(tokenizer, num_layers=1), None)
    with pytest.raises(ValueError, match="which must exceed stride=128"):
        evaluate_task(SPANS, model, tokenizer, QUESTIONS, max_length=64, device="cpu")
    assert set(evaluate_task(span_task(stride=16), model, tokenizer, QUESTIONS, max_length=64, device="cpu")) == \
        {"exact_match", "f1"}


def test_the_learning_rate_is_chosen_on_the_task_s_metric(tokenizer):
    def train_with(lr):
        torch.manual_seed(0)
        model = task_model(SHORT_SPANS, tiny_config(tokenizer), None)
        recipe = FineTuningRecipe(epochs=40, batch_size=4, encoder_lr=lr, warmup_ratio=0.0, max_length=64)
        finetune_task(SHORT_SPANS, model, tokenizer, QUESTIONS, recipe=recipe, device="cpu", progress=False,
                      precision="float32")
        return model

    tuned = choose_learning_rate(train_with, [1e-9, 1e-2], tokenizer, QUESTIONS, task=SHORT_SPANS, max_length=64,
                                 precision="float32")
    assert tuned.metric == "f1" and tuned.learning_rate == 1e-2 and tuned.dev["f1"] == 100.0
    assert list(tuned.dev_score_by_learning_rate) == [1e-9, 1e-2] and tuned.dev_score_by_learning_rate[1e-9] < 100
    with pytest.raises(AttributeError, match="maximised f1, not accuracy"):
        tuned.dev_accuracy_by_learning_rate


# --------------------------------------------------------------------------------------------------
# The splits


def test_the_task_s_learning_rate_search_of_earlier_releases_still_runs_with_a_warning(tokenizer):
    def untrained(lr):
        torch.manual_seed(0)
        return task_model(SHORT_SPANS, tiny_config(tokenizer, num_layers=1), None)

    with pytest.warns(DeprecationWarning, match=r"choose_learning_rate\(\.\.\., task=task\)"):
        tuned = choose_task_learning_rate(SHORT_SPANS, untrained, [1e-3], tokenizer, QUESTIONS, max_length=64,
                                          precision="float32")
    expected = choose_learning_rate(untrained, [1e-3], tokenizer, QUESTIONS, task=SHORT_SPANS, max_length=64,
                                    precision="float32")
    assert (tuned.metric, tuned.dev) == ("f1", expected.dev)


def test_pairs_are_split_by_premise():
    pairs = [SentencePair(f"premise {index // 3}", f"hypothesis {index}", index % 3) for index in range(60)]
    train, dev = split_pairs_by_premise(pairs, seed=0)
    assert len(dev) == 6 and len(train) == 54  # 2 of the 20 premises, 3 pairs each
    assert not {pair.premise for pair in train} & {pair.premise for pair in dev}
    assert train == [pair for pair in pairs if pair in train]  # the order of the file
    assert split_pairs_by_premise(pairs, seed=0) == (train, dev) != split_pairs_by_premise(pairs, seed=1)


def test_a_missing_dataset_names_the_folder_and_the_file(tmp_path):
    (tmp_path / "UD_English-EWT").mkdir()
    for split in ("train", "dev"):
        with gzip.open(tmp_path / "UD_English-EWT" / f"en_ewt-ud-{split}.conllu.gz", "wt") as file:
            file.write("1\tHi\thi\tINTJ\tUH\t_\t0\troot\t_\t_\n\n")
    with pytest.raises(FileNotFoundError, match=r"UD English EWT was not found in the data folder .*: expected "
                                                r"en_ewt-ud-test.conllu \(or en_ewt-ud-test.conllu.gz\)"):
        TASKS["tagging"].load_splits(tmp_path)
    (tmp_path / "en_ewt-ud-test.conllu").write_text("1\tHo\tho\tINTJ\tUH\t_\t0\troot\t_\t_\n")  # in the root: found
    splits = TASKS["tagging"].load_splits(tmp_path)
    assert [len(split) for split in (splits.train, splits.dev, splits.test)] == [1, 1, 1]
    with pytest.raises(FileNotFoundError, match="expected snli_1.0_dev.jsonl"):
        TASKS["pairs"].load_splits(tmp_path)


@pytest.mark.skipif(not (SHARED_DATASETS / "squad-v1.1").is_dir(), reason=f"no datasets in {SHARED_DATASETS}")
def test_the_splits_of_the_real_datasets():
    snli = TASKS["pairs"].load_splits(SHARED_DATASETS)
    assert len(snli.train) + len(snli.dev) == 9842 and len(snli.test) == 9824  # labelled pairs of dev and test
    assert not {pair.premise for pair in snli.train} & {pair.premise for pair in snli.dev}
    ewt = TASKS["tagging"].load_splits(SHARED_DATASETS)
    assert [len(ewt.train), len(ewt.dev), len(ewt.test)] == [12544, 2001, 2077]
    assert len(tag_vocabulary(ewt.train)) == 17
    squad = TASKS["spans"].load_splits(SHARED_DATASETS)
    assert len(squad.train) + len(squad.dev) + len(squad.test) == 10570
    titles = [{question.title for question in split} for split in (squad.train, squad.dev, squad.test)]
    assert [len(split) for split in titles] == [38, 5, 5] and not (titles[0] & titles[1] or titles[1] & titles[2])
