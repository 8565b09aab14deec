"""Readers of the datasets of BERT's other task types, in the formats their authors publish.

- ``read_snli``: sentence pairs of the Stanford Natural Language Inference corpus 1.0 (Bowman et
  al., 2015), ``snli_1.0_*.jsonl`` (sentence-pair classification).
- ``read_conllu``: sentences of a Universal Dependencies treebank in CoNLL-U, such as the English
  Web Treebank (Silveira et al., 2014), with one part-of-speech tag per word (token tagging).
- ``read_squad``: the questions of the Stanford Question Answering Dataset v1.1 (Rajpurkar et al.,
  2016), ``train-v1.1.json`` or ``dev-v1.1.json`` (span extraction), and ``split_squad_by_article``
  to split them with no article in two splits.
- ``load_snli_splits``, ``load_ewt_splits``, ``load_squad_splits``: the train, dev and test splits of
  each task type's dataset, found in a data folder, as the course uses them (each task type's
  ``load_splits`` in ``bertlab.task_finetuning.TASKS``, ``bertlab finetune --task``).

Every reader also takes the file gzip-compressed (a name ending in ``.gz``), and raises
``ValueError`` naming the file (and the line, for line-based formats) when the content is not what
the format says. Nothing is downloaded: the files are the user's.
"""

import gzip
import json
import os
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from bertlab.data import DatasetSplits, data_root

# --------------------------------------------------------------------------------------------------
# Files
# --------------------------------------------------------------------------------------------------


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """The lines of a UTF-8 text file, plain or gzip-compressed (``.gz``), numbered from 1, without
    their line ends."""
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist")
    opener = gzip.open if path.name.endswith(".gz") else open
    try:
        with opener(path, "rt", encoding="utf-8", newline="") as file:
            for number, line in enumerate(file, start=1):
                yield number, line.rstrip("\r\n")
    except UnicodeDecodeError as error:
        raise ValueError(f"{path} is not UTF-8 text ({error.reason} at byte {error.start})") from None
    except gzip.BadGzipFile as error:
        raise ValueError(f"{path} ends in .gz but is not a gzip file ({error})") from None


# --------------------------------------------------------------------------------------------------
# SNLI: sentence pairs
# --------------------------------------------------------------------------------------------------

SNLI_LABELS = ("entailment", "neutral", "contradiction")  # label index 0, 1, 2


@dataclass
class SentencePair:
    """A premise, a hypothesis and the index in ``SNLI_LABELS`` of the relation between them."""

    premise: str
    hypothesis: str
    label: int


def read_snli(path: str | os.PathLike) -> list[SentencePair]:
    """The sentence pairs of an SNLI 1.0 file, ``snli_1.0_{train,dev,test}.jsonl`` (or ``.jsonl.gz``).

    Each line is a JSON object; its fields ``sentence1`` (the premise), ``sentence2`` (the
    hypothesis) and ``gold_label`` (the majority of the annotators' labels) are read, the others
    ignored. Pairs whose ``gold_label`` is "-" (no majority) are dropped, as Bowman et al. (2015)
    do for classification; the labels become indices into ``SNLI_LABELS``
    (entailment 0, neutral 1, contradiction 2). The pairs are returned in the file's order.

    Raises:
        ValueError: naming the file and the line, when a line is not a JSON object with those three
            fields as strings, or its gold label is another word.
    """
    path = Path(path)
    pairs = []
    for number, line in _lines(path):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise ValueError(f"{path}, line {number}: not a JSON object ({error.msg})") from None
        fields = ("sentence1", "sentence2", "gold_label")
        if not isinstance(record, dict) or not all(isinstance(record.get(field), str) for field in fields):
            raise ValueError(f"{path}, line {number}: expected a JSON object with the string fields {list(fields)}")
        label = record["gold_label"]
        if label == "-":
            continue
        if label not in SNLI_LABELS:
            raise ValueError(f"{path}, line {number}: gold_label {label!r} is not one of {[*SNLI_LABELS, '-']}")
        pairs.append(SentencePair(record["sentence1"], record["sentence2"], SNLI_LABELS.index(label)))
    if not pairs:
        raise ValueError(f"{path} holds no sentence pair with a gold label")
    return pairs


