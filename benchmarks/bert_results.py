"""What the course's pretrained BERT achieves on MR, under a fair protocol.

    python benchmarks/bert_results.py --data-root DIR [--imdb-root DIR] [--quick] [--device auto|cpu|cuda]
                                      [--threads T] [--out benchmarks/results/bert-<device>.json] [--work-dir DIR]

DIR holds ``rt-polarity/`` (the sentence polarity dataset v1.0, MR; Pang and Lee, 2005), split 80/10/10
by ``bertlab.data`` as in the chapters. The course's BERT is the one the package ships
(``bertlab.pretraining.course_bert_folder()``: BERT-mini pretrained on IMDB reviews, see its model card;
its held-out masked-token scores are measured by ``tools/course_bert.py export`` and read here from
``benchmarks/results/course-bert.json``).

The protocol, the same for every model: the classifier reads the text vector that the course BERT's
``config.json`` names (``classifier_pooling``, chosen on MR dev by ``benchmarks/mr_pooling.py``), also from
random weights; the same training examples, the same number of epochs and
batch size (so the same number of steps), texts cut to 64 tokens; each model's learning rate chosen
on the dev set from a grid (``bertlab.finetuning.choose_learning_rate``, seed 0), then the other seeds
trained at that rate; test accuracy reported as mean and standard deviation over the seeds.

(a) MR test accuracy: a tf-idf uni+bigram logistic regression (scikit-learn, its C chosen on dev),
    bertlab's bag-of-words logistic regression, BERT-mini from random weights (the course vocabulary),
    the course BERT with its encoder frozen (head only), and the course BERT fine-tuned whole.
(b) A learning curve: test accuracy against the number of labelled examples (250, 1000, 4000, all),
    pretrained against random init, every size with every seed; smaller sets get more epochs (at least
    ``min_steps`` steps), the same for both, and a wider grid of learning rates
    (``curve_learning_rates``: the best rate moves with the number of steps and examples).
(c) Distillation: the fine-tuned course BERT (seed 0) teaches a half-depth student (Hinton et al.'s
    loss, alpha 0.5, T = 2); the same student trained on the labels alone shows what the teacher adds.
    Both students start from the course BERT's pretrained layers 0 and 2 and a new head.
    ``compare_models`` times teacher and student side by side on the test set.
(d) Distillation where it is known to pay (Sanh et al., 2019; Jiao et al., 2020): with ``--imdb-root``, the
    teacher labels sentences of the unlabelled IMDB reviews (MR's domain) and students learn from them
    and the labels, with all the labels and with the first 250, beside the students of the labels alone;
    every student over every seed.

The JSON holds the settings, the machine, every run and the checks of the expectations, each with its
paired test over the test examples (a bootstrap interval, and McNemar's test for two classifiers): an
expectation holds only when significant at 95%. Each model's result on each test example is kept in the
stages (below), not in the JSON. A Markdown table is printed and written next to it (``.md``).

The full run takes several hours on a 2-core CPU (1.8 hours when the learning curve had one seed and
the CPU computed in float32). It is resumable: each finished stage (and the fine-tuned teacher's weights)
is kept in ``--work-dir`` (default ``benchmarks/stages/bert-results-<device>``, committed), and the
same command started again goes on after the last finished stage. Each stage is kept with what it
depends on (the course BERT's weights, the data and the settings it reads): a run with other settings
computes again only the stages they change, and another course BERT or other data all of them.
A stage stored by an older layout, without each model's result on each test example, is computed again,
alone: its first seed at the learning rate it chose on dev then (training is seeded), and the other seeds;
the stages that hold them are reused, and the expectations tested from them. Delete the folder to start
afresh otherwise.
"""

import argparse
import dataclasses
import json
import math
import random
import sys
from datetime import datetime, timezone
from pathlib import Path

import torch

