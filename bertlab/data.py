"""Text for the course: an offline pretraining corpus and sentiment datasets.

- ``pretraining_corpus``: documents (lists of sentences) for masked language modelling and next
  sentence prediction. The default is the English reference text that ships with every Python, in
  the standard library's ``pydoc_data.topics`` (the Python Language Reference; PSF license), with
  code, tables and headings removed. Its exact content follows the Python version.
- ``imdb_documents``: the reviews of the Large Movie Review Dataset (Maas et al., 2011) as documents,
  read from the authors' folder layout; its unlabelled and training reviews are the pretraining text
  of the course's BERT, its test reviews held-out text.
- ``load_sentiment``: the sentence polarity dataset v1.0 ("MR"; Pang and Lee, 2005), SST-2 (GLUE;
  Socher et al., 2013; Wang et al., 2019) and IMDB (Maas et al., 2011), read in the formats their
  authors publish, from a data folder: the ``root`` argument, else ``$BERTLAB_DATA``, else
  ``~/.cache/bertlab``. With ``download=True`` they are fetched from the authors' URLs and checked
  against a SHA-256 checksum.
- ``synthetic_sentiment``: a small, synthetic set of movie-review-like sentences generated from a
  grammar, so that everything runs with no data at all. ``find_sentiment_dataset`` returns the
  first real dataset that is present, else this one.

Labels: 1 = positive, 0 = negative. Every split is deterministic given its seed.
"""

import hashlib
import os
import random
import re
import tarfile
import tempfile
import urllib.error
import urllib.request
import zipfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from pydoc_data.topics import topics
from tqdm.auto import tqdm

Example = tuple[str, int]  # (text, label), label 1 = positive, 0 = negative

# --------------------------------------------------------------------------------------------------
# Sentences and documents
# --------------------------------------------------------------------------------------------------

# A sentence ends at ".", "!" or "?" (and any closing quotes or brackets) followed by whitespace and
# a capital letter, a digit or an opening quote or bracket.
_SENTENCE_BOUNDARY = re.compile(r"""(?<=[.!?])["'”’)\]]*\s+(?=["'“‘(\[]?[A-Z0-9])""")
_ABBREVIATIONS = ("e.g.", "i.e.", "etc.", "vs.", "cf.", "Mr.", "Mrs.", "Ms.", "Dr.", "Prof.", "St.", "No.", "Fig.")
_INITIAL = re.compile(r"(?:^|\s)[A-Z]\.$")  # "J." in "J. R. R. Tolkien"


def split_sentences(text: str) -> list[str]:
    """Split ``text`` into sentences, with runs of whitespace (line breaks too) made single spaces.

    A sentence ends at ".", "!" or "?" (with any closing quotes or brackets) followed by a space and
    a capital letter, a digit or an opening quote, except after common abbreviations ("e.g.", "Dr.")
    and initials ("J."). Lower-cased text is therefore not split.
    """
    text = " ".join(text.split())
    sentences, start = [], 0
    for boundary in _SENTENCE_BOUNDARY.finditer(text):
        candidate = text[start : boundary.start()]
        if candidate.endswith(_ABBREVIATIONS) or _INITIAL.search(candidate):
            continue
        sentences.append(candidate)
        start = boundary.end()
    if text[start:]:
        sentences.append(text[start:])
    return sentences


# The pydoc topics are reStructuredText rendered as plain text: headings underlined with a repeated
# character, tables drawn with "+" and "|", code and grammar rules in indented blocks.
_HEADING_UNDERLINE = re.compile(r'^\s*([*=\-~^"#+])\1{2,}\s*$')
_TABLE_LINE = re.compile(r"^\s*[|+]")
_QUOTED = re.compile(r'"[^"]*"|“[^”]*”')  # inline code in running text, e.g. "__init__()"
# Grammar rules, interpreter prompts, comments, assignments, comparisons, calls, braces, "label:" lines.
_CODE_LINE = re.compile(r"::=|>>>|^\s*\.\.\.|\s#|(?<!\S)=(?!\S)|==|\w\(|[{}]|^\s*[a-z_]\w*:\s*$")
_FOOTNOTE = re.compile(r"\s*\[\d+\]")
_EMPHASIS = re.compile(r"\*{1,2}([^*\s](?:[^*]*[^*\s])?)\*{1,2}")
_BULLET = re.compile(r"^\s*(?:[*\-•]|\d+\.|\(\d+\))\s+")


