"""Tests of bertlab.data: the pydoc corpus, the sentiment loaders and their downloader, splits, and the
synthetic set. Downloads go to an HTTP server on 127.0.0.1 serving archives the tests build."""

import dataclasses
import functools
import hashlib
import io
import re
import tarfile
import threading
import zipfile
from collections import Counter
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

import pytest

from bertlab import data
from bertlab.data import (
    NEGATIVE_WORDS,
    POSITIVE_WORDS,
    SentimentSplits,
    download_and_extract,
    IMDB_HELD_OUT_FOLDERS,
    find_sentiment_dataset,
    imdb_documents,
    load_sentiment,
    pretraining_corpus,
    split_examples,
    split_sentences,
    synthetic_sentiment,
)

# --------------------------------------------------------------------------------------------------
# The pretraining corpus
# --------------------------------------------------------------------------------------------------


def test_pydoc_corpus_is_many_documents_of_real_sentences():
    documents = pretraining_corpus()
    sentences = [sentence for document in documents for sentence in document]
    assert len(documents) >= 100 and len(sentences) >= 1500
    assert sum(len(document) >= 2 for document in documents) >= 100  # next sentence prediction needs pairs
    for sentence in sentences:
        assert "\n" not in sentence and sentence == sentence.strip()
        assert sentence[0].isupper() or sentence[0] in "\"“", sentence
        assert sentence.rstrip("\"”')").endswith((".", "!", "?", ":")), sentence
        assert len(sentence.split()) >= 3, sentence
        assert not re.search(r"::=|>>>|\*\*\*|===|---|\+--|\[\d+\]", sentence), sentence
    words = Counter(word.lower() for sentence in sentences for word in sentence.split())
    assert {"the", "is", "a", "of", "object", "function"} <= set(words)
    assert pretraining_corpus() == documents  # deterministic


def test_split_sentences():
    text = 'Dr. Smith arrived, e.g. by train.  He sat down!\nDid he? "Yes," said J. R. Tolkien. 3 more.'
    assert split_sentences(text) == [
        "Dr. Smith arrived, e.g. by train.", "He sat down!", "Did he?", '"Yes," said J. R. Tolkien.', "3 more."
    ]  # fmt: skip
    assert split_sentences("version 3.8 is out. it is lower-cased.") == ["version 3.8 is out. it is lower-cased."]
    assert split_sentences("  ") == []


def test_corpus_with_user_text(tmp_path):
    folder = tmp_path / "texts"
    (folder / "sub").mkdir(parents=True)
    (folder / "a.txt").write_text("First doc. It has two sentences.\n\nSecond doc here.\n", encoding="utf-8")
    (folder / "sub" / "b.txt").write_text("One document,\nwrapped over lines. Done.", encoding="utf-8")
    (folder / "ignored.md").write_text("Not read.", encoding="utf-8")
    single = tmp_path / "single.text"
    single.write_text("Named directly.", encoding="utf-8")
    default = pretraining_corpus()
    documents = pretraining_corpus([folder, single])
    assert documents[: len(default)] == default
    assert documents[len(default) :] == [
        ["First doc.", "It has two sentences."],
        ["Second doc here."],
        ["One document, wrapped over lines.", "Done."],
        ["Named directly."],
    ]
    assert pretraining_corpus(single)[len(default) :] == [["Named directly."]]
    with pytest.raises(FileNotFoundError, match="missing.txt"):
        pretraining_corpus(tmp_path / "missing.txt")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no .txt files"):
        pretraining_corpus(tmp_path / "empty")
    (tmp_path / "latin.txt").write_bytes("Caf\xe9.".encode("latin-1"))
    with pytest.raises(ValueError, match="latin.txt is not UTF-8"):
        pretraining_corpus(tmp_path / "latin.txt")


# --------------------------------------------------------------------------------------------------
# Splits
# --------------------------------------------------------------------------------------------------