from bertlab.bert import BertForSequenceClassification
from bertlab.data import imdb_documents
from bertlab.distillation import DistillationRecipe, compare_models, distill, init_student_from_teacher
from bertlab.finetuning import (
    FineTuningRecipe,
    choose_learning_rate,
    finetune,
    freeze_layers,
    predict,
    train_bag_of_words,
)
from bertlab.pretraining import course_bert_folder, course_bert_sha256
from bertlab.tokenization import BertTokenizer
from bertlab.utils import PRECISIONS, resolve_device, seed_everything
from benchmark_runs import (RESULTS, Stages, checks_table, computed_in, default_work_dir, device_or_exit,
                            expectation, holding, machine, mr_splits, paired_comparison, quietly, summary,
                            without_example_results)

# What the expectations' paired tests read from the stages: each model's result on each test example. A stage
# stored without them (an older layout) is computed again, alone; one that holds them is reused.
ONE_RUN, RUNS_BY_SEED = holding("test_correct"), holding("test_correct_by_seed")
COURSE_BERT_RESULTS = RESULTS / "course-bert.json"
SETTINGS = {
    "full": dict(seeds=[0, 1, 2], epochs=2, batch_size=32, max_length=64, min_steps=150,
                 learning_rates=[1e-4, 3e-4, 1e-3], head_only_learning_rates=[3e-4, 1e-3, 3e-3, 1e-2],
                 curve_sizes=[250, 1000, 4000], curve_learning_rates=[3e-5, 1e-4, 3e-4, 1e-3, 3e-3],
                 tfidf_c=[0.3, 1.0, 3.0, 10.0, 30.0, 100.0], alpha=0.5, temperature=2.0,
                 repeats=5, max_train_examples=None, teacher_labelled_sentences=8000),
    "quick": dict(seeds=[0], epochs=1, batch_size=32, max_length=64, min_steps=20,
                  learning_rates=[3e-4, 1e-3], head_only_learning_rates=[3e-3], curve_sizes=[250],
                  curve_learning_rates=[3e-4, 1e-3],
                  tfidf_c=[1.0], alpha=0.5, temperature=2.0, repeats=2, max_train_examples=500,
                  teacher_labelled_sentences=300),
}


@dataclasses.dataclass(frozen=True)
class ChosenRate:
    """The learning rate chosen on dev with the first seed, the first seed's model at that rate, and the dev
    accuracy of every rate tried."""

    model: torch.nn.Module
    learning_rate: float
    dev_accuracy_by_learning_rate: dict


def tfidf_logistic_regression(train, dev, test, c_grid) -> dict:
    """tf-idf of word unigrams and bigrams, logistic regression; C chosen on dev. scikit-learn: an
    implementation independent of bertlab."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression

    vectorizer = TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True)
    features = vectorizer.fit_transform([text for text, _ in train])
    labels = [label for _, label in train]

    def correct(model, examples) -> list[int]:
        predictions = model.predict(vectorizer.transform([text for text, _ in examples]))
        return [int(p == label) for p, (_, label) in zip(predictions, examples)]

    runs = {c: LogisticRegression(C=c, max_iter=2000).fit(features, labels) for c in c_grid}
    dev_accuracy = {c: sum(correct(model, dev)) / len(dev) for c, model in runs.items()}
    best = max(c_grid, key=lambda c: dev_accuracy[c])
    test_correct = correct(runs[best], test)
    return {"C": best, "dev_accuracy_by_C": dev_accuracy, "test_accuracy": sum(test_correct) / len(test),
            "test_correct": test_correct}


def unlabelled_sentences(imdb_root: Path, count: int) -> list[str]:
    """``count`` sentences of 5 to 40 words drawn (seed 0) from the unlabelled IMDB reviews (``train/unsup``):
    text in MR's domain, short like its snippets, without labels, for the teacher to label."""
    documents = imdb_documents(imdb_root, folders=("train/unsup",))
    sentences = [sentence for document in documents for sentence in document if 5 <= len(sentence.split()) <= 40]
    return random.Random(0).sample(sentences, min(count, len(sentences)))


