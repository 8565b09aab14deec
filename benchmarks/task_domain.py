"""What reading only movie reviews costs the course's BERT on other text: masked tokens, by domain.

    python benchmarks/task_domain.py --data-root DIR [--imdb-root DIR] [--out benchmarks/results/task-domain.json]

The course's BERT was pretrained on IMDB reviews alone (``bertlab/course_bert/README.md``). Chapter 10
fine-tunes it on natural language inference (SNLI's image captions and the hypotheses written about
them), part-of-speech tagging (the English Web Treebank: blogs, news groups, emails, reviews, answers)
and reading comprehension (SQuAD's Wikipedia paragraphs). This script scores the model at masked-token
prediction on the text of each task, with the same recipe and the same fixed masks as its IMDB figure
(``bertlab.pretraining.evaluate_masked_lm``: segments of whole sentences of at most 128 tokens, BERT's
masking with seed 1234), beside the unigram predictor of its own training text (which ignores the
context) and two measures of how foreign the text is to its vocabulary: the share of words that are
[UNK] and the mean number of word pieces per word.

Which text, from the folder ``--data-root`` (every dataset is optional; one that is absent is left out):

- IMDB: the 2,000 held-out test reviews of the model card (``aclImdb/`` extracted in ``--imdb-root``,
  default ``--data-root``);
- MR: the 10,662 sentences of the sentence polarity dataset (chapter 08's task), one document each;
- SNLI: the 10,000 pairs of the official test split, premise and hypothesis as one document;
- EWT: the sentences of the dev and test files, 25 consecutive sentences to a document;
- SQuAD: the 2,067 context paragraphs of SQuAD 1.1's dev set, one document each.
"""

import argparse
import json
import platform
import time
from datetime import datetime, timezone
from pathlib import Path

import torch

from bertlab.course_model import (EVALUATION_SEED, course_bert, course_bert_sha256, course_bert_token_counts,
                                  held_out_reviews)
from bertlab.data import load_sentiment, split_sentences
from bertlab.pretraining import evaluate_masked_lm, unigram_masked_lm
from bertlab.task_data import read_conllu, read_snli, read_squad

SEQ_LEN = 128  # the model card's
EWT_SENTENCES_PER_DOCUMENT = 25


def mr_text(root: Path) -> list[list[str]]:
    splits = load_sentiment("mr", root)
    return [[text] for text, _ in [*splits.train, *splits.dev, *splits.test]]


def snli_text(root: Path) -> list[list[str]]:
    return [[pair.premise, pair.hypothesis] for pair in read_snli(root / "snli_1.0" / "snli_1.0_test.jsonl.gz")]


def ewt_text(root: Path) -> list[list[str]]:
    folder = root / "UD_English-EWT"
    sentences = [" ".join(sentence.words) for split in ("dev", "test")
                 for sentence in read_conllu(folder / f"en_ewt-ud-{split}.conllu.gz")]
    step = EWT_SENTENCES_PER_DOCUMENT
    return [sentences[start:start + step] for start in range(0, len(sentences), step)]


def squad_text(root: Path) -> list[list[str]]:
    contexts = dict.fromkeys(question.context for question in read_squad(root / "squad-v1.1" / "dev-v1.1.json.gz"))
    return [split_sentences(context) for context in contexts]


DOMAINS = {  # name: (what the text is, its reader)
    "IMDB": ("2,000 held-out IMDB test reviews (the model card's figure)", held_out_reviews),
    "MR": ("sentence polarity dataset v1.0, all 10,662 snippets (chapter 08)", mr_text),
    "SNLI": ("SNLI 1.0 test split, premise and hypothesis of each pair", snli_text),
    "EWT": ("UD English Web Treebank v2.16, dev and test sentences", ewt_text),
    "SQuAD": ("SQuAD 1.1 dev set, its 2,067 context paragraphs", squad_text),
}


def vocabulary_fit(tokenizer, documents: list[list[str]]) -> dict[str, float]:
    """The share of words (the tokenizer's basic tokens) that become [UNK], and word pieces per word."""
    words = [word for document in documents for sentence in document
             for word in tokenizer.basic_tokenizer.tokenize(sentence)]
    pieces = [tokenizer.wordpiece_tokenizer.tokenize_word(word) for word in words]
    unknown = sum(piece_list == ["[UNK]"] for piece_list in pieces)
    return {"words": len(words), "unknown_word_share": unknown / len(words),
            "pieces_per_word": sum(map(len, pieces)) / len(words)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-root", type=Path, required=True, help="the datasets folder")
    parser.add_argument("--imdb-root", type=Path, help="the folder that holds aclImdb/ (default: --data-root)")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/task-domain.json"))
    parser.add_argument("--threads", type=int, help="CPU threads for torch (default: torch's choice)")
    args = parser.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)

    model, tokenizer = course_bert()
    counts = course_bert_token_counts()
    domains = {}
    for name, (description, read) in DOMAINS.items():
        try:
            documents = read(args.imdb_root or args.data_root if name == "IMDB" else args.data_root)
        except FileNotFoundError as error:
            print(f"{name}: skipped ({error})")
            continue
        started = time.perf_counter()
        scores = evaluate_masked_lm(model, tokenizer, documents, seq_len=SEQ_LEN, seed=EVALUATION_SEED)
        unigram = unigram_masked_lm(counts, tokenizer, documents, seq_len=SEQ_LEN, seed=EVALUATION_SEED)
        domains[name] = {"text": description, "documents": len(documents), "model": vars(scores),
                         "unigram": vars(unigram), **vocabulary_fit(tokenizer, documents)}
        print(f"{name}: masked-token accuracy {100 * scores.accuracy:.1f}% (loss {scores.loss:.3f}, "
              f"{scores.predicted_tokens} tokens), unigram {100 * unigram.accuracy:.1f}% (loss {unigram.loss:.3f}), "
              f"[UNK] words {100 * domains[name]['unknown_word_share']:.2f}%, "
              f"{domains[name]['pieces_per_word']:.2f} pieces per word ({time.perf_counter() - started:.0f} s)")
    record = {
        "command": "python benchmarks/task_domain.py --data-root DIR --imdb-root DIR",
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": {"processor": platform.processor() or platform.machine(), "threads": torch.get_num_threads(),
                    "torch": torch.__version__},
        "course_bert_sha256": course_bert_sha256(),
        "seq_len": SEQ_LEN, "seed": EVALUATION_SEED,
        "domains": domains,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