def test_split_examples_is_deterministic_disjoint_and_stratified():
    examples = [(f"text {i}", int(i % 4 == 0)) for i in range(1000)]  # 250 positive, 750 negative
    train, dev, test = split_examples(examples, seed=3)
    assert (train, dev, test) == split_examples(examples, seed=3)
    assert split_examples(examples, seed=4) != (train, dev, test)
    assert (len(train), len(dev), len(test)) == (800, 100, 100)
    assert sorted(train + dev + test) == sorted(examples)  # each example in exactly one split
    for split in (dev, test):
        assert Counter(label for _, label in split) == {0: 75, 1: 25}
    assert [label for _, label in test[:20]] != sorted(label for _, label in test[:20])  # shuffled
    train, dev, test = split_examples(examples, dev_fraction=0.2, test_fraction=0.0)
    assert (len(train), len(dev), len(test)) == (800, 200, 0)
    with pytest.raises(ValueError, match="dev_fraction"):
        split_examples(examples, dev_fraction=0.6, test_fraction=0.5)


# --------------------------------------------------------------------------------------------------
# The synthetic set
# --------------------------------------------------------------------------------------------------


def clause_label(clause: str) -> int:
    """The grammar's rule, restated: the polarity of the last word, flipped by a negation."""
    words = clause.split()
    assert (words[-1] in POSITIVE_WORDS) != (words[-1] in NEGATIVE_WORDS), clause
    negated = any(word in ("not", "never") or word.endswith("n't") for word in words)
    return int(words[-1] in POSITIVE_WORDS) ^ negated


def test_synthetic_sentiment_follows_its_grammar():
    examples = synthetic_sentiment(num_examples=2000, seed=0)
    assert examples == synthetic_sentiment(num_examples=2000, seed=0)
    assert examples != synthetic_sentiment(num_examples=2000, seed=1)
    assert Counter(label for _, label in examples) == {0: 1000, 1: 1000}
    assert len({text for text, _ in examples}) == 2000  # distinct: no leak between splits
    assert {"good", "great"} <= set(POSITIVE_WORDS) and {"bad", "boring"} <= set(NEGATIVE_WORDS)
    contrasts = 0
    for text, label in examples:
        assert text.endswith(" .") and text == text.lower()
        clauses = text[: -len(" .")].split(" , but ")
        assert label == clause_label(clauses[-1]), text  # the clause after "but" decides
        if len(clauses) == 2:
            contrasts += 1
            assert clause_label(clauses[0]) != label, text  # ... against a clause of the other polarity
    assert 800 < contrasts < 1200
    texts = {text: label for text, label in examples}
    assert any("not bad ." in text for text in texts)
    assert all(label == 1 for text, label in texts.items() if text.endswith(("not bad .", "n't bad .")))
    assert all(label == 0 for text, label in texts.items() if text.endswith(("not good .", "n't good .")))
    assert any(text.split()[-3] in ("very", "really") for text in texts)  # intensifiers occur


def test_load_synthetic():
    splits = load_sentiment("synthetic", seed=0)
    assert isinstance(splits, SentimentSplits) and splits.name == "synthetic"
    assert (len(splits.train), len(splits.dev), len(splits.test)) == (1600, 200, 200)
    assert "synthetic" in splits.source and "not real" in splits.source
    assert splits == load_sentiment("synthetic", seed=0) and splits != load_sentiment("synthetic", seed=1)
    assert "train=1600" in repr(splits)


# --------------------------------------------------------------------------------------------------
# Sentiment datasets in their published formats
# --------------------------------------------------------------------------------------------------

MR_POSITIVE = [
    b"a gorgeous , witty , seductive movie . ",
    b"exquisitely acted and masterfully if preciously interwoven\x85 [the film] addresses a caf\xe9 . ",
    b"\x85an adorably whimsical comedy \x96 that deserves more . ",
]
MR_NEGATIVE = [
    b"simplistic , silly and tedious . ",
    b"it's so laddish and juvenile , only teenage boys could possibly find it funny . ",
]


