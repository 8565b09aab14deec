"""Tests of bertlab.task_data on small files written here, and on the real files when present."""

import gzip
import json

import pytest

from bertlab.task_data import (
    SNLI_LABELS,
    UPOS_TAGS,
    SentencePair,
    SquadAnswer,
    read_conllu,
    read_snli,
    read_squad,
    split_squad_by_article,
)
from tests.conftest import SHARED_DATASETS

SNLI_DIR = SHARED_DATASETS / "snli_1.0"
EWT_DIR = SHARED_DATASETS / "UD_English-EWT"
SQUAD_DIR = SHARED_DATASETS / "squad-v1.1"


def write(path, text):
    """Write ``text`` to ``path``, gzip-compressed when the name ends in .gz; return the path."""
    if path.name.endswith(".gz"):
        with gzip.open(path, "wt", encoding="utf-8") as file:
            file.write(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


# --------------------------------------------------------------------------------------------------
# SNLI
# --------------------------------------------------------------------------------------------------


def snli_line(premise, hypothesis, label):
    return json.dumps({"gold_label": label, "sentence1": premise, "sentence2": hypothesis, "pairID": "x",
                       "annotator_labels": [label]}) + "\n"


@pytest.mark.parametrize("name", ["snli_1.0_dev.jsonl", "snli_1.0_dev.jsonl.gz"])
def test_read_snli(tmp_path, name):
    text = (snli_line("A man sleeps.", "A person rests.", "entailment")
            + snli_line("A dog runs.", "A cat runs.", "contradiction")
            + snli_line("Two kids play.", "They are siblings.", "-")
            + "\n"
            + snli_line("A café is open.", "It sells coffee.", "neutral"))
    pairs = read_snli(write(tmp_path / name, text))
    assert pairs == [
        SentencePair("A man sleeps.", "A person rests.", 0),
        SentencePair("A dog runs.", "A cat runs.", 2),
        SentencePair("A café is open.", "It sells coffee.", 1),
    ]
    assert [SNLI_LABELS[pair.label] for pair in pairs] == ["entailment", "contradiction", "neutral"]


@pytest.mark.parametrize("bad_line, message", [
    ("{not json\n", "line 2: not a JSON object"),
    ('{"sentence1": "a", "gold_label": "neutral"}\n', "line 2: expected a JSON object with the string fields"),
    (snli_line("a", "b", "maybe"), "line 2: gold_label 'maybe' is not one of"),
])
def test_read_snli_errors(tmp_path, bad_line, message):
    path = write(tmp_path / "snli.jsonl", snli_line("a", "b", "neutral") + bad_line)
    with pytest.raises(ValueError, match=f"snli.jsonl, {message}"):
        read_snli(path)
    with pytest.raises(ValueError, match="no sentence pair"):
        read_snli(write(tmp_path / "empty.jsonl", snli_line("a", "b", "-")))
    with pytest.raises(FileNotFoundError, match="missing.jsonl"):
        read_snli(tmp_path / "missing.jsonl")


@pytest.fixture
def snli_dir():
    """SNLI 1.0 (dev and test) from ``../shared/datasets``; skips when absent."""
    if not (SNLI_DIR / "snli_1.0_dev.jsonl.gz").exists():
        pytest.skip(f"SNLI 1.0 not found at {SNLI_DIR}")
    return SNLI_DIR


def test_read_real_snli(snli_dir):
    dev, test = read_snli(snli_dir / "snli_1.0_dev.jsonl.gz"), read_snli(snli_dir / "snli_1.0_test.jsonl.gz")
    assert len(dev) == 9842 and len(test) == 9824  # the 158 and 176 pairs without a gold label dropped
    assert [sum(pair.label == index for pair in dev) for index in range(3)] == [3329, 3235, 3278]
    assert all(pair.premise and pair.hypothesis for pair in dev + test)


# --------------------------------------------------------------------------------------------------
# CoNLL-U
# --------------------------------------------------------------------------------------------------

CONLLU = """# newdoc id = doc1
# sent_id = s1
# text = Don't stop.
1-2\tDon't\t_\t_\t_\t_\t_\t_\t_\t_
1\tDo\tdo\tAUX\tVBP\t_\t3\taux\t3:aux\t_
2\tn't\tnot\tPART\tRB\t_\t3\tadvmod\t3:advmod\t_
3\tstop\tstop\tVERB\tVB\t_\t0\troot\t0:root\tSpaceAfter=No
4\t.\t.\tPUNCT\t.\t_\t3\tpunct\t3:punct\t_

# sent_id = s2
1\tCafé\tcafé\tNOUN\tNN\t_\t0\troot\t0:root\t_
1.1\tis\tbe\tAUX\tVBZ\t_\t_\t_\t1:cop\tCopyOf=-1
2\tcheap\tcheap\tADJ\tJJ\t_\t1\tamod\t1:amod\t_
"""


@pytest.mark.parametrize("name", ["en_ewt-ud-dev.conllu", "en_ewt-ud-dev.conllu.gz"])
def test_read_conllu(tmp_path, name):
    sentences = read_conllu(write(tmp_path / name, CONLLU))  # the last sentence lacks its blank line
    assert [sentence.words for sentence in sentences] == [["Do", "n't", "stop", "."], ["Café", "cheap"]]
    assert [sentence.tags for sentence in sentences] == [["AUX", "PART", "VERB", "PUNCT"], ["NOUN", "ADJ"]]
    assert all(tag in UPOS_TAGS for sentence in sentences for tag in sentence.tags)


@pytest.mark.parametrize("bad_line, message", [
    ("3\tgo\tgo\tVERB\tVB\t_\t0\troot", "line 16: expected 10 tab-separated columns, got 8"),
    ("x\tgo\tgo\tVERB\tVB\t_\t0\troot\t_\t_", "line 16: the ID 'x' is not an integer"),
    ("5\tgo\tgo\tVERB\tVB\t_\t0\troot\t_\t_", "line 16: word ID 5 where 1 was expected"),
    ("1\tgo\tgo\tVB\tVB\t_\t0\troot\t_\t_", "line 16: UPOS 'VB' is not one of the 17 universal tags"),
])
def test_read_conllu_errors(tmp_path, bad_line, message):
    path = write(tmp_path / "bad.conllu", CONLLU + "\n# sent_id = s3\n" + bad_line + "\n")
    with pytest.raises(ValueError, match=f"bad.conllu, {message}"):
        read_conllu(path)


def test_read_conllu_rejects_bad_files(tmp_path):
    path = tmp_path / "latin1.conllu"
    path.write_bytes("1\tCaf\xe9\n".encode("latin-1"))
    with pytest.raises(ValueError, match="latin1.conllu is not UTF-8"):
        read_conllu(path)
    (tmp_path / "plain.conllu.gz").write_text(CONLLU)
    with pytest.raises(ValueError, match="plain.conllu.gz ends in .gz but is not a gzip file"):
        read_conllu(tmp_path / "plain.conllu.gz")
    with pytest.raises(ValueError, match="holds no sentence"):
        read_conllu(write(tmp_path / "comments.conllu", "# only a comment\n\n"))


@pytest.fixture
def ewt_dir():
    """UD English EWT from ``../shared/datasets``; skips when absent."""
    if not (EWT_DIR / "en_ewt-ud-dev.conllu.gz").exists():
        pytest.skip(f"UD English EWT not found at {EWT_DIR}")
    return EWT_DIR


@pytest.mark.parametrize("split, num_sentences, num_words", [
    ("train", 12_544, 204_577), ("dev", 2_001, 25_147), ("test", 2_077, 25_094),
])
def test_read_real_ewt(ewt_dir, split, num_sentences, num_words):
    sentences = read_conllu(ewt_dir / f"en_ewt-ud-{split}.conllu.gz")
    assert len(sentences) == num_sentences  # the counts of the treebank's stats.xml
    # the syntactic words of stats.xml: multi-word tokens and empty nodes (37, 4, 2) are not among them
    assert sum(len(sentence.words) for sentence in sentences) == num_words
    assert all(len(sentence.words) == len(sentence.tags) > 0 for sentence in sentences)
    assert {tag for sentence in sentences for tag in sentence.tags} <= set(UPOS_TAGS)


# --------------------------------------------------------------------------------------------------
# SQuAD
# --------------------------------------------------------------------------------------------------


def squad_json(articles):
    return json.dumps({"data": articles, "version": "1.1"})


def article(title, context, questions):
    """An article with one paragraph; ``questions`` holds (id, question, [answer texts])."""
    return {"title": title, "paragraphs": [{"context": context, "qas": [
        {"id": question_id, "question": question,
         "answers": [{"text": text, "answer_start": context.index(text)} for text in answers]}
        for question_id, question, answers in questions]}]}


SMALL_SQUAD = [
    article("Super_Bowl_50", "The Denver Broncos won Super Bowl 50 in Santa Clara.",
            [("q1", "Who won?", ["Denver Broncos", "The Denver Broncos"]), ("q2", "Where?", ["Santa Clara"])]),
    article("Café", "A café sells coffee.", [("q3", "What does it sell?", ["coffee"])]),
]


@pytest.mark.parametrize("name", ["dev-v1.1.json", "dev-v1.1.json.gz"])
def test_read_squad(tmp_path, name):
    questions = read_squad(write(tmp_path / name, squad_json(SMALL_SQUAD)))
    assert [question.id for question in questions] == ["q1", "q2", "q3"]
    first = questions[0]
    assert first.title == "Super_Bowl_50" and first.question == "Who won?"
    assert first.context == "The Denver Broncos won Super Bowl 50 in Santa Clara."
    assert first.answers == [SquadAnswer("Denver Broncos", 4), SquadAnswer("The Denver Broncos", 0)]
    assert first.answers[0] == ("Denver Broncos", 4), "an answer is a (text, answer_start) pair"
    assert questions[2].title == "Café" and questions[2].answers == [("coffee", 13)]


def test_read_squad_errors(tmp_path):
    with pytest.raises(ValueError, match="bad.json: not JSON"):
        read_squad(write(tmp_path / "bad.json", '{"data": ['))
    with pytest.raises(ValueError, match='list.json: expected a JSON object with a "data"'):
        read_squad(write(tmp_path / "list.json", "[]"))
    shifted = json.loads(squad_json(SMALL_SQUAD))
    shifted["data"][0]["paragraphs"][0]["qas"][1]["answers"][0]["answer_start"] += 1
    with pytest.raises(ValueError, match="shifted.json: question q2: the answer 'Santa Clara' is not at character"):
        read_squad(write(tmp_path / "shifted.json", json.dumps(shifted)))
    no_context = json.loads(squad_json(SMALL_SQUAD))
    del no_context["data"][1]["paragraphs"][0]["context"]
    with pytest.raises(ValueError, match="layout.json: not the SQuAD layout"):
        read_squad(write(tmp_path / "layout.json", json.dumps(no_context)))
    no_answer = json.loads(squad_json(SMALL_SQUAD))
    no_answer["data"][1]["paragraphs"][0]["qas"][0]["answers"] = []
    with pytest.raises(ValueError, match="no_answer.json: question q3 has no answer"):
        read_squad(write(tmp_path / "no_answer.json", json.dumps(no_answer)))


def test_split_squad_by_article(tmp_path):
    articles = [article(f"Article_{i}", f"Text {i} of article {i}.", [(f"q{i}_{j}", "Which?", [f"{i}"])
                                                                       for j in range(i % 3 + 1)])
                for i in range(20)]
    questions = read_squad(write(tmp_path / "many.json", squad_json(articles)))
    train, dev, test = split_squad_by_article(questions, seed=0)
    titles = [{question.title for question in split} for split in (train, dev, test)]
    assert [len(split) for split in titles] == [16, 2, 2]
    assert not (titles[0] & titles[1] or titles[0] & titles[2] or titles[1] & titles[2])
    assert sorted(q.id for q in train + dev + test) == sorted(q.id for q in questions)
    assert [q.id for q in train] == [q.id for q in questions if q.title in titles[0]], "the order is kept"
    assert split_squad_by_article(questions, seed=0) == (train, dev, test)
    assert split_squad_by_article(questions, seed=1) != (train, dev, test)
    with pytest.raises(ValueError, match="summing to 1"):
        split_squad_by_article(questions, seed=0, fractions=(0.8, 0.1, 0.2))


@pytest.fixture
def squad_dir():
    """SQuAD v1.1 (dev) from ``../shared/datasets``; skips when absent."""
    if not (SQUAD_DIR / "dev-v1.1.json.gz").exists():
        pytest.skip(f"SQuAD v1.1 not found at {SQUAD_DIR}")
    return SQUAD_DIR


def test_read_real_squad(squad_dir):
    questions = read_squad(squad_dir / "dev-v1.1.json.gz")
    assert len(questions) == 10_570 and len({q.id for q in questions}) == 10_570
    assert sum(len(q.answers) for q in questions) == 34_726
    assert len({q.title for q in questions}) == 48 and len({q.context for q in questions}) == 2_067
    train, dev, test = split_squad_by_article(questions, seed=0)
    titles = [{q.title for q in split} for split in (train, dev, test)]
    assert [len(split) for split in titles] == [38, 5, 5]
    assert not (titles[0] & titles[1] or titles[0] & titles[2] or titles[1] & titles[2])
    assert len(train) + len(dev) + len(test) == 10_570