def _looks_like_sentence(sentence: str) -> bool:
    """At least 3 words, a capital (or quote) first, end punctuation last, and mostly letters."""
    letters = sum(char.isalpha() or char.isspace() for char in sentence)
    return (
        len(sentence.split()) >= 3
        and (sentence[0].isupper() or sentence[0] in "\"“")
        and sentence.rstrip("\"”')").endswith((".", "!", "?", ":"))
        and letters >= 0.75 * len(sentence)
    )


def _reference_documents(topic: str) -> list[list[str]]:
    """The prose of one pydoc topic, one document per section, as lists of sentences."""
    documents, current = [], []
    for paragraph in re.split(r"\n\s*\n", topic):
        lines = [line for line in paragraph.split("\n") if line.strip()]
        if any(_HEADING_UNDERLINE.match(line) for line in lines):  # a heading starts a new section
            if current:
                documents.append(current)
            current = []
            continue
        if any(_TABLE_LINE.match(line) or _CODE_LINE.search(_QUOTED.sub('""', line)) for line in lines):
            continue
        prose = " ".join(_BULLET.sub("", line).strip() for line in lines)
        prose = _EMPHASIS.sub(r"\1", _FOOTNOTE.sub("", prose))
        current.extend(sentence for sentence in split_sentences(prose) if _looks_like_sentence(sentence))
    if current:
        documents.append(current)
    return documents


def _text_file_documents(path: Path) -> list[list[str]]:
    """Documents of a user text file: blank lines separate documents (none: the file is one)."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(f"{path} is not UTF-8 text ({error.reason} at byte {error.start})") from None
    blocks = re.split(r"\n\s*\n", text)
    return [sentences for block in blocks if (sentences := split_sentences(block))]


def _text_files(paths: str | os.PathLike | Iterable[str | os.PathLike]) -> list[Path]:
    """The files named by ``paths``: files as given, folders as their ``*.txt`` files, sorted."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    files = []
    for path in map(Path, paths):
        if path.is_dir():
            found = sorted(file for file in path.rglob("*.txt") if file.is_file())
            if not found:
                raise FileNotFoundError(f"the folder {path} holds no .txt files")
            files += found
        elif path.is_file():
            files.append(path)
        else:
            raise FileNotFoundError(f"{path} does not exist")
    return files


PRETRAINING_CORPORA = ("pydoc", "imdb")


def pretraining_corpus(
    extra_paths: str | os.PathLike | Iterable[str | os.PathLike] | None = None,
    *,
    corpus: str = "pydoc",
    root: str | os.PathLike | None = None,
) -> list[list[str]]:
    """Documents for pretraining, each a list of sentences, in a fixed order.

    ``corpus="pydoc"`` (the default) is the English prose of ``pydoc_data.topics`` (the Python
    Language Reference as the ``help()`` system shows it; PSF license), which every Python
    installation has: on Python 3.11 about 200 documents (one per section) and 3,000 sentences, once
    code, grammar rules, tables and headings are dropped. ``corpus="imdb"`` is the 75,000 unlabelled
    and training reviews of the IMDB archive in the data folder ``root`` (``imdb_documents``), the
    pretraining text of the course's BERT. ``extra_paths`` adds the documents of user text files
    (UTF-8): a file, or a folder whose ``*.txt`` files are read in sorted order. In a file, blank
    lines separate documents; a file without blank lines is one document. Sentences are found by
    ``split_sentences``.
    """
    if corpus not in PRETRAINING_CORPORA:
        raise ValueError(f"unknown pretraining corpus {corpus!r}; choose one of {list(PRETRAINING_CORPORA)}")
    if corpus == "imdb":
        documents = imdb_documents(root)
    else:
        documents = [document for name in sorted(topics) for document in _reference_documents(topics[name])]
    if extra_paths is not None:
        documents += [document for path in _text_files(extra_paths) for document in _text_file_documents(path)]
    return documents


# The folders of the IMDB archive (aclImdb/) whose reviews the course's BERT is pretrained on; the
# test reviews (test/pos, test/neg) stay held out.
IMDB_PRETRAINING_FOLDERS = ("train/unsup", "train/pos", "train/neg")
IMDB_HELD_OUT_FOLDERS = ("test/pos", "test/neg")