def write_mr(folder, positive=MR_POSITIVE, negative=MR_NEGATIVE):
    """MR's format: Windows-1252 bytes, one snippet per line ending in " \\n", byte 0x85 inside lines."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "rt-polarity.pos").write_bytes(b"\n".join(positive) + b"\n")
    (folder / "rt-polarity.neg").write_bytes(b"\n".join(negative) + b"\n")


def all_examples(splits):
    return sorted(splits.train + splits.dev + splits.test)


@pytest.mark.parametrize("layout", ["rt-polarity", "rt-polaritydata", "."])
def test_load_mr_from_small_files(tmp_path, layout):
    write_mr(tmp_path / layout)
    splits = load_sentiment("mr", root=tmp_path)
    assert splits.name == "mr" and "Pang and Lee" in splits.source and str(tmp_path) in splits.source
    assert all_examples(splits) == sorted(
        [
            ("a gorgeous , witty , seductive movie .", 1),
            ("exquisitely acted and masterfully if preciously interwoven… [the film] addresses a café .", 1),
            ("…an adorably whimsical comedy – that deserves more .", 1),
            ("simplistic , silly and tedious .", 0),
            ("it's so laddish and juvenile , only teenage boys could possibly find it funny .", 0),
        ]
    )


def test_load_mr_uses_the_environment_variable(tmp_path, monkeypatch):
    write_mr(tmp_path / "rt-polarity")
    monkeypatch.setenv("BERTLAB_DATA", str(tmp_path))
    assert load_sentiment("mr").source == load_sentiment("mr", root=tmp_path).source


def test_load_mr_real_files(mr_dir):
    names = ("rt-polarity.pos", "rt-polarity.neg")
    raw_lines = {name: (mr_dir / name).read_bytes().split(b"\n")[:-1] for name in names}
    assert sum(b"\x85" in line for lines in raw_lines.values() for line in lines) > 0
    for root in (mr_dir, mr_dir.parent):  # root/rt-polarity.pos and root/rt-polarity/rt-polarity.pos
        splits = load_sentiment("mr", root=root)
        examples = splits.train + splits.dev + splits.test
        assert Counter(label for _, label in examples) == {1: 5331, 0: 5331}  # 0x85 did not split a line
        assert (len(splits.train), len(splits.dev), len(splits.test)) == (8530, 1066, 1066)
        assert Counter(label for _, label in splits.test) == {1: 533, 0: 533}
    texts = {text for text, _ in examples}
    expected = raw_lines["rt-polarity.pos"][0].decode("cp1252").strip()
    assert expected in texts
    assert any(text.startswith("exquisitely acted and masterfully if preciously interwoven…") for text in texts)
    assert load_sentiment("mr", root=mr_dir, seed=0) == splits
    assert load_sentiment("mr", root=mr_dir, seed=1).test != splits.test


def test_load_sst2_from_small_files(tmp_path):
    folder = tmp_path / "SST-2"
    folder.mkdir()
    train = [(f"train sentence {i} , fine", i % 2) for i in range(60)]
    dev = [(f"dev sentence {i}", i % 2) for i in range(6)]
    for name, rows in (("train.tsv", train), ("dev.tsv", dev)):
        lines = ["sentence\tlabel"] + [f"{text} \t{label}" for text, label in rows]  # GLUE keeps a trailing space
        (folder / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    splits = load_sentiment("sst2", root=tmp_path)
    assert splits.name == "sst2" and "GLUE" in splits.source
    assert sorted(splits.test) == sorted(dev)  # GLUE's labelled dev set is the test set
    assert sorted(splits.train + splits.dev) == sorted(train)
    assert Counter(label for _, label in splits.dev) == {0: 3, 1: 3}  # as large as GLUE dev, stratified
    (folder / "dev.tsv").write_text("sentence\tlabel\nbroken line without a label\n", encoding="utf-8")
    with pytest.raises(ValueError, match="dev.tsv, line 2"):
        load_sentiment("sst2", root=tmp_path)


def test_load_imdb_from_small_files(tmp_path):
    reviews = {}
    for split in ("train", "test"):
        for polarity, label in (("pos", 1), ("neg", 0)):
            folder = tmp_path / "aclImdb" / split / polarity
            folder.mkdir(parents=True)
            for i in range(10):
                text = f"{split} {polarity} review {i}.<br /><br />Second line."
                (folder / f"{i}_{7 if label else 2}.txt").write_text(text, encoding="utf-8")
                reviews.setdefault(split, []).append((f"{split} {polarity} review {i}. Second line.", label))
    splits = load_sentiment("imdb", root=tmp_path)
    assert splits.name == "imdb" and "Maas" in splits.source
    assert sorted(splits.test) == sorted(reviews["test"])
    assert sorted(splits.train + splits.dev) == sorted(reviews["train"]) and len(splits.dev) == 2


def write_imdb_tree(root) -> None:
    """A small aclImdb/ in the authors' layout: ids out of lexical order, ratings in the names."""
    texts = {
        "train/unsup": {10: "Unlabelled ten. It has two sentences.", 2: "Unlabelled two!<br /><br />Next line here."},
        "train/pos": {1: "A fine film. Really."},
        "train/neg": {0: "Dull.<br />Very dull."},
        "test/pos": {3: "Held out. Not for training."},
        "test/neg": {4: "Also held out."},
    }
    for folder, reviews in texts.items():
        (root / "aclImdb" / folder).mkdir(parents=True)
        for identifier, text in reviews.items():
            (root / "aclImdb" / folder / f"{identifier}_{identifier % 10}.txt").write_text(text, encoding="utf-8")