# --------------------------------------------------------------------------------------------------
# CoNLL-U: words with part-of-speech tags
# --------------------------------------------------------------------------------------------------

# The 17 universal part-of-speech tags of Universal Dependencies (version 2).
UPOS_TAGS = (
    "ADJ", "ADP", "ADV", "AUX", "CCONJ", "DET", "INTJ", "NOUN", "NUM", "PART", "PRON", "PROPN", "PUNCT",
    "SCONJ", "SYM", "VERB", "X",
)


@dataclass
class TaggedSentence:
    """The words of one sentence and the universal part-of-speech tag (UPOS) of each."""

    words: list[str]
    tags: list[str]


def read_conllu(path: str | os.PathLike) -> list[TaggedSentence]:
    """The sentences of a CoNLL-U file (``.conllu`` or ``.conllu.gz``) as words and UPOS tags.

    CoNLL-U (https://universaldependencies.org/format.html) gives one line per word with 10
    tab-separated columns, ``ID FORM LEMMA UPOS XPOS FEATS HEAD DEPREL DEPS MISC``; a blank line ends
    a sentence, and lines starting with "#" are comments. The words are the lines whose ID is an
    integer (1, 2, 3, ... within the sentence), with their FORM and UPOS columns. Multi-word token
    lines (an ID range such as ``3-4``: "don't" above its words "do" and "n't") and empty nodes (a
    decimal ID such as ``5.1``, of the enhanced graph) are skipped, as they carry no tag of their own.

    Raises:
        ValueError: naming the file and the line, when a line has not 10 columns, its ID is not an
            integer, a range or a decimal, the integer IDs of a sentence do not count 1, 2, 3, ...,
            or its UPOS is not one of ``UPOS_TAGS``.
    """
    path = Path(path)
    sentences, words, tags = [], [], []
    for number, line in _lines(path):
        if not line.strip():
            if words:
                sentences.append(TaggedSentence(words, tags))
            words, tags = [], []
            continue
        if line.startswith("#"):
            continue
        columns = line.split("\t")
        if len(columns) != 10:
            raise ValueError(f"{path}, line {number}: expected 10 tab-separated columns, got {len(columns)}")
        word_id, form, upos = columns[0], columns[1], columns[3]
        if _is_range(word_id) or _is_decimal(word_id):
            continue
        if not word_id.isdigit():
            raise ValueError(f"{path}, line {number}: the ID {word_id!r} is not an integer, a range (3-4) or a "
                             "decimal (5.1)")
        if int(word_id) != len(words) + 1:
            raise ValueError(f"{path}, line {number}: word ID {word_id} where {len(words) + 1} was expected "
                             "(the IDs of a sentence count 1, 2, 3, ...; is a blank line missing?)")
        if upos not in UPOS_TAGS:
            raise ValueError(f"{path}, line {number}: UPOS {upos!r} is not one of the 17 universal tags")
        words.append(form)
        tags.append(upos)
    if words:  # a last sentence without its blank line
        sentences.append(TaggedSentence(words, tags))
    if not sentences:
        raise ValueError(f"{path} holds no sentence")
    return sentences


def _is_range(word_id: str) -> bool:
    first, dash, last = word_id.partition("-")
    return bool(dash) and first.isdigit() and last.isdigit()


def _is_decimal(word_id: str) -> bool:
    whole, dot, fraction = word_id.partition(".")
    return bool(dot) and whole.isdigit() and fraction.isdigit()


# --------------------------------------------------------------------------------------------------
# SQuAD v1.1: questions about paragraphs
# --------------------------------------------------------------------------------------------------


class SquadAnswer(NamedTuple):
    """One annotator's answer: its text, and the character where it starts in the context."""

    text: str
    answer_start: int


@dataclass
class SquadQuestion:
    """One SQuAD question with its context paragraph, the title of its article and its answers."""

    id: str
    title: str
    context: str
    question: str
    answers: list[SquadAnswer]


