"""Checks of chapter 07 (pretraining), called by the hidden tests of ``chapters/07_pretraining``.

Three exercises:

- ``mask_tokens(input_ids, *, mask_token_id, vocab_size, special_tokens_mask=None, mlm_probability=0.15,
  mask_replace_prob=0.8, random_replace_prob=0.1, generator=None)``, BERT's masking recipe. Its output
  is random, so it is not compared with the draws of :func:`bertlab.pretraining.mask_tokens`: the check
  verifies the rules that every draw obeys (special tokens never chosen, labels -100 exactly where
  nothing is predicted and the original token elsewhere, only chosen tokens changed, the input not
  modified, the same output for the same generator) and the proportions over large seeded inputs: the
  share of chosen tokens and the [MASK] / random / unchanged split of the chosen ones must each lie
  within 6 binomial standard deviations of its expected value, and the random replacements must be
  uniform over the vocabulary (their mean within 6 standard deviations of (V - 1) / 2).
- ``make_nsp_examples(documents, seed=0)``, next sentence prediction pairs: one example per two
  consecutive sentences of a document, in document order; IsNext (label 0) pairs are consecutive
  sentences of one document, NotNext (label 1) second sentences come from another document, chosen at
  random; about half of each (within 6 standard deviations of 1/2); the same seed gives the same pairs.
- ``mlm_loss(logits, labels)``, the masked-language-model loss, against PyTorch's own
  ``F.cross_entropy(..., ignore_index=-100)`` (an independent implementation: ``bertlab`` computes it
  inside ``BertForPreTraining``), which the student may not call.

``forbid=False`` lifts the "implement this yourself" rule (the tests use it on the reference).
"""

import math
import random
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F

from autograder.checks.framework import (
    Case,
    CheckFailed,
    Exercise,
    Mistake,
    check_functions,
    fail,
    generator_for,
    random_integer,
    run_student,
)
from bertlab import bert as bert_reference
from bertlab import pretraining as reference

IGNORE_INDEX = reference.IGNORE_INDEX  # -100
IS_NEXT, NOT_NEXT = reference.IS_NEXT, reference.NOT_NEXT  # 0, 1
STANDARD_DEVIATIONS = 6  # a proportion must lie within 6 binomial standard deviations of its expectation


def _tolerance(share: float, count: int) -> float:
    """6 standard deviations of the observed share of ``count`` draws with probability ``share``."""
    return STANDARD_DEVIATIONS * math.sqrt(share * (1 - share) / max(count, 1)) + 1e-9


# --------------------------------------------------------------------------------------------------
# mask_tokens
# --------------------------------------------------------------------------------------------------

MASK_TOKENS_FORBIDDEN = (
    reference.mask_tokens,
    reference.PretrainingDataset.mask,
    reference.PretrainingDataset.collate,
    "transformers.data.data_collator.DataCollatorForLanguageModeling.torch_mask_tokens",
    "transformers.data.data_collator.DataCollatorForLanguageModeling.numpy_mask_tokens",
    "transformers.data.data_collator.DataCollatorForLanguageModeling.torch_call",
)

SPECIAL_HINT = (
    "special tokens ([CLS], [SEP], [PAD]: the positions where special_tokens_mask is True) must never be "
    "chosen: leave them unchanged, with label -100, by removing them from the chosen positions "
    "(chosen & ~special_tokens_mask)."
)
LABELS_EVERYWHERE_HINT = (
    "labels must be -100 wherever nothing is predicted (tokens that were not chosen, and special tokens); "
    "only the chosen positions hold the original token. Start from input_ids and fill -100 where not chosen."
)
CORRUPTED_LABELS_HINT = (
    "the labels hold the ORIGINAL tokens (from input_ids), the ones the model must recover, not the "
    "corrupted input ([MASK] or the random token): compute the labels from input_ids, not from your output."
)
INVERTED_LABELS_HINT = (
    "-100 marks the positions that are NOT predicted: a chosen position (the ones you replace) gets the "
    "original token as its label, every other position -100. Your labels look inverted."
)
UNCHOSEN_CHANGED_HINT = (
    "only chosen positions (labels != -100) may change; every other token of the input must come back "
    "as it was."
)
ALL_TOKENS_HINT = (
    "choose each token that may be predicted with probability mlm_probability: the 15% are 15% of the "
    "non-special tokens, drawn independently per position, not 15% of all positions (padding included) "
    "moved onto the non-special ones."
)
CHOSEN_SHARE_HINT = (
    "choose each non-special position independently with probability mlm_probability "
    "(torch.rand(shape, generator=generator) < mlm_probability)."
)
ARGUMENTS_HINT = (
    "use the arguments mlm_probability, mask_replace_prob and random_replace_prob (and mask_token_id, "
    "vocab_size) rather than BERT's numbers written into the code: the test passes other values."
)
MIXED_UP_HINT = (
    "80/10/10 is mixed up: of the chosen tokens, mask_replace_prob (80%) become [MASK], "
    "random_replace_prob (10%) become a random token and the rest (10%) stay unchanged."
)
CONDITIONAL_HINT = (
    "random_replace_prob is a share of ALL chosen tokens (10% of them), not of those left after [MASK]: "
    "with one uniform draw u per position, [MASK] where u < mask_replace_prob, a random token where "
    "mask_replace_prob <= u < mask_replace_prob + random_replace_prob."
)
OVERLAP_HINT = (
    "decide between [MASK], a random token and keeping the token with ONE uniform draw per chosen position: "
    "with two independent draws, the random replacement overwrites some of the [MASK]s (80% x 90% = 72% "
    "[MASK] instead of 80%)."
)
MASK_ID_HINT = "a chosen token that is masked becomes mask_token_id (the argument), not another id."
NO_RANDOM_HINT = (
    "a share random_replace_prob of the chosen tokens must be replaced by a random token of the "
    "vocabulary; your chosen tokens are only [MASK]ed or kept."
)
SPLIT_HINT = (
    "of the chosen tokens, a share mask_replace_prob must become [MASK], a share random_replace_prob a "
    "random token, and the rest stay unchanged; draw this for every chosen position independently."
)
VOCABULARY_RANGE_HINT = "random tokens are ids of the vocabulary: draw them from [0, vocab_size)."
UNIFORM_HINT = (
    "draw the random tokens uniformly from the whole vocabulary, torch.randint(vocab_size, shape, "
    "generator=generator), not from the tokens of the batch or a part of the vocabulary."
)
GENERATOR_HINT = (
    "pass generator=generator to every random draw (torch.rand, torch.randint, torch.bernoulli), so that "
    "the same generator state gives the same masks; use no other source of randomness."
)