def test_imdb_documents_reads_the_authors_layout(tmp_path):
    write_imdb_tree(tmp_path)
    assert imdb_documents(tmp_path) == [  # train/unsup (by numeric id), train/pos, train/neg; no test review
        ["Unlabelled two!", "Next line here."],
        ["Unlabelled ten.", "It has two sentences."],
        ["A fine film.", "Really."],
        ["Dull.", "Very dull."],
    ]
    assert imdb_documents(tmp_path / "aclImdb", IMDB_HELD_OUT_FOLDERS) == [["Held out.", "Not for training."],
                                                                          ["Also held out."]]
    assert imdb_documents(tmp_path, ("train/unsup",), max_reviews_per_folder=1) \
        == [["Unlabelled two!", "Next line here."]]
    assert pretraining_corpus(corpus="imdb", root=tmp_path) == imdb_documents(tmp_path)


def test_the_model_card_scores_the_course_bert_on_the_test_reviews_only(tmp_path, monkeypatch):
    from bertlab import course_model

    write_imdb_tree(tmp_path)
    (tmp_path / "aclImdb" / "test" / "pos" / "13_9.txt").write_text("Beyond the first.", encoding="utf-8")
    monkeypatch.setattr(course_model, "HELD_OUT_REVIEWS", 1)
    assert course_model.held_out_reviews(tmp_path) == [["Held out.", "Not for training."], ["Also held out."]]


def test_imdb_documents_say_what_is_missing(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"lacks train/unsup, train/pos, train/neg.*aclImdb_v1\.tar\.gz"):
        imdb_documents(tmp_path)
    write_imdb_tree(tmp_path)
    (tmp_path / "aclImdb" / "train" / "pos" / "9_9.txt").write_bytes(b"caf\xe9")
    with pytest.raises(ValueError, match=r"9_9\.txt is not UTF-8"):
        imdb_documents(tmp_path)
    with pytest.raises(ValueError, match="unknown pretraining corpus 'wiki'"):
        pretraining_corpus(corpus="wiki")


def test_missing_dataset_says_where_to_put_which_files(tmp_path):
    with pytest.raises(FileNotFoundError) as error:
        load_sentiment("mr", root=tmp_path)
    message = str(error.value)
    for part in ("rt-polarity.pos", "rt-polarity.neg", str(tmp_path / "rt-polarity"), "download=True", "BERTLAB_DATA"):
        assert part in message
    with pytest.raises(FileNotFoundError, match=r"train\.tsv and dev\.tsv .*SST-2"):
        load_sentiment("sst2", root=tmp_path)
    with pytest.raises(FileNotFoundError, match="aclImdb"):
        load_sentiment("imdb", root=tmp_path)
    with pytest.raises(ValueError, match="unknown sentiment dataset 'yelp'"):
        load_sentiment("yelp", root=tmp_path)


def test_find_sentiment_dataset_prefers_real_data(tmp_path):
    assert find_sentiment_dataset(root=tmp_path).name == "synthetic"
    write_mr(tmp_path / "rt-polarity")
    assert find_sentiment_dataset(root=tmp_path).name == "mr"
    (tmp_path / "SST-2").mkdir()
    for name, copies in (("train.tsv", 5), ("dev.tsv", 1)):
        (tmp_path / "SST-2" / name).write_text("sentence\tlabel\n" + "good\t1\nbad\t0\n" * copies, encoding="utf-8")
    assert find_sentiment_dataset(root=tmp_path).name == "mr"
    assert find_sentiment_dataset(prefer=("sst2", "mr"), root=tmp_path).name == "sst2"


# --------------------------------------------------------------------------------------------------
# Downloads from a server on 127.0.0.1
# --------------------------------------------------------------------------------------------------


class QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture
def server(tmp_path, monkeypatch):
    """(folder, base URL): an HTTP server on 127.0.0.1 serving the files put in folder."""
    for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    folder = tmp_path / "served"
    folder.mkdir()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(QuietHandler, directory=str(folder)))
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield folder, f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()
    thread.join()