def read_imdb_review(path: Path) -> str:
    """One review file of the IMDB archive as plain text: its HTML line breaks (``<br />``) become
    spaces and runs of whitespace single spaces."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(f"{path} is not UTF-8 text ({error.reason} at byte {error.start})") from None
    return " ".join(text.replace("<br />", " ").split())


def imdb_documents(
    root: str | os.PathLike | None = None,
    folders: Sequence[str] = IMDB_PRETRAINING_FOLDERS,
    max_reviews_per_folder: int | None = None,
) -> list[list[str]]:
    """Reviews of the Large Movie Review Dataset (Maas et al., 2011) as documents: one review, one
    document, a list of sentences (``split_sentences``).

    The reviews are read from the authors' layout, ``aclImdb/<folder>/<id>_<rating>.txt``, one review
    per UTF-8 file, in the order of ``folders`` and, within a folder, of the review id. The default
    folders are the 50,000 unlabelled reviews (``train/unsup``) and the 25,000 training reviews
    (``train/pos``, ``train/neg``): the pretraining text of the course's BERT, about 20M WordPiece
    tokens. ``IMDB_HELD_OUT_FOLDERS`` (``test/pos``, ``test/neg``) are reviews of other movies,
    held out for evaluation.

    Args:
        root: the data folder holding ``aclImdb/`` (or the ``aclImdb`` folder itself); default
            ``$BERTLAB_DATA``, else ``~/.cache/bertlab``.
        folders: sub-folders of ``aclImdb/`` to read.
        max_reviews_per_folder: read only the first reviews (by id) of each folder; None for all.

    Raises:
        FileNotFoundError: a folder is missing; the message says where the archive goes.
    """
    root = data_root(root)
    base = next((root / name for name in ("aclImdb", ".") if all((root / name / f).is_dir() for f in folders)), None)
    if base is None:
        missing = [folder for folder in folders if not (root / "aclImdb" / folder).is_dir()]
        raise FileNotFoundError(
            f"the IMDB reviews were not found: {root / 'aclImdb'} lacks {', '.join(missing)}. Extract the authors' "
            f"archive ({SENTIMENT_SOURCES['imdb'].url}) into {root}, or pass the folder that holds aclImdb/ "
            "(the data folder is the root argument, else $BERTLAB_DATA, else ~/.cache/bertlab)."
        )
    documents = []
    for folder in folders:
        paths = sorted((base / folder).glob("*.txt"), key=_review_order)[:max_reviews_per_folder]
        documents += [sentences for path in paths if (sentences := split_sentences(read_imdb_review(path)))]
    return documents


def _review_order(path: Path) -> tuple[int, str]:
    """Review files ``<id>_<rating>.txt`` sort by their numeric id (other names last, by name)."""
    identifier = path.stem.partition("_")[0]
    return (int(identifier), "") if identifier.isdigit() else (1 << 62, path.name)


# --------------------------------------------------------------------------------------------------
# Splits
# --------------------------------------------------------------------------------------------------


@dataclass
class DatasetSplits:
    """A dataset in train, dev and test splits of examples; ``name`` is the dataset, ``source`` says where
    the data came from (the files read, or that it was generated). Shown with the splits' sizes."""

    name: str
    train: list
    dev: list
    test: list
    source: str

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(name={self.name!r}, train={len(self.train)}, dev={len(self.dev)}, "
                f"test={len(self.test)}, source={self.source!r})")


class SentimentSplits(DatasetSplits):
    """A sentiment dataset ("mr", "sst2", "imdb" or "synthetic") in splits of ``(text, label)`` pairs."""


def split_examples(
    examples: Sequence[Example], seed: int = 0, dev_fraction: float = 0.1, test_fraction: float = 0.1
) -> tuple[list[Example], list[Example], list[Example]]:
    """Split ``examples`` into ``(train, dev, test)``, stratified by label and deterministic.

    Each label's examples are shuffled with ``random.Random(seed)``; round(n * test_fraction) of
    them go to test, round(n * dev_fraction) to dev, and the rest to train, so every split keeps the
    label proportions. Each split is then shuffled. The splits are disjoint: every example lands in
    exactly one. The same examples in the same order and the same seed give the same splits.
    """
    if not (0 <= dev_fraction < 1 and 0 <= test_fraction < 1 and dev_fraction + test_fraction < 1):
        raise ValueError(
            f"dev_fraction and test_fraction must be in [0, 1) with a sum below 1, "
            f"got {dev_fraction} and {test_fraction}"
        )
    rng = random.Random(seed)
    by_label: dict[int, list[Example]] = {}
    for example in examples:
        by_label.setdefault(example[1], []).append(example)
    train, dev, test = [], [], []
    for label in sorted(by_label):
        group = by_label[label]
        rng.shuffle(group)
        num_test, num_dev = round(len(group) * test_fraction), round(len(group) * dev_fraction)
        test += group[:num_test]
        dev += group[num_test : num_test + num_dev]
        train += group[num_test + num_dev :]
    for split in (train, dev, test):
        rng.shuffle(split)
    return train, dev, test


