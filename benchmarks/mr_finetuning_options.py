"""Is the fine-tuning protocol what holds the course's BERT back on MR? Two choices, tried on dev.

    python benchmarks/mr_finetuning_options.py --data-root DIR [--learning-rate 3e-4] [--threads T]
                                               [--out benchmarks/results/mr-finetuning-options.json]

``benchmarks/bert_results.py`` fine-tunes every BERT for 2 epochs with a classifier on the pooled
``[CLS]``. The course's BERT was pretrained without next sentence prediction, so its ``[CLS]`` output
and pooler were never trained; and 2 epochs may be too few for it. For the course BERT and the same
architecture from random weights, this measures the MR dev accuracy (seed 0) of

- the protocol: ``[CLS]``, 2 epochs (the dev accuracy ``bert_results.py`` recorded at this rate);
- ``[CLS]``, 4 epochs (twice the steps);
- the mean of the final hidden states over the text's tokens, 2 epochs:
  ``logits = W Dropout((1 / n) sum_i h_L[i]) + b`` over the n non-padding positions (mean pooling,
  as in Sentence-BERT; Reimers and Gurevych, 2019).

Every run: batch 32, texts cut to 64 tokens, AdamW with warm-up and linear decay, at ``--learning-rate``
(3e-4, the rate both models chose on dev in ``bert_results.py``). Only dev is read: the test split is
left to ``bert_results.py``. About 45 minutes on a 2-core CPU.
"""

import argparse
import json
import platform
import time
import warnings
from datetime import datetime, timezone
from pathlib import Path

import torch

from bertlab.bert import BertForSequenceClassification, SequenceClassifierOutput
from bertlab.data import load_sentiment
from bertlab.finetuning import finetune
from bertlab.pretraining import course_bert_folder
from bertlab.tokenization import BertTokenizer
from bertlab.utils import seed_everything


class MeanPooledClassifier(BertForSequenceClassification):
    """BERT with its classifier on the mean of the final hidden states of the non-padding tokens."""

    def forward(self, input_ids, token_type_ids=None, attention_mask=None, labels=None):
        sequence_output, _ = self.bert(input_ids, token_type_ids, attention_mask)  # (B, N, H)
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids, dtype=torch.bool)
        weights = attention_mask.unsqueeze(-1).to(sequence_output.dtype)  # (B, N, 1)
        pooled = (sequence_output * weights).sum(dim=1) / weights.sum(dim=1)  # (B, H)
        logits = self.classifier(self.dropout(pooled))  # (B, num_labels)
        loss = None if labels is None else torch.nn.functional.cross_entropy(logits, labels)
        return SequenceClassifierOutput(loss=loss, logits=logits)


OPTIONS = {  # name: (classifier class, epochs)
    "[CLS], 2 epochs (the protocol)": (BertForSequenceClassification, 2),
    "[CLS], 4 epochs": (BertForSequenceClassification, 4),
    "mean of the tokens, 2 epochs": (MeanPooledClassifier, 2),
}


def classifier(model_class, pretrained: bool) -> BertForSequenceClassification:
    """The course BERT with a new head, or (seeded by the caller) the same architecture from random weights."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the expected warning of from_pretrained: a new head
        model = model_class.from_pretrained(course_bert_folder())
    return model if pretrained else model_class(model.config)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-root", type=Path, help="folder holding rt-polarity/ (default: $BERTLAB_DATA)")
    parser.add_argument("--learning-rate", type=float, default=3e-4)
    parser.add_argument("--threads", type=int, help="CPU threads for torch (default: torch's choice)")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/mr-finetuning-options.json"))
    args = parser.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    splits = load_sentiment("mr", root=args.data_root)
    tokenizer = BertTokenizer(course_bert_folder() / "vocab.txt")

    rows = []
    for pretrained in (True, False):
        for option, (model_class, epochs) in OPTIONS.items():
            seed_everything(0)
            model = classifier(model_class, pretrained)
            start = time.perf_counter()
            history = finetune(model, tokenizer, splits.train, splits.dev, epochs=epochs, batch_size=32,
                               encoder_lr=args.learning_rate, max_length=64, device="cpu", seed=0, progress=False)
            rows.append({"model": "course BERT" if pretrained else "random init", "option": option,
                         "dev_accuracy": history[-1]["dev_accuracy"],
                         "dev_accuracy_by_epoch": [record["dev_accuracy"] for record in history],
                         "seconds": round(time.perf_counter() - start)})
            print(f"{rows[-1]['model']}, {option}: dev {100 * rows[-1]['dev_accuracy']:.1f}% "
                  f"({rows[-1]['seconds']} s)", flush=True)

    print(f"\n**MR dev accuracy** (seed 0, learning rate {args.learning_rate:g}, {len(splits.dev)} dev examples)\n")
    print("| option | course BERT | random init | difference |\n|---|---:|---:|---:|")
    for option in OPTIONS:
        pretrained, random_init = (next(row["dev_accuracy"] for row in rows if row["option"] == option
                                        and row["model"] == model) for model in ("course BERT", "random init"))
        print(f"| {option} | {100 * pretrained:.1f}% | {100 * random_init:.1f}% | "
              f"{100 * (pretrained - random_init):+.1f} |")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "command": f"python benchmarks/mr_finetuning_options.py --learning-rate {args.learning_rate:g}",
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": {"processor": platform.processor() or platform.machine(), "threads": torch.get_num_threads(),
                    "torch": torch.__version__},
        "dataset": {"source": splits.source, "train": len(splits.train), "dev": len(splits.dev)},
        "rows": rows,
    }, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
