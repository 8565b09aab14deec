"""How large a WordPiece vocabulary for the course's BERT? Measured on the IMDB pretraining text.

    python benchmarks/course_bert_vocabulary.py --data-root DIR [--sizes 4096 8192 16384 32768]
                                                [--out benchmarks/results/course-bert-vocabulary.json]

For each vocabulary size V, learned from the pretraining reviews (``train/unsup``, ``train/pos``,
``train/neg``) with ``train_wordpiece_vocab``, it measures

- fertility: WordPiece tokens per word (``BasicTokenizer`` word or punctuation mark) on held-out
  test reviews; fewer tokens per word fit more text into a sequence of fixed length;
- MR words whole: the share of the word occurrences of MR (when present) that are a single piece;
- the time of one pretraining step of BERT-mini (batch 32 x 128 tokens, MLM at the labelled
  positions only, AdamW), median of a few steps, all sizes timed alternately in one run;
- words per second = tokens per second / fertility: the text a 2-hour run gets through.

DIR is the folder holding ``aclImdb/`` (the authors' archive, extracted).
"""

import argparse
import json
import platform
import statistics
import time
from datetime import datetime, timezone
from pathlib import Path

import torch

from bertlab.bert import BertConfig, BertForPreTraining
from bertlab.data import IMDB_HELD_OUT_FOLDERS, imdb_documents, load_sentiment
from bertlab.pretraining import IGNORE_INDEX, weight_decay_groups
from bertlab.tokenization import BasicTokenizer, BertTokenizer, train_wordpiece_vocab


def fertility(tokenizer: BertTokenizer, texts: list[str]) -> tuple[float, float]:
    """(WordPiece tokens per word, share of word occurrences that are one piece) over ``texts``."""
    words = [word for text in texts for word in BasicTokenizer().tokenize(text)]
    pieces = [len(tokenizer.wordpiece_tokenizer.tokenize_word(word)) for word in words]
    return sum(pieces) / len(words), sum(count == 1 for count in pieces) / len(words)


def step_seconds(vocab_size: int, batch_size: int = 32, seq_len: int = 128, steps: int = 5) -> list[float]:
    """Seconds of ``steps`` pretraining steps of BERT-mini at this vocabulary size (after one warm-up)."""
    torch.manual_seed(0)
    model = BertForPreTraining(BertConfig.preset("mini", vocab_size=vocab_size)).train()
    optimizer = torch.optim.AdamW(weight_decay_groups(model, 0.01), lr=1e-4)
    input_ids = torch.randint(5, vocab_size, (batch_size, seq_len))
    labels = torch.where(torch.rand(batch_size, seq_len) < 0.15, input_ids, IGNORE_INDEX)
    times = []
    for step in range(steps + 1):
        start = time.perf_counter()
        model(input_ids, mlm_labels=labels, predict_labelled_only=True).loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if step:
            times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-root", type=Path, required=True, help="folder holding aclImdb/")
    parser.add_argument("--mr-root", type=Path, help="folder holding rt-polarity/ (default: --data-root)")
    parser.add_argument("--sizes", type=int, nargs="+", default=[4096, 8192, 16384, 32768])
    parser.add_argument("--held-out-reviews", type=int, default=1000, help="test reviews per polarity (default 1000)")
    parser.add_argument("--rounds", type=int, default=3, help="timing rounds, sizes alternating (default 3)")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/course-bert-vocabulary.json"))
    args = parser.parse_args()

    sentences = [sentence for document in imdb_documents(args.data_root) for sentence in document]
    held_out = [" ".join(document) for document in
                imdb_documents(args.data_root, IMDB_HELD_OUT_FOLDERS, max_reviews_per_folder=args.held_out_reviews)]
    try:
        mr = [text for text, _ in load_sentiment("mr", root=args.mr_root or args.data_root).train]
    except FileNotFoundError:
        mr = []
    print(f"{len(sentences)} pretraining sentences, {len(held_out)} held-out reviews, {len(mr)} MR snippets")

    rows = {}
    for size in args.sizes:
        start = time.perf_counter()
        tokenizer = BertTokenizer(train_wordpiece_vocab(sentences, size))
        learn_seconds = time.perf_counter() - start
        tokens_per_word, whole = fertility(tokenizer, held_out)
        mr_whole = fertility(tokenizer, mr)[1] if mr else None
        rows[size] = {"vocab_size": tokenizer.vocab_size, "learn_seconds": round(learn_seconds, 1),
                      "tokens_per_word": round(tokens_per_word, 4), "held_out_words_whole": round(whole, 4),
                      "mr_words_whole": None if mr_whole is None else round(mr_whole, 4), "step_seconds": []}
        print(f"V={size}: {tokens_per_word:.3f} tokens per word, {whole:.1%} of held-out words whole"
              + (f", {mr_whole:.1%} of MR words whole" if mr else ""), flush=True)
    for _ in range(args.rounds):  # alternate the sizes, so that load on the machine hits all alike
        for size in args.sizes:
            rows[size]["step_seconds"] += step_seconds(size)
    for size, row in rows.items():
        row["median_step_seconds"] = round(statistics.median(row["step_seconds"]), 4)
        row["tokens_per_second"] = round(32 * 128 / row["median_step_seconds"])
        row["words_per_second"] = round(row["tokens_per_second"] / row["tokens_per_word"])

    print("\n| V | tokens per word | held-out words whole | MR words whole | s per step | tokens/s | words/s |")
    print("|---|---|---|---|---|---|---|")
    for size, row in rows.items():
        mr_cell = "n/a" if row["mr_words_whole"] is None else f"{row['mr_words_whole']:.1%}"
        print(f"| {size} | {row['tokens_per_word']:.3f} | {row['held_out_words_whole']:.1%} | {mr_cell} | "
              f"{row['median_step_seconds']:.3f} | {row['tokens_per_second']} | {row['words_per_second']} |")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "command": "python benchmarks/course_bert_vocabulary.py --sizes " + " ".join(map(str, args.sizes)),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": {"processor": platform.processor() or platform.machine(), "threads": torch.get_num_threads(),
                    "torch": torch.__version__},
        "rows": list(rows.values()),
    }, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