def read_squad(path: str | os.PathLike) -> list[SquadQuestion]:
    """The questions of a SQuAD v1.1 file, ``train-v1.1.json`` or ``dev-v1.1.json`` (or ``.json.gz``).

    The file is one JSON object, ``{"data": [{"title", "paragraphs": [{"context", "qas": [{"id",
    "question", "answers": [{"text", "answer_start"}, ...]}, ...]}, ...]}, ...]}``. Each question
    becomes one record, in the file's order, with all its answers (the dev set has several per
    question, repeats kept); ``answer_start`` is a character index into the context, and
    ``context[answer_start : answer_start + len(text)] == text`` is checked for every answer.

    Raises:
        ValueError: naming the file (and the question id), when the file is not JSON of that layout,
            a question has no answer, or an answer is not at its ``answer_start``.
    """
    path = Path(path)
    text = "\n".join(line for _, line in _lines(path))
    try:
        articles = json.loads(text)["data"]
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}: not JSON ({error.msg} at line {error.lineno}, column {error.colno})") from None
    except (KeyError, TypeError):
        raise ValueError(f'{path}: expected a JSON object with a "data" list of articles') from None
    questions = []
    try:
        for article in articles:
            for paragraph in article["paragraphs"]:
                context = paragraph["context"]
                for qa in paragraph["qas"]:
                    answers = [SquadAnswer(answer["text"], int(answer["answer_start"])) for answer in qa["answers"]]
                    if not answers:
                        raise ValueError(f"{path}: question {qa['id']} has no answer")
                    for answer in answers:
                        if context[answer.answer_start : answer.answer_start + len(answer.text)] != answer.text:
                            raise ValueError(f"{path}: question {qa['id']}: the answer {answer.text!r} is not at "
                                             f"character {answer.answer_start} of its context")
                    questions.append(SquadQuestion(qa["id"], article["title"], context, qa["question"], answers))
    except (KeyError, TypeError) as error:
        raise ValueError(f"{path}: not the SQuAD layout (data / paragraphs / qas / answers): {error!r}") from None
    if not questions:
        raise ValueError(f"{path} holds no question")
    return questions


def squad_references(questions: Sequence[SquadQuestion]) -> dict[str, list[str]]:
    """Question id -> the texts of its answers, what :func:`~bertlab.tasks.squad_scores` grades against."""
    return {question.id: [answer.text for answer in question.answers] for question in questions}


def split_squad_by_article(
    records: Sequence[SquadQuestion], seed: int, fractions: tuple[float, float, float] = (0.8, 0.1, 0.1)
) -> tuple[list[SquadQuestion], list[SquadQuestion], list[SquadQuestion]]:
    """Split SQuAD questions into ``(train, dev, test)`` by article, so no article is in two splits.

    Questions about the same article share its paragraphs, so splitting questions at random would
    put the same text in training and evaluation. Instead the A distinct titles are sorted,
    shuffled with ``random.Random(seed)``, and the first round(A * f_train) go to train, the next
    round(A * f_dev) to dev and the rest to test; each question follows its article and keeps its
    order in ``records``. The fractions count articles, not questions.

    Raises:
        ValueError: when the fractions are not three non-negative numbers that sum to 1.
    """
    if len(fractions) != 3 or any(fraction < 0 for fraction in fractions) or abs(sum(fractions) - 1) > 1e-9:
        raise ValueError(f"fractions must be three non-negative numbers (train, dev, test) summing to 1, "
                         f"got {fractions}")
    titles = sorted({record.title for record in records})
    random.Random(seed).shuffle(titles)
    num_train, num_dev = round(len(titles) * fractions[0]), round(len(titles) * fractions[1])
    split_of = {title: 0 for title in titles[:num_train]}
    split_of.update({title: 1 for title in titles[num_train : num_train + num_dev]})
    split_of.update({title: 2 for title in titles[num_train + num_dev :]})
    splits = ([], [], [])
    for record in records:
        splits[split_of[record.title]].append(record)
    return splits


# --------------------------------------------------------------------------------------------------
# The splits of each task type
# --------------------------------------------------------------------------------------------------


