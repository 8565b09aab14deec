"""The peak learning rate of the course's BERT, chosen by short runs on the IMDB pretraining text.

    python benchmarks/course_bert_sweep.py --data-root DIR [--lrs 5e-4 1e-3 2e-3] [--steps 250]
                                           [--out benchmarks/results/course-bert-sweep.json]

Each run pretrains BERT-mini (the course model's settings: vocabulary of 8,192 pieces learned from
the whole pretraining text, MLM only on full-sentence segments of 128 tokens, batch 32, dynamic
masking, 10% warm-up and linear decay) for ``--steps`` steps on the first ``--reviews`` unlabelled
reviews, then scores the MLM loss on fixed masks of held-out test reviews. The schedule of a short
run decays within the run, so the comparison favours no learning rate for not having finished.
DIR is the folder holding ``aclImdb/``.
"""

import argparse
import json
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import torch

from bertlab.bert import BertConfig, BertForPreTraining
from bertlab.data import IMDB_HELD_OUT_FOLDERS, imdb_documents
from bertlab.pretraining import PretrainingRecipe, evaluate_masked_lm, pretrain
from bertlab.tokenization import BertTokenizer, train_wordpiece_vocab
from bertlab.utils import seed_everything


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-root", type=Path, required=True, help="folder holding aclImdb/")
    parser.add_argument("--lrs", type=float, nargs="+", default=[5e-4, 1e-3, 2e-3])
    parser.add_argument("--steps", type=int, default=250)
    parser.add_argument("--reviews", type=int, default=10000, help="unlabelled reviews to train on (default 10000)")
    parser.add_argument("--preset", default="mini")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/course-bert-sweep.json"))
    args = parser.parse_args()

    corpus = imdb_documents(args.data_root)
    vocab = train_wordpiece_vocab([sentence for document in corpus for sentence in document], 8192)
    tokenizer = BertTokenizer(vocab)
    documents = imdb_documents(args.data_root, ("train/unsup",), max_reviews_per_folder=args.reviews)
    held_out = imdb_documents(args.data_root, IMDB_HELD_OUT_FOLDERS, max_reviews_per_folder=100)
    runs = []
    for lr in args.lrs:
        seed_everything(0)
        model = BertForPreTraining(BertConfig.preset(args.preset, vocab_size=tokenizer.vocab_size))
        start = time.perf_counter()
        with tempfile.TemporaryDirectory() as folder:
            recipe = PretrainingRecipe(max_steps=args.steps, batch_size=32, seq_len=128, lr=lr, nsp=False, log_every=25)
            history = pretrain(model, tokenizer, documents, recipe, output_dir=folder, device="cpu", progress=False)
        scores = evaluate_masked_lm(model, tokenizer, held_out, seq_len=128)
        runs.append({"lr": lr, "seconds": round(time.perf_counter() - start), "train_mlm_loss": history[-1]["mlm_loss"],
                     "held_out_mlm_loss": round(scores.loss, 4), "held_out_mlm_accuracy": round(scores.accuracy, 4)})
        print(runs[-1], flush=True)
    best = min(runs, key=lambda run: run["held_out_mlm_loss"])
    print(f"best peak learning rate: {best['lr']:g} (held-out MLM loss {best['held_out_mlm_loss']:.3f})")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "command": f"python benchmarks/course_bert_sweep.py --lrs {' '.join(map(str, args.lrs))} --steps {args.steps} "
                   f"--reviews {args.reviews} --preset {args.preset}",
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "threads": torch.get_num_threads(),
        "runs": runs, "best_lr": best["lr"]}, indent=2) + "\n")


if __name__ == "__main__":
    main()