# --------------------------------------------------------------------------------------------------
# The synthetic sentiment set
# --------------------------------------------------------------------------------------------------

SUBJECTS = (
    "the movie", "the film", "this picture", "the plot", "the story", "the acting", "the cast",
    "the script", "the dialogue", "the ending", "the soundtrack", "the direction", "the pacing",
    "the cinematography", "the lead performance", "the humor",
)
VERBS = ("is", "was", "feels", "felt", "seems", "seemed")
NEGATED_VERBS = ("is not", "was not", "isn't", "wasn't", "never feels", "never seemed")
INTENSIFIERS = ("very", "really", "truly", "incredibly", "remarkably")
POSITIVE_WORDS = (
    "good", "great", "wonderful", "brilliant", "moving", "funny", "charming", "gripping",
    "beautiful", "clever", "delightful", "superb",
)
NEGATIVE_WORDS = (
    "bad", "terrible", "awful", "boring", "dull", "clumsy", "tedious", "predictable", "bland",
    "forgettable", "painful", "messy",
)
OPENINGS = ("", "honestly , ", "overall , ", "frankly , ", "in the end , ", "to be fair , ")


def _clause(rng: random.Random, positive: bool) -> str:
    """A clause of the given polarity: plain or intensified (2/3), or a negated opposite (1/3)."""
    subject = rng.choice(SUBJECTS)
    if rng.random() < 1 / 3:
        return f"{subject} {rng.choice(NEGATED_VERBS)} {rng.choice(NEGATIVE_WORDS if positive else POSITIVE_WORDS)}"
    intensifier = rng.choice(INTENSIFIERS) + " " if rng.random() < 0.5 else ""
    return f"{subject} {rng.choice(VERBS)} {intensifier}{rng.choice(POSITIVE_WORDS if positive else NEGATIVE_WORDS)}"