class TaskSplits(DatasetSplits):
    """The splits of a task type's dataset (SNLI, UD English EWT, SQuAD): its pairs, tagged sentences or
    questions; ``source`` names the files read."""


def find_dataset_file(root: Path, folder: str, name: str, title: str) -> Path:
    """``root/folder/name``, else ``root/name``, each plain or gzip-compressed (``name.gz``).

    Raises:
        FileNotFoundError: naming the data folder, the dataset and the file expected.
    """
    for candidate in (root / folder / name, root / folder / f"{name}.gz", root / name, root / f"{name}.gz"):
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(f"{title} was not found in the data folder {root}: expected {name} (or {name}.gz) "
                            f"in {root / folder} (or in {root} itself)")


def split_pairs_by_premise(
    pairs: Sequence[SentencePair], seed: int, dev_fraction: float = 0.1
) -> tuple[list[SentencePair], list[SentencePair]]:
    """Split sentence pairs into ``(train, dev)`` so that no premise is in both.

    SNLI gives each premise (an image caption) several hypotheses, so a split of pairs at random
    would show a dev premise in training. Instead the P distinct premises are sorted, shuffled with
    ``random.Random(seed)``, and the pairs of the first round(P * dev_fraction) go to dev, the others
    to train; each pair keeps its order in ``pairs``.
    """
    if not 0 < dev_fraction < 1:
        raise ValueError(f"dev_fraction must be in (0, 1), got {dev_fraction}")
    premises = sorted({pair.premise for pair in pairs})
    random.Random(seed).shuffle(premises)
    dev_premises = set(premises[: round(len(premises) * dev_fraction)])
    return ([pair for pair in pairs if pair.premise not in dev_premises],
            [pair for pair in pairs if pair.premise in dev_premises])


def load_snli_splits(root: str | os.PathLike | None = None, seed: int = 0) -> TaskSplits:
    """SNLI from ``root/snli_1.0/``: train and dev carved from the official dev split by premise
    (:func:`split_pairs_by_premise`, 90% and 10% of the premises), test = the official test split.
    The official training split is not used: the course's copy of SNLI lacks it."""
    root = data_root(root)
    title = "SNLI 1.0"
    official_dev = find_dataset_file(root, "snli_1.0", "snli_1.0_dev.jsonl", title)
    official_test = find_dataset_file(root, "snli_1.0", "snli_1.0_test.jsonl", title)
    train, dev = split_pairs_by_premise(read_snli(official_dev), seed)
    source = (f"{official_dev} split by premise with seed {seed} (train 90%, dev 10% of the premises); "
              f"test {official_test}")
    return TaskSplits("snli", train, dev, read_snli(official_test), source)


def load_ewt_splits(root: str | os.PathLike | None = None, seed: int = 0) -> TaskSplits:
    """The English Web Treebank from ``root/UD_English-EWT/``: its own train, dev and test files
    (``seed`` is not used: the splits are the treebank's)."""
    root = data_root(root)
    title = "UD English EWT"
    paths = [find_dataset_file(root, "UD_English-EWT", f"en_ewt-ud-{split}.conllu", title)
             for split in ("train", "dev", "test")]
    train, dev, test = (read_conllu(path) for path in paths)
    return TaskSplits("ud-english-ewt", train, dev, test, ", ".join(map(str, paths)))


def load_squad_splits(root: str | os.PathLike | None = None, seed: int = 0) -> TaskSplits:
    """SQuAD v1.1 from ``root/squad-v1.1/``: the 48 articles of the official dev set split into train,
    dev and test by article (:func:`split_squad_by_article`, 80/10/10% of the articles). The official
    training set is not used: the course's copy of SQuAD lacks it."""
    root = data_root(root)
    path = find_dataset_file(root, "squad-v1.1", "dev-v1.1.json", "SQuAD v1.1")
    train, dev, test = split_squad_by_article(read_squad(path), seed)
    return TaskSplits("squad-v1.1", train, dev, test,
                      f"{path} split by article with seed {seed} (80/10/10% of the articles)")