def bag_of_words(train, test) -> dict:
    """bertlab's bag-of-words logistic regression: its test scores, and 1 or 0 for each test example."""
    model = train_bag_of_words(train, seed=0)
    predictions = model.predict([text for text, _ in test]).tolist()
    return {**model.evaluate(test), "test_correct": [int(p == label) for p, (_, label) in zip(predictions, test)]}


def run(args: argparse.Namespace) -> dict:
    settings = SETTINGS["quick" if args.quick else "full"]
    device = resolve_device(args.device)
    splits = mr_splits(args.data_root, settings["max_train_examples"])
    train, dev, test = splits.train, splits.dev, splits.test
    folder = course_bert_folder()
    weights_sha256 = course_bert_sha256()
    stages = Stages(args.work_dir, {"course_bert_sha256": weights_sha256, "precision": computed_in(device, args),
                                    "dataset": [splits.source, len(train), len(dev), len(test)]})
    training = {key: settings[key] for key in ("epochs", "batch_size", "max_length", "min_steps")}
    teacher_weights = args.work_dir / "teacher.pt"
    tokenizer = BertTokenizer(folder / "vocab.txt")

    def pretrained_classifier() -> BertForSequenceClassification:
        return quietly(BertForSequenceClassification.from_pretrained, folder)

    def random_classifier() -> BertForSequenceClassification:
        return BertForSequenceClassification(pretrained_classifier().config)  # seeded by the caller

    def test_correct(model) -> list[int]:
        """1 for each test example the model classifies right, 0 for the others (in the test split's order)."""
        predictions = predict(model, tokenizer, [text for text, _ in test], max_length=settings["max_length"],
                              precision=args.precision)
        return [int(prediction == label) for prediction, (_, label) in zip(predictions.tolist(), test)]

    def train_bert(make_model, examples, lr, seed, epochs, head_only=False):
        seed_everything(seed)
        model = make_model()
        if head_only:
            freeze_layers(model, 0)
        recipe = FineTuningRecipe(epochs=epochs, batch_size=settings["batch_size"], encoder_lr=lr,
                                  max_length=settings["max_length"], seed=seed)
        finetune(model, tokenizer, examples, recipe=recipe, device=device, progress=not args.no_progress,
                 precision=args.precision)
        return model

    def chosen_rate(train_with, learning_rates, earlier: dict | None) -> ChosenRate:
        """``choose_learning_rate`` over ``learning_rates`` (``train_with(lr)``: the first seed's model), or,
        where ``earlier``, the record of this stage in an older layout (without each test example's result),
        chose the rate already, the first seed's model at that rate alone: training is seeded, so it is the
        model chosen then, and the other rates need not be trained again."""
        if earlier is not None and "learning_rate" in earlier:
            print(f"learning rate {earlier['learning_rate']:g}, chosen on dev by the earlier run", flush=True)
            return ChosenRate(train_with(earlier["learning_rate"]), earlier["learning_rate"],
                              earlier["dev_accuracy_by_learning_rate"])
        tuned = choose_learning_rate(train_with, learning_rates, tokenizer, dev, max_length=settings["max_length"],
                                     precision=args.precision)
        return ChosenRate(tuned.model, tuned.learning_rate, tuned.dev_accuracy_by_learning_rate)

    def compare(name, make_model, examples, learning_rates, seeds, head_only=False, keep_first=None):
        """Learning rate chosen on dev with seed 0, then every seed at that rate; test accuracies. The
        first seed's weights are saved to ``keep_first`` when it is given."""
        epochs = max(settings["epochs"], math.ceil(settings["min_steps"] * settings["batch_size"] / len(examples)))
        stage = f"{name}, {len(examples)} examples, {epochs} epochs"
        depends_on = dict(learning_rates=learning_rates, seeds=seeds, **training)

        def compute() -> dict:
            tuned = chosen_rate(lambda lr: train_bert(make_model, examples, lr, seeds[0], epochs, head_only),
                                learning_rates, stages.stored(stage, **depends_on))
            if keep_first is not None:
                torch.save(tuned.model.state_dict(), keep_first)
            correct = [test_correct(tuned.model)] + [
                test_correct(train_bert(make_model, examples, tuned.learning_rate, seed, epochs, head_only))
                for seed in seeds[1:]]
            accuracies = [sum(run) / len(run) for run in correct]
            print(f"{name}: lr {tuned.learning_rate:g} (dev {tuned.dev_accuracy_by_learning_rate}); "
                  f"test {[round(a, 4) for a in accuracies]}")
            return {"learning_rate": tuned.learning_rate,
                    "dev_accuracy_by_learning_rate": tuned.dev_accuracy_by_learning_rate,
                    "epochs": epochs, "train_examples": len(examples), **summary(accuracies),
                    "test_correct_by_seed": correct}

        return stages.run(stage, compute, RUNS_BY_SEED, **depends_on)

    # ---------------------------------------------------------------------------- (a) MR
    classification = {
        "tfidf_logistic_regression": stages.run("tf-idf logistic regression", lambda: tfidf_logistic_regression(
            train, dev, test, settings["tfidf_c"]), ONE_RUN, tfidf_c=settings["tfidf_c"]),
        "bag_of_words": stages.run("bag of words", lambda: bag_of_words(train, test), ONE_RUN),
    }
    seeds, grid = settings["seeds"], settings["learning_rates"]
    classification["random_init"] = compare("BERT-mini, random init", random_classifier, train, grid, seeds)
    classification["course_bert_head_only"] = compare("course BERT, head only", pretrained_classifier, train,
                                                      settings["head_only_learning_rates"], seeds, head_only=True)
    classification["course_bert"] = compare("course BERT, all weights", pretrained_classifier, train, grid, seeds,
                                            keep_first=teacher_weights)

    # ---------------------------------------------------------------------------- (b) learning curve
    curve = {"sizes": [*settings["curve_sizes"], len(train)], "pretrained": [], "random_init": []}
    for size in settings["curve_sizes"]:
        for key, make_model in (("pretrained", pretrained_classifier), ("random_init", random_classifier)):
            curve[key].append(compare(f"curve: {key}", make_model, train[:size], settings["curve_learning_rates"],
                                      seeds))
    curve["pretrained"].append(classification["course_bert"])
    curve["random_init"].append(classification["random_init"])

    # ---------------------------------------------------------------------------- (c) distillation
    if not teacher_weights.is_file():
        raise FileNotFoundError(f"{teacher_weights}: the fine-tuned teacher's weights are missing; delete "
                                f"{stages.path} to run every stage again")
    teacher = pretrained_classifier()
    teacher.load_state_dict(torch.load(teacher_weights, map_location="cpu", weights_only=True))

    def student(lr: float, teacher_model=None, seed: int = 0, examples=None) -> BertForSequenceClassification:
        """The half-depth student: the course BERT's pretrained layers 0 and 2 and a new head, distilled
        from ``teacher_model``, or fine-tuned on the labels alone when it is None, on ``examples`` (default:
        the training split)."""
        examples = train if examples is None else examples
        seed_everything(seed)
        model = init_student_from_teacher(pretrained_classifier())
        recipe = DistillationRecipe(epochs=settings["epochs"], batch_size=settings["batch_size"], encoder_lr=lr,
                                    max_length=settings["max_length"], seed=seed, alpha=settings["alpha"],
                                    temperature=settings["temperature"])
        options = dict(device=device, progress=not args.no_progress, precision=args.precision)
        if teacher_model is None:  # the same recipe without the teacher's terms
            finetune(model, tokenizer, examples, recipe=recipe, **options)
        else:
            distill(teacher_model, model, tokenizer, examples, recipe=recipe, **options)
        return model

    def students(teacher_model=None, examples=None, earlier: dict | None = None
                 ) -> tuple[dict, BertForSequenceClassification]:
        """Students distilled from ``teacher_model`` (None: on the labels alone) on ``examples`` (default: the
        training split): the learning rate chosen on dev with the first seed (or by ``earlier``, the stage's
        record in an older layout: :func:`chosen_rate`), then every other seed at that rate; their record,
        and the first's model."""
        tuned = chosen_rate(lambda lr: student(lr, teacher_model, seeds[0], examples), grid, earlier)
        correct = [test_correct(tuned.model)] + [
            test_correct(student(tuned.learning_rate, teacher_model, seed, examples)) for seed in seeds[1:]]
        return {"learning_rate": tuned.learning_rate,
                "dev_accuracy_by_learning_rate": tuned.dev_accuracy_by_learning_rate,
                "test_accuracy": sum(correct[0]) / len(correct[0]), **summary([sum(run) / len(run) for run in correct]),
                "test_correct_by_seed": correct}, tuned.model

    def student_stage(name: str, teacher_model=None, examples=None, **depends_on) -> dict:
        """The stage ``name`` of :func:`students`, computed again where it is stored without every seed's
        result on each test example."""
        return stages.run(name, lambda: students(teacher_model, examples, stages.stored(name, **depends_on))[0],
                          RUNS_BY_SEED, **depends_on)

    distillation_stage = "distillation and the side-by-side comparison"

    def distillation_and_comparison() -> dict:
        distilled, first = students(teacher, earlier=stages.stored(distillation_stage, **distillation_identity))
        comparison = compare_models(teacher, first, tokenizer, test, batch_size=32,
                                    max_length=settings["max_length"], repeats=settings["repeats"],
                                    names=("teacher: course BERT, 4 layers", "distilled student, 2 layers"))
        return {**distilled, "teacher_test_correct": test_correct(teacher),
                "comparison": [vars(row) for row in comparison.rows],
                "comparison_markdown": comparison.to_markdown()}

    teacher_and_students = dict(learning_rates=grid, seeds=seeds, **training)  # the teacher: the stage above
    distillation_identity = dict(alpha=settings["alpha"], temperature=settings["temperature"],
                                 repeats=settings["repeats"], **teacher_and_students)
    distilled = stages.run(distillation_stage, distillation_and_comparison,
                           holding("test_correct_by_seed", "teacher_test_correct", "comparison"),
                           **distillation_identity)
    distillation = {
        "student_layers": [0, 2],
        "distilled": {key: value for key, value in distilled.items()
                      if key not in ("teacher_test_correct", "comparison", "comparison_markdown")},
        "teacher_test_correct": distilled["teacher_test_correct"],
        "labels_alone": student_stage("student on labels alone", learning_rates=grid, seeds=seeds, **training),
        "comparison": distilled["comparison"],
        "comparison_markdown": distilled["comparison_markdown"],
        "teacher_labelled_text": None,  # without --imdb-root
    }

    # ------------------------------------------------- (d) distillation on text the teacher labels
    if args.imdb_root is not None:
        sentences = unlabelled_sentences(args.imdb_root, settings["teacher_labelled_sentences"])
        labelled_by_teacher = list(zip(sentences, predict(teacher, tokenizer, sentences,
                                                          max_length=settings["max_length"],
                                                          precision=args.precision).tolist()))
        few = train[: settings["curve_sizes"][0]]
        text = dict(teacher_labelled_sentences=len(sentences), alpha=settings["alpha"],
                    temperature=settings["temperature"], **teacher_and_students)
        distillation["teacher_labelled_text"] = {
            "sentences": len(sentences), "source": "aclImdb/train/unsup, sentences of 5 to 40 words, seed 0",
            "labels": len(train), "few_labels": len(few),
            "distilled_with_text": student_stage("distilled student, labels and teacher-labelled text", teacher,
                                                 train + labelled_by_teacher, **text),
            "few_labels_alone": student_stage(f"student on {len(few)} labels alone", None, few, learning_rates=grid,
                                              seeds=seeds, **training),
            "few_labels_distilled": student_stage(f"distilled student, {len(few)} labels", teacher, few, **text),
            "few_labels_distilled_with_text": student_stage(
                f"distilled student, {len(few)} labels and teacher-labelled text", teacher, few + labelled_by_teacher,
                **text),
        }

    results = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(["python", *sys.argv]),
        "mode": "quick" if args.quick else "full",
        "settings": settings,
        "machine": {**machine(device), "precision": computed_in(device, args)},
        "dataset": {"name": splits.name, "source": splits.source, "train": len(train), "dev": len(dev),
                    "test": len(test)},
        "course_bert_sha256": weights_sha256,  # the chapters show this run only beside these weights
        "course_bert": (json.loads(COURSE_BERT_RESULTS.read_text())["held_out"] if COURSE_BERT_RESULTS.is_file()
                        else None),
        "classification": classification,
        "learning_curve": curve,
        "distillation": distillation,
        "seconds": stages.seconds,
    }
    results["checks"] = check_expectations(results)
    return results