def synthetic_sentiment(num_examples: int = 2000, seed: int = 0) -> list[Example]:
    """A SYNTHETIC sentiment dataset: generated sentences, not real reviews.

    Distinct, lower-cased, MR-style (spaces around punctuation) sentences from this grammar, where
    ``clause[p]`` has polarity p (1 positive, 0 negative):

        review     := opening clause[p] " ."                         label p   (half of them)
                    | opening clause[1-p] " , but " clause[p] " ."   label p   (contrast: the
                                                                               clause after "but"
                                                                               decides)
        clause[p]  := subject verb [intensifier] word[p]                       (2/3)
                    | subject negated-verb word[1-p]                           (1/3; negation flips:
                                                                               "not bad" is positive)
        opening    := "" | "honestly , " | "overall , " | ...
        intensifier:= "very" | "really" | "truly" | ...  (no effect on polarity)

    with the word lists ``SUBJECTS``, ``VERBS``, ``NEGATED_VERBS``, ``INTENSIFIERS``,
    ``POSITIVE_WORDS`` and ``NEGATIVE_WORDS`` of this module. Labels are balanced (num_examples // 2
    positive) and shuffled; the same seed gives the same list.

    Returns:
        A list of ``(text, label)`` pairs, e.g. ("the plot was not good , but the cast is very
        funny .", 1).
    """
    if num_examples < 2:
        raise ValueError(f"num_examples must be at least 2, got {num_examples}")
    rng = random.Random(seed)
    labels = [1] * (num_examples // 2) + [0] * (num_examples - num_examples // 2)
    rng.shuffle(labels)
    seen, examples = set(), []
    for label in labels:
        for _ in range(100):
            opening, positive = rng.choice(OPENINGS), bool(label)
            if rng.random() < 0.5:
                text = f"{opening}{_clause(rng, positive)} ."
            else:
                text = f"{opening}{_clause(rng, not positive)} , but {_clause(rng, positive)} ."
            if text not in seen:
                break
        else:
            raise ValueError(f"the grammar cannot produce {num_examples} distinct sentences")
        seen.add(text)
        examples.append((text, label))
    return examples


# --------------------------------------------------------------------------------------------------
# Downloads
# --------------------------------------------------------------------------------------------------


def data_root(root: str | os.PathLike | None = None) -> Path:
    """The data folder: ``root`` if given, else ``$BERTLAB_DATA``, else ``~/.cache/bertlab``."""
    if root is None:
        root = os.environ.get("BERTLAB_DATA") or Path.home() / ".cache" / "bertlab"
    return Path(root).expanduser()


def download_and_extract(url: str, sha256: str, folder: str | os.PathLike) -> Path:
    """Download the zip or tar archive at ``url``, check its SHA-256, and extract it into ``folder``.

    The archive is streamed to a temporary file in ``folder`` and deleted afterwards. Nothing is
    extracted unless its SHA-256 digest equals ``sha256`` (ValueError otherwise), and nothing at
    all if any member would land outside ``folder`` (an absolute path or "..") or is a link or a
    device (ValueError). Returns ``folder``.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=folder, prefix=".download-", suffix=".part")
    archive = Path(temporary)
    try:
        digest = hashlib.sha256()
        with os.fdopen(handle, "wb") as file:
            for chunk in _stream(url):
                digest.update(chunk)
                file.write(chunk)
        if digest.hexdigest() != sha256.lower():
            raise ValueError(
                f"checksum mismatch for {url}: expected SHA-256 {sha256}, got {digest.hexdigest()}; "
                "the download is corrupt or the file has changed, so it was deleted"
            )
        _extract(archive, folder, url)
    finally:
        archive.unlink(missing_ok=True)
    return folder


def _stream(url: str, chunk_size: int = 1 << 20) -> Iterable[bytes]:
    try:
        with urllib.request.urlopen(url, timeout=60) as response:
            size = int(response.headers.get("Content-Length") or 0) or None
            with tqdm(total=size, unit="B", unit_scale=True, desc=url.rsplit("/", 1)[-1], disable=None) as bar:
                while chunk := response.read(chunk_size):
                    bar.update(len(chunk))
                    yield chunk
    except urllib.error.URLError as error:
        raise ConnectionError(f"could not download {url}: {error.reason}") from error


def _extract(archive: Path, folder: Path, url: str) -> None:
    """Extract a zip or tar archive into ``folder`` after checking every member is safe."""
    if zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as zipped:
            for name in zipped.namelist():
                _check_inside(folder, name, url)
            zipped.extractall(folder)
    elif tarfile.is_tarfile(archive):
        with tarfile.open(archive) as tarred:
            members = tarred.getmembers()
            for member in members:
                _check_inside(folder, member.name, url)
                if not (member.isfile() or member.isdir()):
                    raise ValueError(f"{url} contains {member.name!r}, which is not a file or folder: not extracting")
            # The "data" filter also drops permission bits such as set-uid; Pythons before 3.11.4 (Debian
            # 12's) lack it, where the checks above refuse what matters: paths outside, links, devices.
            safer = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
            tarred.extractall(folder, members=members, **safer)
    else:
        raise ValueError(f"{url} is neither a zip nor a tar archive")


def _check_inside(folder: Path, name: str, url: str) -> None:
    if not (folder / name).resolve().is_relative_to(folder.resolve()):
        raise ValueError(f"{url} contains {name!r}, which would land outside {folder}: not extracting")


# --------------------------------------------------------------------------------------------------
# Sentiment datasets in their published formats
# --------------------------------------------------------------------------------------------------


def _read_windows_1252_lines(path: Path) -> list[str]:
    """Non-empty lines of a file of Windows-1252 bytes (a superset of Latin-1), stripped.

    Lines are split on b"\\n" only: MR has lines holding byte 0x85, which Windows-1252 reads as
    "…" but Latin-1 as U+0085 (NEL), a line break for ``str.splitlines()``. A line with a byte that
    Windows-1252 leaves undefined is read as Latin-1.
    """
    lines = []
    for raw in path.read_bytes().split(b"\n"):
        try:
            line = raw.decode("cp1252")
        except UnicodeDecodeError:
            line = raw.decode("latin-1")
        if line.strip():
            lines.append(line.strip())
    return lines


def _load_mr(folder: Path, seed: int) -> SentimentSplits:
    """MR: 5,331 positive and 5,331 negative snippets, split 80/10/10 (no official split exists)."""
    examples = [(text, 1) for text in _read_windows_1252_lines(folder / "rt-polarity.pos")]
    examples += [(text, 0) for text in _read_windows_1252_lines(folder / "rt-polarity.neg")]
    train, dev, test = split_examples(examples, seed=seed)
    source = f"sentence polarity dataset v1.0 (MR; Pang and Lee, 2005), read from {folder}"
    return SentimentSplits(name="mr", train=train, dev=dev, test=test, source=source)


def _read_glue_tsv(path: Path) -> list[Example]:
    lines = path.read_text(encoding="utf-8").splitlines()
    header = lines[0].split("\t") if lines else []
    if "sentence" not in header or "label" not in header:
        raise ValueError(f"{path} should start with the header 'sentence<TAB>label', got {lines[:1]}")
    sentence_column, label_column = header.index("sentence"), header.index("label")
    examples = []
    for number, line in enumerate(lines[1:], start=2):
        fields = line.split("\t")
        if len(fields) != len(header) or fields[label_column] not in ("0", "1"):
            raise ValueError(f"{path}, line {number}: expected {len(header)} tab-separated fields with label 0 or 1")
        examples.append((fields[sentence_column].strip(), int(fields[label_column])))
    if not examples:
        raise ValueError(f"{path} holds no examples")
    return examples


def _load_sst2(folder: Path, seed: int) -> SentimentSplits:
    """SST-2: GLUE's test set has no labels, so GLUE's dev set (872 sentences) is the test set, the
    one papers report, and a stratified sample of train of the same size is the dev set."""
    train, test = _read_glue_tsv(folder / "train.tsv"), _read_glue_tsv(folder / "dev.tsv")
    train, dev, _ = split_examples(train, seed=seed, dev_fraction=len(test) / len(train), test_fraction=0.0)
    source = f"SST-2 (GLUE; Socher et al., 2013), read from {folder}; test = GLUE dev, dev = part of GLUE train"
    return SentimentSplits(name="sst2", train=train, dev=dev, test=test, source=source)


def _read_imdb_split(folder: Path) -> list[Example]:
    examples = []
    for label, polarity in ((1, "pos"), (0, "neg")):
        for path in sorted((folder / polarity).glob("*.txt")):
            examples.append((read_imdb_review(path), label))
    return examples


def _load_imdb(folder: Path, seed: int) -> SentimentSplits:
    """IMDB: the official 25,000-review test set; dev is a stratified 10% of the official train."""
    train, test = _read_imdb_split(folder / "train"), _read_imdb_split(folder / "test")
    train, dev, _ = split_examples(train, seed=seed, dev_fraction=0.1, test_fraction=0.0)
    random.Random(seed).shuffle(test)
    source = f"Large Movie Review Dataset v1.0 (IMDB; Maas et al., 2011), read from {folder}; HTML line breaks removed"
    return SentimentSplits(name="imdb", train=train, dev=dev, test=test, source=source)


@dataclass(frozen=True)
class DatasetSource:
    """Where a dataset's files live and where its archive comes from.

    ``folders``: the folders under the data root that may hold the files ("." is the root itself),
    tried in order. ``files``: the files (or folders) that must be there. ``url`` and ``sha256``:
    the authors' archive and its checksum. ``load(folder, seed)`` reads the files into splits.
    """

    title: str
    folders: tuple[str, ...]
    files: tuple[str, ...]
    url: str
    sha256: str
    load: Callable[[Path, int], SentimentSplits]


# The SHA-256 digests could not be checked here (no internet). Those of SST-2 and IMDB are the ones
# Hugging Face datasets and TensorFlow Datasets record for these URLs. That of MR is the one Hugging
# Face records for its mirror of the same archive (storage.googleapis.com/seldon-datasets/
# sentence_polarity_v1/rt-polaritydata.tar.gz, 487,770 bytes); if the authors' file differs, the
# download fails with a checksum error and the files can be put in place by hand.
SENTIMENT_SOURCES = {
    "mr": DatasetSource(
        title="MR (sentence polarity dataset v1.0)",
        folders=("rt-polarity", "rt-polaritydata", "."),
        files=("rt-polarity.pos", "rt-polarity.neg"),
        url="https://www.cs.cornell.edu/people/pabo/movie-review-data/rt-polaritydata.tar.gz",
        sha256="a05befe52aafda71d458d188a1c54506a998b1308613ba76bbda2e5029409ce9",
        load=_load_mr,
    ),
    "sst2": DatasetSource(
        title="SST-2 (GLUE)",
        folders=("SST-2", "."),
        files=("train.tsv", "dev.tsv"),
        url="https://dl.fbaipublicfiles.com/glue/data/SST-2.zip",
        sha256="d67e16fb55739c1b32cdce9877596db1c127dc322d93c082281f64057c16deaa",
        load=_load_sst2,
    ),
    "imdb": DatasetSource(
        title="IMDB (Large Movie Review Dataset v1.0)",
        folders=("aclImdb", "."),
        files=("train/pos", "train/neg", "test/pos", "test/neg"),
        url="https://ai.stanford.edu/~amaas/data/sentiment/aclImdb_v1.tar.gz",
        sha256="c40f74a18d3b61f90feba1e17730e0d38e8b97c05fde7008942e91923d1658fe",
        load=_load_imdb,
    ),
}
SENTIMENT_DATASETS = (*SENTIMENT_SOURCES, "synthetic")


def _find_folder(root: Path, source: DatasetSource) -> Path | None:
    for name in source.folders:
        folder = root / name
        if all((folder / file).exists() for file in source.files):
            return folder
    return None


def _missing_message(name: str, root: Path, source: DatasetSource) -> str:
    files = " and ".join(source.files)
    return (
        f"{source.title} was not found in the data folder {root}. Put {files} in {root / source.folders[0]} "
        f"(or directly in {root}), for example by extracting {source.url} into {root}; "
        f"or call load_sentiment({name!r}, download=True) to download and extract it there. "
        "The data folder is the root argument, else $BERTLAB_DATA, else ~/.cache/bertlab."
    )


def load_sentiment(
    name: str, root: str | os.PathLike | None = None, download: bool = False, seed: int = 0
) -> SentimentSplits:
    """Load a sentiment dataset as train, dev and test splits of ``(text, label)`` pairs.

    Args:
        name: "mr" (10,662 snippets, split 80/10/10 by ``split_examples``), "sst2" (test = GLUE's
            labelled dev set, dev = a same-size stratified sample of GLUE's train), "imdb" (the
            official test set; dev = 10% of the official train) or "synthetic" (the SYNTHETIC
            ``synthetic_sentiment()`` sentences, split 80/10/10).
        root: the data folder; default ``$BERTLAB_DATA``, else ``~/.cache/bertlab``. MR may sit in
            ``root/rt-polarity/``, ``root/rt-polaritydata/`` (the authors' archive) or ``root``;
            SST-2 in ``root/SST-2/`` or ``root``; IMDB in ``root/aclImdb/`` or ``root``.
        download: fetch and extract the authors' archive into ``root`` when the files are missing.
        seed: the seed of the splits.

    Raises:
        FileNotFoundError: the files are missing and ``download`` is False; the message says which
            files to put where.
    """
    key = name.lower()
    if key == "synthetic":
        train, dev, test = split_examples(synthetic_sentiment(), seed=seed)
        source = "synthetic: generated by bertlab.data.synthetic_sentiment from a small grammar, not real reviews"
        return SentimentSplits(name="synthetic", train=train, dev=dev, test=test, source=source)
    if key not in SENTIMENT_SOURCES:
        raise ValueError(f"unknown sentiment dataset {name!r}; choose one of {list(SENTIMENT_DATASETS)}")
    source, root = SENTIMENT_SOURCES[key], data_root(root)
    folder = _find_folder(root, source)
    if folder is None and download:
        download_and_extract(source.url, source.sha256, root)
        folder = _find_folder(root, source)
        if folder is None:
            expected = ", ".join(source.files)
            raise FileNotFoundError(f"{source.url} was extracted into {root} but did not hold {expected}")
    if folder is None:
        raise FileNotFoundError(_missing_message(key, root, source))
    return source.load(folder, seed)


def find_sentiment_dataset(
    prefer: Sequence[str] = ("mr", "sst2", "imdb"), root: str | os.PathLike | None = None, seed: int = 0
) -> SentimentSplits:
    """The first dataset of ``prefer`` found in the data folder (never downloading), else the
    SYNTHETIC one: chapters call this to use MR whenever it is present. Check ``.name``."""
    for name in prefer:
        try:
            return load_sentiment(name, root=root, seed=seed)
        except FileNotFoundError:
            continue
    return load_sentiment("synthetic", seed=seed)