@dataclass(frozen=True)
class MaskingCase:
    """A call of mask_tokens and what to measure on its output."""

    description: str
    input_ids: torch.Tensor
    kwargs: dict
    statistics: bool = True  # measure the proportions (seeded large inputs); False: only the rules
    generator_seed: int | None = None  # the seed of the generator passed (with statistics); None: generator=None

    def case(self, generator_seed: int | None) -> Case:
        kwargs = dict(self.kwargs)
        if generator_seed is not None:
            kwargs["generator"] = torch.Generator().manual_seed(generator_seed)
        return Case(self.description, (self.input_ids,), kwargs)


def _framed_batch(g: torch.Generator, rows: int, length: int, low: int, high: int, *, cls_id: int, sep_id: int,
                  pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(rows, length) ids in [low, high), framed as [CLS] ... [SEP] and padded at random lengths between a
    quarter of ``length`` and ``length``; returns (input_ids, special_tokens_mask)."""
    input_ids = torch.randint(low, high, (rows, length), generator=g)
    lengths = torch.randint(length // 4, length + 1, (rows,), generator=g)
    positions = torch.arange(length)
    input_ids[:, 0] = cls_id
    input_ids[positions == (lengths[:, None] - 1)] = sep_id
    input_ids[positions >= lengths[:, None]] = pad_id
    return input_ids, torch.isin(input_ids, torch.tensor([cls_id, sep_id, pad_id]))


def mask_tokens_cases() -> list[MaskingCase]:
    g = generator_for("mask_tokens")
    padded, padded_special = _framed_batch(g, 256, 256, 5, 300, cls_id=2, sep_id=3, pad_id=0)
    bert_ids = torch.randint(1000, 30522, (6000,), generator=g)
    bert_special = torch.rand(6000, generator=g) < 0.1
    bert_ids[bert_special] = 102  # [SEP] of BERT's uncased vocabulary at random places
    small_vocab = torch.randint(0, 59, (128, 128), generator=g)  # ids of a 60-token vocabulary but 59 ([MASK])
    short, short_special = _framed_batch(g, 4, 12, 5, 50, cls_id=2, sep_id=3, pad_id=0)
    every, every_special = _framed_batch(g, 8, 20, 5, 100, cls_id=2, sep_id=3, pad_id=0)
    cases = [
        MaskingCase("a batch (256, 256) of ids in [5, 300), framed by [CLS] = 2 ... [SEP] = 3 and padded with "
                    "[PAD] = 0 (about 37% padding), vocab_size=1000, mask_token_id=4, BERT's probabilities",
                    padded, dict(mask_token_id=4, vocab_size=1000, special_tokens_mask=padded_special)),
        MaskingCase("other probabilities: mlm_probability=0.4, mask_replace_prob=0.5, random_replace_prob=0.3, "
                    "on a (128, 128) batch of a 60-token vocabulary, mask_token_id=59, no special tokens",
                    small_vocab, dict(mask_token_id=59, vocab_size=60, mlm_probability=0.4, mask_replace_prob=0.5,
                                      random_replace_prob=0.3)),
        MaskingCase("one sequence of 6000 ids (1-D), BERT's vocabulary (vocab_size=30522, mask_token_id=103), "
                    "10% of the positions special", bert_ids,
                    dict(mask_token_id=103, vocab_size=30522, special_tokens_mask=bert_special)),
        MaskingCase("mlm_probability=1.0, mask_replace_prob=1.0, random_replace_prob=0.0: every non-special "
                    "token becomes [MASK]", every,
                    dict(mask_token_id=4, vocab_size=100, special_tokens_mask=every_special, mlm_probability=1.0,
                         mask_replace_prob=1.0, random_replace_prob=0.0)),
        MaskingCase("mlm_probability=1.0, mask_replace_prob=0.0, random_replace_prob=0.0: every non-special token "
                    "is chosen and kept", every,
                    dict(mask_token_id=4, vocab_size=100, special_tokens_mask=every_special, mlm_probability=1.0,
                         mask_replace_prob=0.0, random_replace_prob=0.0)),
        MaskingCase("mlm_probability=0.0: nothing is chosen", every,
                    dict(mask_token_id=4, vocab_size=100, special_tokens_mask=every_special, mlm_probability=0.0)),
        MaskingCase("a small batch (4, 12) with generator=None (the global random generator)", short,
                    dict(mask_token_id=4, vocab_size=50, special_tokens_mask=short_special), statistics=False),
    ]
    return [replace(case, generator_seed=1000 + number) if case.statistics else case
            for number, case in enumerate(cases, start=1)]


def _as_pair(output, input_ids: torch.Tensor) -> str | None:
    """Why ``output`` is not a pair of tensors shaped like the input, or None."""
    if not isinstance(output, (tuple, list)) or len(output) != 2:
        what = type(output).__name__ + (f" of length {len(output)}" if isinstance(output, (tuple, list)) else "")
        return f"you returned a {what}; return a tuple (masked_input_ids, labels)."
    for name, tensor in zip(("masked_input_ids", "labels"), output):
        if not isinstance(tensor, torch.Tensor):
            return f"{name}: you returned a {type(tensor).__name__}, expected a torch.Tensor."
        if tensor.shape != input_ids.shape:
            return (f"{name}: you returned shape {tuple(tensor.shape)}, expected the input's shape "
                    f"{tuple(input_ids.shape)}.")
        if tensor.dtype != input_ids.dtype:
            return f"{name}: you returned dtype {tensor.dtype}, expected the input's dtype {input_ids.dtype}."
    return None


def _expected_split(kwargs: dict) -> dict[str, float]:
    """Expected shares among the chosen tokens of an observed [MASK], an unchanged token and another token.

    A random replacement is [MASK] or the original token itself with probability 1/V each (the inputs of
    the cases never contain [MASK])."""
    vocab_size = kwargs["vocab_size"]
    mask_share = kwargs.get("mask_replace_prob", 0.8)
    random_share = kwargs.get("random_replace_prob", 0.1)
    return {"[MASK]": mask_share + random_share / vocab_size,
            "unchanged": 1 - mask_share - random_share + random_share / vocab_size,
            "random": random_share * (1 - 2 / vocab_size)}


def _split_hint(observed: dict[str, float], expected: dict[str, float], kwargs: dict, count: int) -> str:
    """The hint for chosen tokens split in the wrong proportions."""
    mask_share = kwargs.get("mask_replace_prob", 0.8)
    random_share = kwargs.get("random_replace_prob", 0.1)

    def near(value: float, target: float) -> bool:
        return abs(value - target) <= _tolerance(min(max(target, 0.01), 0.99), count) + 0.01

    if near(observed["[MASK]"], random_share) and near(observed["random"], mask_share) and mask_share != random_share:
        return MIXED_UP_HINT
    if observed["random"] < 0.05 * expected["random"]:
        return NO_RANDOM_HINT
    if near(observed["random"], random_share * (1 - mask_share)) and random_share > 0:
        return CONDITIONAL_HINT
    if near(observed["[MASK]"], mask_share * (1 - random_share)) and near(observed["random"], random_share):
        return OVERLAP_HINT
    if (mask_share, random_share) != (0.8, 0.1) and near(observed["[MASK]"], 0.8) and near(observed["random"], 0.1):
        return ARGUMENTS_HINT
    return SPLIT_HINT


def _check_masking_rules(input_ids, special, masked, labels, kwargs, context) -> None:
    """The rules every single draw obeys; raise CheckFailed with the hint of the first one broken."""
    check = "mask_tokens"
    labelled = labels != IGNORE_INDEX
    changed = masked != input_ids
    special_or_none = special if special is not None else torch.zeros_like(labelled)
    eligible = ~special_or_none
    if kwargs.get("mlm_probability", 0.15) < 1 and eligible.sum() >= 20 and (labelled | special_or_none).all():
        fail(check, context, "labels: every non-special position has a label; none of them is -100.",
             LABELS_EVERYWHERE_HINT)
    wrong_labels = labelled & (labels != input_ids)
    if wrong_labels.any():
        index = tuple(torch.nonzero(wrong_labels)[0].tolist())
        problem = (f"labels: at index {index} the label is {labels[index].item()}, but the input token there is "
                   f"{input_ids[index].item()}; a label is -100 or the original token.")
        from_output = bool((labels[labelled] == masked[labelled]).all())
        fail(check, context, problem, CORRUPTED_LABELS_HINT if from_output else None)
    changed_unlabelled = changed & ~labelled
    if changed_unlabelled.any():
        index = tuple(torch.nonzero(changed_unlabelled)[0].tolist())
        problem = (f"masked_input_ids: the token at index {index} changed from {input_ids[index].item()} to "
                   f"{masked[index].item()}, but its label is -100 (not predicted).")
        if bool(special_or_none[changed_unlabelled].all()):
            hint = SPECIAL_HINT
        elif bool((labelled & changed).sum() < 0.1 * (changed.sum() + 1)) and bool(labelled.any()):
            hint = INVERTED_LABELS_HINT
        else:
            hint = UNCHOSEN_CHANGED_HINT
        fail(check, context, problem, hint)
    if special is not None and (labelled & special).any():
        index = tuple(torch.nonzero(labelled & special)[0].tolist())
        fail(check, context, f"the special token at index {index} (id {input_ids[index].item()}) was chosen: its "
             f"label is {labels[index].item()} instead of -100.", SPECIAL_HINT)
    outside = masked[changed & ((masked < 0) | (masked >= kwargs["vocab_size"]))]
    if len(outside):
        fail(check, context, f"masked_input_ids holds the id {outside[0].item()}, outside the vocabulary "
             f"[0, {kwargs['vocab_size']}).", VOCABULARY_RANGE_HINT)


def _check_masking_statistics(input_ids, special, masked, labels, kwargs, context) -> None:
    """The proportions, within 6 binomial standard deviations of their expected values."""
    check = "mask_tokens"
    eligible = ~special if special is not None else torch.ones_like(input_ids, dtype=torch.bool)
    labelled = labels != IGNORE_INDEX
    probability = kwargs.get("mlm_probability", 0.15)
    count = int(eligible.sum())
    share = int(labelled.sum()) / count
    tolerance = _tolerance(probability, count)
    if abs(share - probability) > tolerance:
        problem = (f"{share:.4f} of the {count} non-special tokens were chosen, expected mlm_probability = "
                   f"{probability} (allowed: +-{tolerance:.4f}, {STANDARD_DEVIATIONS} standard deviations).")
        of_all = probability * input_ids.numel() / count
        if special is not None and abs(share - of_all) < abs(share - probability) and of_all != probability:
            hint = ALL_TOKENS_HINT
        elif probability != 0.15 and abs(share - 0.15) <= _tolerance(0.15, count):
            hint = ARGUMENTS_HINT
        else:
            hint = CHOSEN_SHARE_HINT
        fail(check, context, problem, hint)

    chosen = int(labelled.sum())
    if chosen == 0:
        return
    original, corrupted = input_ids[labelled], masked[labelled]
    observed = {"[MASK]": (corrupted == kwargs["mask_token_id"]).float().mean().item(),
                "unchanged": (corrupted == original).float().mean().item()}
    observed["random"] = 1 - observed["[MASK]"] - observed["unchanged"]
    replacements = corrupted[corrupted != original]
    if len(replacements) >= 100:
        most_common = torch.mode(replacements).values.item()
        share_of_most_common = (replacements == most_common).float().mean().item()
        if most_common != kwargs["mask_token_id"] and share_of_most_common > 0.5:
            fail(check, context, f"{share_of_most_common:.0%} of the replaced tokens became id {most_common}, but "
                 f"mask_token_id is {kwargs['mask_token_id']}.", MASK_ID_HINT)
    expected = _expected_split(kwargs)
    for name, value in observed.items():
        tolerance = _tolerance(expected[name], chosen)
        if abs(value - expected[name]) > tolerance:
            shares = ", ".join(f"{key} {observed[key]:.3f} (expected {expected[key]:.3f})" for key in observed)
            problem = (f"of the {chosen} chosen tokens: {shares}; allowed: +-{tolerance:.3f} for {name} "
                       f"({STANDARD_DEVIATIONS} standard deviations).")
            fail(check, context, problem, _split_hint(observed, expected, kwargs, chosen))

    replaced = corrupted[(corrupted != kwargs["mask_token_id"]) & (corrupted != original)].double()
    if len(replaced) >= 100:
        vocab_size = kwargs["vocab_size"]
        mean, expected_mean = replaced.mean().item(), (vocab_size - 1) / 2
        tolerance = STANDARD_DEVIATIONS * math.sqrt((vocab_size**2 - 1) / 12 / len(replaced))
        if abs(mean - expected_mean) > tolerance:
            problem = (f"the {len(replaced)} random replacements have mean id {mean:.1f}; uniform draws from "
                       f"[0, {vocab_size}) have mean {expected_mean:.1f} (allowed: +-{tolerance:.1f}).")
            fail(check, context, problem, UNIFORM_HINT)


def mask_tokens_determinism_case() -> MaskingCase:
    """The batch on which the same generator seed must give the same masks, and other seeds other ones."""
    input_ids, special = _framed_batch(generator_for("mask_tokens determinism"), 8, 20, 5, 100, cls_id=2, sep_id=3,
                                       pad_id=0)
    return MaskingCase("a batch (8, 20) with BERT's probabilities", input_ids,
                       dict(mask_token_id=4, vocab_size=100, special_tokens_mask=special))


def _check_generator(exercise: Exercise, student_fn, forbidden) -> str:
    """The test after the cases: the same generator state gives the same output; other seeds give other ones."""
    case = mask_tokens_determinism_case()

    def draw(seed: int):
        return run_student(student_fn, case.case(seed), check="mask_tokens", forbidden=forbidden,
                           parameter_names=["input_ids"])

    context = f"the determinism test case ({case.description}, called twice with torch.Generator().manual_seed(7))"
    first, second = draw(7), draw(7)
    if not all(torch.equal(a, b) for a, b in zip(first, second)):
        fail("mask_tokens", context, "the two calls returned different outputs.", GENERATOR_HINT)
    if all(torch.equal(a, b) for a, b in zip(first, draw(8))) and all(
            torch.equal(a, b) for a, b in zip(first, draw(9))):
        fail("mask_tokens", f"the determinism test case ({case.description}, with generators seeded 7, 8 and 9)",
             "the three calls returned the same output: the masks must be random.", GENERATOR_HINT)
    return "; seeded draws repeat"


def _compare_masking(exercise: Exercise, student_fn, masking_case: MaskingCase, context: str, forbidden) -> None:
    """One case: the output must follow BERT's masking rules and, on the seeded cases, its proportions."""
    output = run_student(student_fn, masking_case.case(masking_case.generator_seed), check=exercise.name,
                         forbidden=forbidden, parameter_names=exercise.parameter_names, context=context)
    input_ids = masking_case.input_ids
    problem = _as_pair(output, input_ids)
    if problem:
        fail(exercise.name, context, problem)
    masked, labels = output
    special = masking_case.kwargs.get("special_tokens_mask")
    _check_masking_rules(input_ids, special, masked, labels, masking_case.kwargs, context)
    if masking_case.statistics:
        _check_masking_statistics(input_ids, special, masked, labels, masking_case.kwargs, context)


MASK_TOKENS = Exercise("mask_tokens", reference.mask_tokens, mask_tokens_cases, forbidden=MASK_TOKENS_FORBIDDEN,
                       parameter_names=("input_ids",), compare=_compare_masking, then=(_check_generator,),
                       agreement="follow BERT's masking rules and proportions",
                       summary="""
                       Check ``mask_tokens`` by the rules of BERT's masking and by its proportions.

                       Cases: a padded (256, 256) batch with [CLS]/[SEP]/[PAD] and BERT's probabilities; other
                       probabilities (0.4, 0.5, 0.3) on a 60-token vocabulary with [MASK] = 59 and no special tokens; a
                       1-D sequence of 6000 ids of BERT's 30,522-token vocabulary; the deterministic corners
                       (mlm_probability 1 with only [MASK], 1 with only unchanged tokens, 0); generator=None. Rules
                       (every case): a tuple (masked_input_ids, labels) shaped and typed like the input; labels -100 or
                       the original token; only labelled tokens changed; special tokens never chosen; the input not
                       modified; random ids inside [0, vocab_size). Statistics (seeded cases): the share of chosen
                       non-special tokens and the [MASK] / unchanged / random shares of the chosen ones within 6
                       binomial standard deviations (+-0.011 for the 15% and +-0.031 for the 80% of the first case), the
                       mean random id within 6 standard deviations of (V - 1) / 2. Then: the same generator seed gives
                       the same output, other seeds another one. Forbidden: the reference and Hugging Face's
                       DataCollatorForLanguageModeling masking.
                       """)


# --------------------------------------------------------------------------------------------------
# make_nsp_examples
# --------------------------------------------------------------------------------------------------

MAKE_NSP_EXAMPLES_FORBIDDEN = (
    reference.make_nsp_examples,
    reference.PretrainingDataset._encode_pairs,
)

COUNT_HINT = (
    "make ONE example for every two consecutive sentences (s_i, s_i+1) of a document (a document of n "
    "sentences gives n - 1): heads (s_i, s_i+1, 0), tails (s_i, random sentence of another document, 1); "
    "never pair the last sentence of a document with the next document."
)
BOTH_HINT = ("flip one coin per pair of consecutive sentences and make one example, not both an IsNext and a "
             "NotNext one.")
ORDER_HINT = (
    "keep the examples in document order: example k has as its first sentence the k-th sentence s_i that "
    "has a next sentence (documents in order, sentences in order); do not shuffle the examples."
)
SWAPPED_HINT = "label 0 means IsNext (B is the sentence that follows A), label 1 NotNext: your labels are swapped."
IS_NEXT_HINT = "an IsNext example (label 0) pairs a sentence with the sentence right after it in the same document."
SAME_DOCUMENT_HINT = (
    "the NotNext sentence must come from ANOTHER document: a sentence of the same document is on the same "
    "topic (it may even be the true next sentence). Choose among the other documents only."
)
COIN_HINT = "flip a fair coin for every pair: IsNext with probability 1/2, NotNext with probability 1/2."
RANDOM_DOCUMENT_HINT = (
    "choose the other document at random, uniformly among the other (non-empty) documents, and a random "
    "sentence of it: rng.randrange / rng.choice."
)
SEED_HINT = (
    "draw every random number from one random.Random(seed) made inside the function: the same seed must "
    "give the same examples, whatever the state of the global random generators."
)
EMPTY_HINT = "skip empty documents: they have no sentence to pair nor to draw."


def _documents(g: torch.Generator, count: int, low: int, high: int, tag: str) -> list[list[str]]:
    """``count`` documents of ``low`` to ``high`` distinct sentences, "Document 3 sentence 7 (tag)."."""
    lengths = torch.randint(low, high + 1, (count,), generator=g).tolist()
    return [[f"Document {d} sentence {s} ({tag})." for s in range(length)] for d, length in enumerate(lengths)]


def make_nsp_examples_cases() -> list[Case]:
    """Many documents with two different seeds (the first two cases: the determinism test compares them),
    documents with a single sentence and an empty one, two documents only; the lengths, the positions
    of the short documents and the seeds are drawn."""
    g = generator_for("make_nsp_examples")
    many = _documents(g, 60, 20, 120, "a")
    edges = _documents(g, 12, 2, 30, "b")
    single, empty = torch.randperm(len(edges), generator=g)[:2].tolist()
    edges[single] = edges[single][:1]  # a document of one sentence: no pair, but a possible NotNext sentence
    edges[empty] = []  # an empty document: skipped
    two = _documents(g, 2, 40, 60, "c")
    seed = random_integer(g, 0, 10**6)
    seeds = [seed, seed + random_integer(g, 1, 10**6), random_integer(g, 0, 10**6), random_integer(g, 0, 10**6)]
    return [
        Case(f"60 documents of 20 to 120 sentences, seed={seeds[0]}", (many,), {"seed": seeds[0]}),
        Case(f"the same 60 documents, seed={seeds[1]}", (many,), {"seed": seeds[1]}),
        Case(f"12 documents, one of them of a single sentence and one empty, seed={seeds[2]}", (edges,),
             {"seed": seeds[2]}),
        Case(f"two documents only, seed={seeds[3]}", (two,), {"seed": seeds[3]}),
    ]


def _is_example(example) -> bool:
    return (isinstance(example, (tuple, list)) and len(example) == 3 and isinstance(example[0], str)
            and isinstance(example[1], str) and example[2] in (IS_NEXT, NOT_NEXT) and not isinstance(example[2], float))


def _check_nsp_examples(examples, documents, context: str) -> None:
    check = "make_nsp_examples"
    if not isinstance(examples, list):
        fail(check, context, f"you returned a {type(examples).__name__}, expected a list of (sentence_a, "
             "sentence_b, label) tuples.")
    bad = next((example for example in examples if not _is_example(example)), None)
    if bad is not None:
        fail(check, context, f"an example is {bad!r}; each must be a tuple (sentence_a: str, sentence_b: str, "
             "label: 0 or 1).")
    where = {sentence: (d, s) for d, document in enumerate(documents) for s, sentence in enumerate(document)}
    unknown = next((b for _, b, _ in examples if b not in where), None) or next(
        (a for a, _, _ in examples if a not in where), None)
    if unknown is not None:
        fail(check, context, f"{unknown!r} is not a sentence of the documents.")
    expected_first = [sentence for document in documents for sentence in document[:-1]]
    if len(examples) != len(expected_first):
        problem = (f"you returned {len(examples)} examples, expected {len(expected_first)} (one per two "
                   "consecutive sentences of a document).")
        fail(check, context, problem, BOTH_HINT if len(examples) == 2 * len(expected_first) else COUNT_HINT)

    consecutive = [where[b] == (where[a][0], where[a][1] + 1) for a, b, _ in examples]
    same_document = [where[a][0] == where[b][0] for a, b, _ in examples]
    labels = [label for _, _, label in examples]
    is_next = [index for index, label in enumerate(labels) if label == IS_NEXT]
    not_next = [index for index, label in enumerate(labels) if label == NOT_NEXT]
    wrong_is_next = [index for index in is_next if not consecutive[index]]
    if wrong_is_next:
        a, b, label = examples[wrong_is_next[0]]
        problem = f"the example {(a, b, label)!r} has label 0 (IsNext), but {b!r} does not follow {a!r}."
        swapped = not_next and sum(consecutive[index] for index in not_next) > 0.9 * len(not_next)
        fail(check, context, problem, SWAPPED_HINT if swapped else IS_NEXT_HINT)
    wrong_not_next = [index for index in not_next if same_document[index]]
    if wrong_not_next:
        a, b, label = examples[wrong_not_next[0]]
        fail(check, context, f"the example {(a, b, label)!r} has label 1 (NotNext), but both sentences come "
             f"from document {where[a][0]}.", SAME_DOCUMENT_HINT)
    first = [a for a, _, _ in examples]
    if first != expected_first:
        index = next(i for i, (a, e) in enumerate(zip(first, expected_first)) if a != e)
        fail(check, context, f"example {index} starts with {first[index]!r}, expected {expected_first[index]!r}.",
             ORDER_HINT)

    count = len(examples)
    share = len(is_next) / count
    if count >= 500 and abs(share - 0.5) > _tolerance(0.5, count):
        fail(check, context, f"{share:.3f} of the {count} examples are IsNext, expected 1/2 (allowed: "
             f"+-{_tolerance(0.5, count):.3f}, {STANDARD_DEVIATIONS} standard deviations).", COIN_HINT)
    non_empty = [d for d, document in enumerate(documents) if document]
    if len(not_next) >= 500 and len(non_empty) >= 20:
        sources = [where[examples[index][1]] for index in not_next]
        following = sum(doc == where[examples[index][0]][0] + 1 for (doc, _), index in zip(sources, not_next))
        first_sentences = sum(position == 0 for _, position in sources)
        distinct = len({doc for doc, _ in sources})
        if following > 0.5 * len(sources) or first_sentences > 0.5 * len(sources) or distinct < 0.5 * len(non_empty):
            fail(check, context, f"the NotNext sentences are not random: {following} of {len(sources)} come from "
                 f"the next document, {first_sentences} are the first sentence of their document, and they come "
                 f"from {distinct} of the {len(non_empty)} documents.", RANDOM_DOCUMENT_HINT)


def _compare_nsp_examples(exercise: Exercise, student_fn, case: Case, context: str, forbidden) -> None:
    """One case: the examples must follow the rules of next sentence prediction (and, when many, its statistics)."""
    try:
        examples = run_student(student_fn, case, check=exercise.name, forbidden=forbidden,
                               parameter_names=exercise.parameter_names, context=context)
    except CheckFailed as failure:
        cause = failure.__cause__
        if cause is None or "empty" not in str(cause) or all(case.args[0]):
            raise
        raise CheckFailed(f"{failure}\n  Hint: {EMPTY_HINT}") from cause
    _check_nsp_examples(examples, case.args[0], context)


def _check_nsp_seeds(exercise: Exercise, student_fn, forbidden) -> str:
    """The test after the cases: the same seed gives the same examples whatever the global random state,
    another seed other examples."""
    cases = exercise.cases()
    case = cases[0]
    context = (f"the determinism test case ({case.description}, called twice, with the global random generators "
               "reseeded in between)")
    random.seed(1)
    torch.manual_seed(1)
    first = run_student(student_fn, case, check=exercise.name, forbidden=forbidden, context=context)
    random.seed(2)
    torch.manual_seed(2)
    second = run_student(student_fn, case, check=exercise.name, forbidden=forbidden, context=context)
    seed, other_seed = case.kwargs["seed"], cases[1].kwargs["seed"]
    if first != second:
        fail(exercise.name, context, f"the two calls with seed={seed} returned different examples.", SEED_HINT)
    other = run_student(student_fn, cases[1], check=exercise.name, forbidden=forbidden, context=context)
    if other == first:
        fail(exercise.name, f"the determinism test case ({case.description}, and seed={other_seed})",
             f"seeds {seed} and {other_seed} returned the same examples.", SEED_HINT)
    return "; seeds repeat"


MAKE_NSP_EXAMPLES = Exercise("make_nsp_examples", reference.make_nsp_examples, make_nsp_examples_cases,
                             forbidden=MAKE_NSP_EXAMPLES_FORBIDDEN, parameter_names=("documents", "seed"),
                             compare=_compare_nsp_examples, then=(_check_nsp_seeds,),
                             agreement="follow the rules of next sentence prediction",
                             summary="""
                             Check ``make_nsp_examples(documents, seed=0)`` by the rules of next sentence prediction.

                             Cases: 60 documents of 20 to 120 distinct sentences (about 4,000 pairs) with two seeds; 12
                             documents with a single-sentence one (a possible NotNext sentence, no pair) and an empty
                             one; two documents only; the lengths and the seeds are drawn. Rules: a list of (str, str, 0
                             or 1); one example per two consecutive sentences of a document, in document order; label 0
                             pairs are consecutive sentences of one document; label 1 second sentences come from another
                             document. Statistics (cases with at least 500 examples): the IsNext share within 6 standard
                             deviations of 1/2 (+-0.05 for 3,500 pairs); NotNext sentences spread over the documents
                             (not mostly from the next document, not mostly first sentences, from at least half of the
                             documents). Determinism: the same seed gives the same list, whatever the global random
                             state; another seed another list. The documents must not be modified. Forbidden: the
                             reference.
                             """)


# --------------------------------------------------------------------------------------------------
# mlm_loss
# --------------------------------------------------------------------------------------------------


def reference_mlm_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """L_MLM = -(1/|M|) sum_{i in M} log softmax(logits_i)[labels_i], M = {i : labels_i != -100}, with
    PyTorch's cross-entropy (an implementation independent of the course's)."""
    return F.cross_entropy(logits.flatten(0, -2), labels.flatten(), ignore_index=IGNORE_INDEX)


MLM_LOSS_FORBIDDEN = (
    F.cross_entropy,
    F.nll_loss,
    torch.nn.CrossEntropyLoss.forward,
    torch.nn.NLLLoss.forward,
    torch._C._nn.cross_entropy_loss,
    torch._C._nn.nll_loss_nd,
    torch._C._nn.nll_loss,
    torch.ops.aten.cross_entropy_loss,
    torch.ops.aten.nll_loss_nd,
    torch.ops.aten.nll_loss,
    torch.ops.aten.nll_loss_forward,
    bert_reference.BertForPreTraining.forward,
    bert_reference.BertMLMHead.forward,
    "transformers.loss.loss_utils.ForMaskedLMLoss",
    "transformers.loss.loss_utils.fixed_cross_entropy",
)


def _labels(g: torch.Generator, shape: tuple[int, ...], vocab_size: int, share: float) -> torch.Tensor:
    """Random labels, about a fraction ``share`` of them kept and the others -100, but at least one kept in
    every sequence (the last dimension): a sequence without labels is a case of its own."""
    labels = torch.randint(vocab_size, shape, generator=g)
    ignored = torch.rand(shape, generator=g) >= share
    kept = torch.randint(shape[-1], (*shape[:-1], 1), generator=g)
    ignored.scatter_(-1, kept, False)
    return labels.masked_fill(ignored, IGNORE_INDEX)


def mlm_loss_cases() -> list[Case]:
    g = generator_for("mlm_loss")

    def logits(*shape, scale=2.0, dtype=torch.float32):
        return (torch.randn(shape, generator=g, dtype=torch.float64) * scale).to(dtype)

    first = _labels(g, (2, 6), 10, 0.3)
    while (first != IGNORE_INDEX).sum() < 3:  # two labels at one position of both sequences: a softmax over the
        first = _labels(g, (2, 6), 10, 0.3)  # batch and one over the labelled positions would give the same loss
    uneven = _labels(g, (4, 16), 50, 0.3)
    uneven[0] = IGNORE_INDEX  # a sequence with nothing to predict
    uneven[1, :14] = torch.randint(50, (14,), generator=g)  # a sequence with many
    one = torch.full((2, 5), IGNORE_INDEX)
    one[1, 3] = 6
    return [
        Case("logits (2, 6, 10), labels (2, 6) with about 30% of the positions labelled (at least 3), float32",
             (logits(2, 6, 10), first)),
        Case("logits (4, 16, 50), labels (4, 16): sequence 0 has no label, sequence 1 has 14, the others about 5",
             (logits(4, 16, 50), uneven)),
        Case("logits (12, 30), labels (12,) (positions already flattened), float64",
             (logits(12, 30, dtype=torch.float64), _labels(g, (12,), 30, 0.5))),
        Case("logits (3, 8, 20) of size about 100 (a naive softmax overflows), labels (3, 8)",
             (logits(3, 8, 20, scale=100.0), _labels(g, (3, 8), 20, 0.4))),
        Case("logits (2, 5, 7), a single labelled position", (logits(2, 5, 7), one)),
        Case("logits (3, 4, 9), every position labelled (no -100)", (logits(3, 4, 9), _labels(g, (3, 4), 9, 1.0))),
    ]


def _log_probabilities(logits: torch.Tensor) -> torch.Tensor:
    return logits - torch.logsumexp(logits, dim=-1, keepdim=True)


def _picked(logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(log p(label) at every position with label -100 replaced by 0, mask of the labelled positions)."""
    chosen = labels != IGNORE_INDEX
    picked = _log_probabilities(logits).gather(-1, labels.clamp_min(0).unsqueeze(-1)).squeeze(-1)
    return picked, chosen


def _mlm_mean_over_all(logits, labels):
    picked, chosen = _picked(logits, labels)
    return -(picked * chosen).sum() / labels.numel()


def _mlm_ignored_as_token_zero(logits, labels):
    picked, _ = _picked(logits, labels)
    return -picked.mean()


def _mlm_sum(logits, labels):
    picked, chosen = _picked(logits, labels)
    return -picked[chosen].sum()


def _mlm_mean_per_sequence(logits, labels):
    picked, chosen = _picked(logits, labels)
    if picked.dim() == 1:
        return -picked[chosen].mean()
    per_sequence = (picked * chosen).sum(-1) / chosen.sum(-1)  # NaN for a sequence without labels
    return -per_sequence.mean()


def _mlm_no_minus(logits, labels):
    picked, chosen = _picked(logits, labels)
    return picked[chosen].mean()


def _mlm_unnormalized(logits, labels):
    chosen = labels != IGNORE_INDEX
    return -logits.gather(-1, labels.clamp_min(0).unsqueeze(-1)).squeeze(-1)[chosen].mean()


def _mlm_naive_softmax(logits, labels):
    chosen = labels != IGNORE_INDEX
    probabilities = torch.exp(logits) / torch.exp(logits).sum(-1, keepdim=True)
    return -torch.log(probabilities.gather(-1, labels.clamp_min(0).unsqueeze(-1)).squeeze(-1))[chosen].mean()


def _mlm_wrong_axis(axis: int, chosen_first: bool = False):
    """The loss with the log-softmax taken along ``axis`` of the logits instead of the vocabulary: of all
    the logits (..., V), or of the chosen positions' (|M|, V) when ``chosen_first``."""

    def mlm_loss(logits, labels):
        chosen = labels != IGNORE_INDEX
        if chosen_first:
            logits, labels, chosen = logits[chosen], labels[chosen], chosen[chosen]
        log_probabilities = logits - torch.logsumexp(logits, dim=axis, keepdim=True)
        return -log_probabilities.gather(-1, labels.clamp_min(0).unsqueeze(-1)).squeeze(-1)[chosen].mean()

    return mlm_loss


MLM_LOSS_MISTAKES = (
    Mistake(_mlm_mean_over_all,
            "average over the predicted positions only (labels != -100), not over all positions: divide by the "
            "number of labelled positions."),
    Mistake(_mlm_ignored_as_token_zero,
            "leave the positions with label -100 out of the loss: they are not predicted; clamping -100 to "
            "token 0 counts them as predictions of token 0."),
    Mistake(_mlm_sum, "take the mean over the labelled positions, not the sum."),
    Mistake(_mlm_mean_per_sequence,
            "average over all the labelled positions of the batch together, not per sequence and then over "
            "the sequences (a sequence with no labelled position has no mean, and sequences with more "
            "predictions must weigh more)."),
    Mistake(_mlm_no_minus, "the loss is the NEGATIVE mean log-probability: it is positive."),
    Mistake(_mlm_unnormalized,
            "turn the logits into log-probabilities first: log p = logits - logsumexp(logits) over the "
            "vocabulary (the last axis)."),
    Mistake(_mlm_naive_softmax,
            "log(softmax(logits)) overflows for large logits: compute log p = logits - logsumexp(logits, dim=-1) "
            "(or torch.log_softmax), which is stable."),
    Mistake(_mlm_wrong_axis(-2),
            "normalize over the vocabulary, the LAST axis of the logits (dim=-1), not over the positions."),
    Mistake(_mlm_wrong_axis(0, chosen_first=True),
            "normalize over the vocabulary, the LAST axis of the logits (dim=-1), not over the predicted "
            "positions (dim 0 of logits[chosen])."),
    Mistake(_mlm_wrong_axis(0),
            "normalize over the vocabulary, the LAST axis of the logits (dim=-1), not over the first axis "
            "(the sequences of the batch)."),
)


MLM_LOSS = Exercise("mlm_loss", reference_mlm_loss, mlm_loss_cases, mistakes=MLM_LOSS_MISTAKES,
                    forbidden=MLM_LOSS_FORBIDDEN,
                    summary="""
                    Compare ``mlm_loss(logits, labels)`` with ``F.cross_entropy(logits.flatten(0, -2), labels.flatten(),
                    ignore_index=-100)``.

                    Cases: logits (B, N, V) and (M, V); float32 and float64; a sequence without labels and one with
                    many; logits of about 100; a single labelled position; no -100 at all. Tolerance: the framework's
                    defaults (float32 atol 1e-5, rtol 1e-4). Forbidden: PyTorch's cross-entropy and negative
                    log-likelihood (functions, modules, operators), the model heads of ``bertlab.bert`` and Hugging
                    Face's masked-LM loss; torch.log_softmax and torch.logsumexp are allowed.
                    """)


#: The chapter whose exercises this module checks, and their records, in the order of the chapter.
CHAPTER = "07_pretraining"


__getattr__ = check_functions(globals())  # check_<name> for each record above