def check_expectations(results: dict) -> list[dict]:
    """The expectations of the course's BERT, each with the measured numbers, whether the scores meet it,
    and, where both sides kept their result on each test example, its paired test
    (:func:`benchmark_runs.paired_comparison`: the bootstrap interval of the difference over the test
    examples, and for two classifiers' accuracies McNemar's test): it holds only when significant."""
    checks = []
    held_out = results["course_bert"]
    if held_out is not None:
        model, unigram = held_out["model"], held_out["unigram"]
        once = "measured once, on the held-out reviews"
        checks.append(expectation("held-out masked-token accuracy >= 42%", f"{100 * model['accuracy']:.1f}%",
                                  model["accuracy"] >= 0.42, None, once))
        checks.append(expectation(
            "held-out MLM loss >= 1.5 nats below the unigram predictor",
            f"{model['loss']:.3f} vs {unigram['loss']:.3f} nats ({unigram['loss'] - model['loss']:.2f} below)",
            unigram["loss"] - model["loss"] >= 1.5, None, once))

    def above(name: str, a: dict, b: dict, margin: float, measured: str) -> dict:
        """``a`` more than ``margin`` points above ``b``: records of one seed (``test_accuracy``,
        ``test_correct``) or of several (``mean``, ``test_correct_by_seed``)."""
        met = 100 * (accuracy(a) - accuracy(b)) > margin
        runs_a, runs_b = (record.get("test_correct_by_seed") or [record.get("test_correct")] for record in (a, b))
        testable = None not in (runs_a[0], runs_b[0])  # a record of an older layout has no per-example results
        return expectation(name, measured, met,
                           paired_comparison(runs_a, runs_b, margin=margin, accuracy=True) if testable else None)

    classification = results["classification"]
    pretrained, random_init = classification["course_bert"], classification["random_init"]
    tfidf = classification["tfidf_logistic_regression"]
    checks.append(above("fine-tuned course BERT >= 3 points above the same BERT from random weights",
                        pretrained, random_init, 3.0,
                        f"{100 * pretrained['mean']:.1f}% vs {100 * random_init['mean']:.1f}% (means over "
                        f"{len(pretrained['by_seed'])} seeds)"))
    checks.append(above("fine-tuned course BERT above a tf-idf uni+bigram logistic regression", pretrained, tfidf, 0.0,
                        f"{100 * pretrained['mean']:.1f}% vs {100 * tfidf['test_accuracy']:.1f}%"))
    curve = results["learning_curve"]
    for index, size in enumerate(curve["sizes"][:2]):  # 250 and 1,000 labels
        bert, scratch = curve["pretrained"][index], curve["random_init"][index]
        ahead = bert["mean"] - scratch["mean"]
        checks.append(above(f"with {size} labels, the course BERT >= 5 points above random weights", bert, scratch, 5.0,
                            f"{100 * bert['mean']:.1f}% vs {100 * scratch['mean']:.1f}% ({100 * ahead:+.1f})"))
    head_only = classification["course_bert_head_only"]
    runs = head_only.get("test_correct_by_seed")
    checks.append(expectation(  # against a constant: a one-sample bootstrap interval of the accuracy
        "frozen encoder with a trained head >= 70%", f"{100 * head_only['mean']:.1f}%", head_only["mean"] >= 0.70,
        None if runs is None else paired_comparison(runs, [[0.70] * len(runs[0])])))
    distillation = results["distillation"]
    teacher, student = distillation["comparison"]
    student_runs = distillation["distilled"].get("test_correct_by_seed")
    teacher_correct, student_correct = distillation.get("teacher_test_correct"), student_runs and student_runs[0]
    checks.append(expectation(  # A_i = the student's result, B_i = 0.95 x the teacher's: D = acc_s - 0.95 acc_t
        "half-depth student keeps >= 95% of the teacher's accuracy",
        f"{100 * student['accuracy']:.1f}% vs {100 * teacher['accuracy']:.1f}% = {student['percent_of_teacher']:.1f}%",
        student["percent_of_teacher"] >= 95,
        None if None in (teacher_correct, student_correct) else
        paired_comparison([student_correct], [[0.95 * correct for correct in teacher_correct]])))
    labels_alone = distillation["labels_alone"]
    distilled = distillation["distilled"]
    checks.append(above("the distilled student above the same student on the labels alone",
                        distilled, labels_alone, 0.0,
                        f"{percent(distilled)} vs {percent(labels_alone)} (over {len(distilled['by_seed'])} seeds)"))
    text = distillation.get("teacher_labelled_text")
    if text is not None:  # where distillation is known to pay: text that only the teacher labels
        for name, a, b in (
                ("with teacher-labelled text, the distilled student above the labels-only student "
                 f"({text['labels']} labels)", text["distilled_with_text"], labels_alone),
                ("with teacher-labelled text, the distilled student above the labels-only student "
                 f"({text['few_labels']} labels)", text["few_labels_distilled_with_text"], text["few_labels_alone"])):
            checks.append(above(name, a, b, 0.0, f"{percent(a)} vs {percent(b)} (over {len(a['by_seed'])} seeds)"))
    checks.append(expectation("half-depth student runs >= 1.6x faster (inference)", f"{student['speedup']:.2f}x",
                              student["speedup"] >= 1.6, None, "a timing, not a score on test examples"))
    return checks