def tar_gz(path, files: dict[str, bytes]) -> str:
    """Write a .tar.gz of ``{name: content}`` and return its SHA-256."""
    with tarfile.open(path, "w:gz") as archive:
        for name, content in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(content)
            archive.addfile(info, io.BytesIO(content))
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_download_mr_with_checksum(server, tmp_path, monkeypatch):
    served, url = server
    files = {
        "rt-polaritydata/rt-polarity.pos": b"\n".join(MR_POSITIVE) + b"\n",
        "rt-polaritydata/rt-polarity.neg": b"\n".join(MR_NEGATIVE) + b"\n",
        "rt-polaritydata.README.1.0.txt": b"readme",
    }  # the layout of the authors' rt-polaritydata.tar.gz
    sha256 = tar_gz(served / "rt-polaritydata.tar.gz", files)
    source = dataclasses.replace(data.SENTIMENT_SOURCES["mr"], url=f"{url}/rt-polaritydata.tar.gz", sha256=sha256)
    monkeypatch.setitem(data.SENTIMENT_SOURCES, "mr", source)
    root = tmp_path / "data"
    with pytest.raises(FileNotFoundError):
        load_sentiment("mr", root=root)  # no download unless asked
    splits = load_sentiment("mr", root=root, download=True)
    assert len(all_examples(splits)) == 5
    assert all_examples(splits) == all_examples(load_sentiment("mr", root=tmp_path / "data"))
    assert sorted(path.name for path in root.iterdir()) == ["rt-polaritydata", "rt-polaritydata.README.1.0.txt"]


def test_download_zip_and_wrong_checksum(server, tmp_path):
    served, url = server
    with zipfile.ZipFile(served / "SST-2.zip", "w") as archive:
        archive.writestr("SST-2/train.tsv", "sentence\tlabel\ngood\t1\nbad\t0\n")
        archive.writestr("SST-2/dev.tsv", "sentence\tlabel\nfine\t1\n")
    sha256 = hashlib.sha256((served / "SST-2.zip").read_bytes()).hexdigest()
    wrong = tmp_path / "wrong"
    with pytest.raises(ValueError, match=f"checksum mismatch .*expected SHA-256 {'0' * 64}, got {sha256}"):
        download_and_extract(f"{url}/SST-2.zip", "0" * 64, wrong)
    assert list(wrong.iterdir()) == []  # nothing extracted, the partial download deleted
    right = tmp_path / "right"
    assert download_and_extract(f"{url}/SST-2.zip", sha256.upper(), right) == right
    assert sorted(path.name for path in right.iterdir()) == ["SST-2"]
    assert load_sentiment("sst2", root=right).test == [("fine", 1)]
    with pytest.raises(ConnectionError, match="could not download"):
        download_and_extract(f"{url}/missing.zip", sha256, tmp_path / "missing")


@pytest.mark.parametrize("name", ["../escaped.txt", "/tmp/absolute-bertlab-test.txt", "ok/../../escaped.txt"])
def test_download_refuses_paths_outside_the_folder(server, tmp_path, name):
    served, url = server
    sha256 = tar_gz(served / "evil.tar.gz", {"fine.txt": b"fine", name: b"evil"})
    target = tmp_path / "target"
    with pytest.raises(ValueError, match="outside"):
        download_and_extract(f"{url}/evil.tar.gz", sha256, target)
    assert list(target.iterdir()) == [] and not (tmp_path / "escaped.txt").exists()
    with zipfile.ZipFile(served / "evil.zip", "w") as archive:
        archive.writestr(name, "evil")
    sha256 = hashlib.sha256((served / "evil.zip").read_bytes()).hexdigest()
    with pytest.raises(ValueError, match="outside"):
        download_and_extract(f"{url}/evil.zip", sha256, target)
    assert list(target.iterdir()) == []


def test_download_refuses_links(server, tmp_path):
    served, url = server
    with tarfile.open(served / "link.tar.gz", "w:gz") as archive:
        link = tarfile.TarInfo("inside-link")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
        archive.addfile(link)
    sha256 = hashlib.sha256((served / "link.tar.gz").read_bytes()).hexdigest()
    with pytest.raises(ValueError, match="not a file or folder"):
        download_and_extract(f"{url}/link.tar.gz", sha256, tmp_path / "target")