def accuracy(record: dict) -> float:
    """A record's test accuracy: the mean over its seeds, or its one run's."""
    return record["mean"] if "mean" in record else record["test_accuracy"]


def percent(summary_record: dict) -> str:
    spread = f" ± {100 * summary_record['std']:.1f}" if len(summary_record["by_seed"]) > 1 else ""
    return f"{100 * summary_record['mean']:.1f}%{spread}"


def markdown(results: dict) -> str:
    classification, dataset = results["classification"], results["dataset"]
    seeds = len(results["settings"]["seeds"])
    lines = [f"**MR test accuracy** ({dataset['test']} test examples, {dataset['train']} training examples; BERTs: "
             f"learning rate chosen on dev, mean ± standard deviation over {seeds} seed(s))", "",
             "| model | learning rate (or C) | test accuracy |", "|---|---:|---:|",
             f"| tf-idf uni+bigram logistic regression (scikit-learn) | C = "
             f"{classification['tfidf_logistic_regression']['C']:g} | "
             f"{100 * classification['tfidf_logistic_regression']['test_accuracy']:.1f}% |",
             "| bag-of-words logistic regression (bertlab) | - | "
             f"{100 * classification['bag_of_words']['accuracy']:.1f}% |"]
    for key, name in (("random_init", "BERT-mini from random weights"),
                      ("course_bert_head_only", "course BERT, head only"),
                      ("course_bert", "course BERT, all weights")):
        record = classification[key]
        lines.append(f"| {name} | {record['learning_rate']:g} | {percent(record)} |")
    curve = results["learning_curve"]
    lines += ["", f"**Learning curve** (test accuracy; learning rate chosen on dev for each size; mean ± standard "
              f"deviation over {seeds} seed(s))", "",
              "| labelled examples | " + " | ".join(map(str, curve["sizes"])) + " |",
              "|---|" + "---:|" * len(curve["sizes"])]
    for key, name in (("pretrained", "course BERT"), ("random_init", "random init")):
        lines.append(f"| {name} | " + " | ".join(percent(record) for record in curve[key]) + " |")
    distillation = results["distillation"]
    lines += ["", "**Distillation** (test split; students: 2 layers, from the course BERT's layers 0 and 2)", "",
              distillation["comparison_markdown"], "",
              f"The same students, over {seeds} seed(s): distilled {percent(distillation['distilled'])}, "
              f"trained on the labels alone {percent(distillation['labels_alone'])} (learning rate "
              f"{distillation['labels_alone']['learning_rate']:g}).", *teacher_labelled_lines(distillation), "",
              *checks_table(results["checks"])]
    seconds = ", ".join(f"{name} {value:.0f} s" for name, value in results["seconds"].items())
    lines += ["", f"Wall-clock time per stage: {seconds}."]
    return "\n".join(lines)


def teacher_labelled_lines(distillation: dict) -> list[str]:
    """Markdown lines of the students trained with the text the teacher labelled (none without --imdb-root)."""
    text = distillation.get("teacher_labelled_text")
    if text is None:
        return ["", "Distillation on teacher-labelled text: not run (pass --imdb-root)."]
    return ["", f"**Distillation on text the teacher labels** ({text['sentences']} sentences of unlabelled IMDB "
            f"reviews labelled by the teacher; students over the seeds)", "",
            "| labels | labels alone | distilled | distilled, with the teacher-labelled text |",
            "|---:|---:|---:|---:|",
            f"| {text['labels']} | {percent(distillation['labels_alone'])} | {percent(distillation['distilled'])} | "
            f"{percent(text['distilled_with_text'])} |",
            f"| {text['few_labels']} | {percent(text['few_labels_alone'])} | {percent(text['few_labels_distilled'])} | "
            f"{percent(text['few_labels_distilled_with_text'])} |"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-root", type=Path, help="folder holding rt-polarity/ (default: $BERTLAB_DATA)")
    parser.add_argument("--imdb-root", type=Path,
                        help="folder holding aclImdb/ (extracted outside the repository): its unlabelled reviews give "
                        "the text the teacher labels for distillation; without it that part is not run")
    parser.add_argument("--quick", action="store_true", help="a small check of the script: 500 examples, 1 seed")
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    parser.add_argument("--threads", type=int, help="CPU threads for torch (default: torch's choice)")
    parser.add_argument("--precision", default="auto", choices=PRECISIONS,
                        help="of every forward pass (bertlab.utils.autocast; default: auto, bfloat16 on a CPU that "
                        "computes it natively)")
    parser.add_argument("--out", type=Path, help="JSON file (default: benchmarks/results/bert-DEVICE[-quick].json)")
    parser.add_argument("--work-dir", type=Path,
                        help="the finished stages and the teacher's weights, for resuming (default: "
                             "benchmarks/stages/bert-results-DEVICE[-quick])")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    args = parser.parse_args()
    run_name = f"{device_or_exit(parser, args.device).type}{'-quick' if args.quick else ''}"  # cpu, cuda-quick, ...
    if args.work_dir is None:
        args.work_dir = default_work_dir(f"bert-results-{run_name}")
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    try:
        results = without_example_results(run(args))  # each model's result on each example stays in the stages
    except (ValueError, FileNotFoundError) as error:  # no MR, no course model, --device cuda without a GPU
        parser.exit(1, f"error: {error}\n")
    table = markdown(results)
    print("\n" + table)
    out = args.out or RESULTS / f"bert-{run_name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    out.with_suffix(".md").write_text(table + "\n")
    print(f"\nwrote {out} and {out.with_suffix('.md')}")


if __name__ == "__main__":
    main()
