"""Mutation tests of chapter 07's checks (autograder/checks/pretraining.py).

For every exercise: the check accepts the solution of the solution notebook, other correct
implementations and (with the forbid-rule lifted) the reference; it rejects a catalogue of typical
wrong implementations, written the way students write them, each with the hint that explains it; and
calling the reference or a library function that does the exercise's job fails with "implement this
yourself", however it was reached.
"""

import math
import random
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from torch.nn.functional import cross_entropy as captured_cross_entropy

import bertlab.bert
import bertlab.pretraining
from autograder.checks import pretraining as checks
from autograder.checks.framework import CheckFailed
from bertlab.pretraining import mask_tokens as captured_mask_tokens
from checks_helpers import MutationTests, run_solution_cells

SOLUTION = Path(__file__).resolve().parents[1] / "solutions" / "07_pretraining" / "07_pretraining.ipynb"
EXERCISES = ["mask_tokens", "make_nsp_examples", "mlm_loss"]
REFERENCES = {
    "mask_tokens": bertlab.pretraining.mask_tokens,
    "make_nsp_examples": bertlab.pretraining.make_nsp_examples,
    "mlm_loss": checks.reference_mlm_loss,  # PyTorch's cross-entropy, which the exercise forbids
}


@pytest.fixture(scope="module")
def solution_namespace():
    """The functions defined by the solution cells of the solution notebook, executed together."""
    return run_solution_cells(SOLUTION, {"torch": torch, "math": math, "random": random})


# --------------------------------------------------------------------------------------------------
# mask_tokens: wrong implementations as students write them
# --------------------------------------------------------------------------------------------------


def masking(input_ids, *, mask_token_id, vocab_size, special_tokens_mask=None, mlm_probability=0.15,
            mask_replace_prob=0.8, random_replace_prob=0.1, generator=None, use_special=True, labels_from="input",
            invert_labels=False, label_everything=False, random_source="vocabulary", overlap=False,
            conditional=False):
    """A student's mask_tokens with one mistake switched on by the keyword arguments."""
    chosen = torch.rand(input_ids.shape, generator=generator) < mlm_probability
    if special_tokens_mask is not None and use_special:
        chosen = chosen & ~special_tokens_mask
    draw = torch.rand(input_ids.shape, generator=generator)
    to_mask = chosen & (draw < mask_replace_prob)
    if overlap:
        to_random = chosen & (torch.rand(input_ids.shape, generator=generator) < random_replace_prob)
    elif conditional:
        to_random = chosen & ~to_mask & (torch.rand(input_ids.shape, generator=generator) < random_replace_prob)
    else:
        to_random = chosen & (draw >= mask_replace_prob) & (draw < mask_replace_prob + random_replace_prob)
    if random_source == "batch":
        flat = input_ids.flatten()
        random_tokens = flat[torch.randint(len(flat), input_ids.shape, generator=generator)]
    else:
        random_tokens = torch.randint(vocab_size, input_ids.shape, generator=generator)
    masked = input_ids.clone()
    masked[to_mask] = mask_token_id
    masked[to_random] = random_tokens[to_random]
    labels = (input_ids if labels_from == "input" else masked).clone()
    if not label_everything:
        labels[chosen if invert_labels else ~chosen] = -100
    return masked, labels


def mask_specials_too(input_ids, **kwargs):
    return masking(input_ids, use_special=False, **kwargs)


def mask_mixed_up(input_ids, *, mask_replace_prob=0.8, random_replace_prob=0.1, **kwargs):
    return masking(input_ids, mask_replace_prob=random_replace_prob, random_replace_prob=mask_replace_prob, **kwargs)


def mask_labels_everywhere(input_ids, **kwargs):
    return masking(input_ids, label_everything=True, **kwargs)


def mask_labels_from_output(input_ids, **kwargs):
    return masking(input_ids, labels_from="output", **kwargs)


def mask_inverted_labels(input_ids, **kwargs):
    return masking(input_ids, invert_labels=True, **kwargs)


def mask_random_from_batch(input_ids, **kwargs):
    return masking(input_ids, random_source="batch", **kwargs)


def mask_two_independent_draws(input_ids, **kwargs):
    return masking(input_ids, overlap=True, **kwargs)


def mask_random_among_the_rest(input_ids, **kwargs):
    return masking(input_ids, conditional=True, **kwargs)


def mask_exactly_15_percent_of_all_positions(input_ids, *, mask_token_id, vocab_size, special_tokens_mask=None,
                                             mlm_probability=0.15, mask_replace_prob=0.8, random_replace_prob=0.1,
                                             generator=None):
    rows = input_ids.reshape(-1, input_ids.shape[-1])
    special = special_tokens_mask if special_tokens_mask is not None else torch.zeros_like(input_ids, dtype=torch.bool)
    special = special.reshape(rows.shape)
    chosen = torch.zeros_like(rows, dtype=torch.bool)
    count = round(mlm_probability * rows.shape[-1])  # 15% of the row's length, padding included
    for row in range(len(rows)):
        candidates = torch.nonzero(~special[row]).flatten()
        order = torch.randperm(len(candidates), generator=generator)
        chosen[row, candidates[order[:count]]] = True
    chosen = chosen.reshape(input_ids.shape)
    masked = input_ids.clone()
    draw = torch.rand(input_ids.shape, generator=generator)
    masked[chosen & (draw < mask_replace_prob)] = mask_token_id
    to_random = chosen & (draw >= mask_replace_prob) & (draw < mask_replace_prob + random_replace_prob)
    masked[to_random] = torch.randint(vocab_size, input_ids.shape, generator=generator)[to_random]
    return masked, torch.where(chosen, input_ids, -100)


def mask_in_place(input_ids, *, mask_token_id, vocab_size, special_tokens_mask=None, mlm_probability=0.15,
                  mask_replace_prob=0.8, random_replace_prob=0.1, generator=None):
    labels = input_ids.clone()
    chosen = torch.rand(input_ids.shape, generator=generator) < mlm_probability
    if special_tokens_mask is not None:
        chosen &= ~special_tokens_mask
    labels[~chosen] = -100
    draw = torch.rand(input_ids.shape, generator=generator)
    input_ids[chosen & (draw < mask_replace_prob)] = mask_token_id
    to_random = chosen & (draw >= mask_replace_prob) & (draw < mask_replace_prob + random_replace_prob)
    input_ids[to_random] = torch.randint(vocab_size, input_ids.shape, generator=generator)[to_random]
    return input_ids, labels


def mask_without_random_tokens(input_ids, *, mask_token_id, vocab_size, special_tokens_mask=None,
                               mlm_probability=0.15, mask_replace_prob=0.8, random_replace_prob=0.1, generator=None):
    chosen = torch.rand(input_ids.shape, generator=generator) < mlm_probability
    if special_tokens_mask is not None:
        chosen &= ~special_tokens_mask
    to_mask = chosen & (torch.rand(input_ids.shape, generator=generator) < mask_replace_prob)
    return input_ids.masked_fill(to_mask, mask_token_id), input_ids.masked_fill(~chosen, -100)


def mask_with_berts_numbers(input_ids, *, mask_token_id, vocab_size, special_tokens_mask=None, mlm_probability=0.15,
                            mask_replace_prob=0.8, random_replace_prob=0.1, generator=None):
    return masking(input_ids, mask_token_id=mask_token_id, vocab_size=vocab_size,
                   special_tokens_mask=special_tokens_mask, generator=generator)


def mask_with_berts_mask_id(input_ids, *, mask_token_id, **kwargs):
    return masking(input_ids, mask_token_id=103, **kwargs)


def mask_ignoring_the_generator(input_ids, *, generator=None, **kwargs):
    return masking(input_ids, generator=None, **kwargs)


def mask_random_ids_one_too_high(input_ids, *, mask_token_id, vocab_size, special_tokens_mask=None,
                                 mlm_probability=0.15, mask_replace_prob=0.8, random_replace_prob=0.1, generator=None):
    chosen = torch.rand(input_ids.shape, generator=generator) < mlm_probability
    if special_tokens_mask is not None:
        chosen &= ~special_tokens_mask
    draw = torch.rand(input_ids.shape, generator=generator)
    to_random = chosen & (draw >= mask_replace_prob) & (draw < mask_replace_prob + random_replace_prob)
    masked = input_ids.masked_fill(chosen & (draw < mask_replace_prob), mask_token_id)
    masked = torch.where(to_random, torch.randint(1, vocab_size + 1, input_ids.shape, generator=generator), masked)
    return masked, input_ids.masked_fill(~chosen, -100)


# --------------------------------------------------------------------------------------------------
# make_nsp_examples: wrong implementations
# --------------------------------------------------------------------------------------------------


def pairs(documents, seed=0, *, swap=False, negative="other", both=False, flatten=False, rng=None, coin=0.5,
          shuffle=False):
    """A student's make_nsp_examples with one mistake switched on by the keyword arguments."""
    rng = random.Random(seed) if rng is None else rng
    documents = [document for document in documents if document]
    is_next, not_next = (1, 0) if swap else (0, 1)
    streams = [[s for d in documents for s in d]] if flatten else documents
    examples = []
    for index, document in enumerate(streams):
        for sentence, following in zip(document, document[1:]):
            heads = rng.random() < coin
            if heads or both:
                examples.append((sentence, following, is_next))
            if not heads or both:
                if negative == "other":
                    other = rng.choice([d for d in range(len(documents)) if d != index])
                elif negative == "same":
                    other = index
                elif negative == "next":
                    other = (index + 1) % len(documents)
                else:  # any document, this one included
                    other = rng.randrange(len(documents))
                examples.append((sentence, rng.choice(documents[other]), not_next))
    if shuffle:
        rng.shuffle(examples)
    return examples


def nsp_labels_swapped(documents, seed=0):
    return pairs(documents, seed, swap=True)


def nsp_negative_from_the_whole_corpus(documents, seed=0):
    return pairs(documents, seed, negative="any")


def nsp_negative_from_the_same_document(documents, seed=0):
    return pairs(documents, seed, negative="same")


def nsp_both_examples_per_pair(documents, seed=0):
    return pairs(documents, seed, both=True)


def nsp_across_documents(documents, seed=0):
    sentences = [sentence for document in documents for sentence in document]
    rng = random.Random(seed)
    examples = []
    for sentence, following in zip(sentences, sentences[1:]):
        if rng.random() < 0.5:
            examples.append((sentence, following, 0))
        else:
            examples.append((sentence, rng.choice(sentences), 1))
    return examples


def nsp_global_random(documents, seed=0):
    return pairs(documents, seed, rng=random)


def nsp_negative_from_the_next_document(documents, seed=0):
    return pairs(documents, seed, negative="next")


def nsp_randint_coin(documents, seed=0):
    rng = random.Random(seed)
    documents = [document for document in documents if document]
    examples = []
    for index, document in enumerate(documents):
        for sentence, following in zip(document, document[1:]):
            if rng.randint(0, 2) == 0:  # randint includes both ends: 1/3 IsNext
                examples.append((sentence, following, 0))
            else:
                other = rng.choice([d for d in range(len(documents)) if d != index])
                examples.append((sentence, rng.choice(documents[other]), 1))
    return examples


def nsp_shuffled(documents, seed=0):
    return pairs(documents, seed, shuffle=True)


def nsp_crashes_on_empty_documents(documents, seed=0):
    rng = random.Random(seed)
    examples = []
    for index, document in enumerate(documents):
        for sentence, following in zip(document, document[1:]):
            if rng.random() < 0.5:
                examples.append((sentence, following, 0))
            else:
                other = rng.choice([d for d in range(len(documents)) if d != index])
                examples.append((sentence, rng.choice(documents[other]), 1))
    return examples


def nsp_removes_empty_documents_in_place(documents, seed=0):
    while [] in documents:
        documents.remove([])
    return pairs(documents, seed)


# --------------------------------------------------------------------------------------------------
# mlm_loss: wrong implementations
# --------------------------------------------------------------------------------------------------


def token_log_probabilities(logits, labels):
    return torch.log_softmax(logits, dim=-1).gather(-1, labels.clamp(min=0).unsqueeze(-1)).squeeze(-1)


def loss_mean_over_all_positions(logits, labels):
    mask = (labels != -100).float()
    return -(token_log_probabilities(logits, labels) * mask).mean()


def loss_labels_clamped(logits, labels):
    return -token_log_probabilities(logits, labels).mean()


def loss_summed(logits, labels):
    return -token_log_probabilities(logits, labels)[labels != -100].sum()


def loss_per_sequence(logits, labels):
    mask = (labels != -100).float()
    per_sequence = -(token_log_probabilities(logits, labels) * mask).sum(-1) / mask.sum(-1)
    return per_sequence.mean()


def loss_without_minus(logits, labels):
    return token_log_probabilities(logits, labels)[labels != -100].mean()


def loss_naive_softmax(logits, labels):
    probabilities = logits.exp() / logits.exp().sum(-1, keepdim=True)
    chosen = labels != -100
    return -probabilities[chosen].gather(-1, labels[chosen][:, None]).log().mean()


def loss_over_the_wrong_axis(logits, labels):
    log_probabilities = torch.log_softmax(logits, dim=1)
    chosen = labels != -100
    return -log_probabilities[chosen].gather(-1, labels[chosen][:, None]).mean()


def loss_raw_logits(logits, labels):
    chosen = labels != -100
    return -logits[chosen].gather(-1, labels[chosen][:, None]).mean()


MUTANTS = {
    "mask_tokens": [
        (mask_specials_too, "special tokens ([CLS], [SEP], [PAD]"),
        (mask_mixed_up, "80/10/10 is mixed up"),
        (mask_labels_everywhere, "labels must be -100 wherever nothing is predicted"),
        (mask_labels_from_output, "the labels hold the ORIGINAL tokens"),
        (mask_inverted_labels, "Your labels look inverted"),
        (mask_exactly_15_percent_of_all_positions, "not 15% of all positions"),
        (mask_in_place, "changed its input `input_ids` in place"),
        (mask_random_among_the_rest, "random_replace_prob is a share of ALL chosen tokens"),
        (mask_two_independent_draws, "with ONE uniform draw per chosen position"),
        (mask_without_random_tokens, "your chosen tokens are only [MASK]ed or kept"),
        (mask_random_from_batch, "uniformly from the whole vocabulary"),
        (mask_with_berts_numbers, "use the arguments mlm_probability"),
        (mask_with_berts_mask_id, "becomes mask_token_id (the argument)"),
        (mask_ignoring_the_generator, "pass generator=generator to every random draw"),
        (mask_random_ids_one_too_high, "draw them from [0, vocab_size)"),
    ],
    "make_nsp_examples": [
        (nsp_labels_swapped, "your labels are swapped"),
        (nsp_negative_from_the_whole_corpus, "must come from ANOTHER document"),
        (nsp_negative_from_the_same_document, "must come from ANOTHER document"),
        (nsp_both_examples_per_pair, "not both an IsNext and a NotNext one"),
        (nsp_across_documents, "never pair the last sentence of a document with the next document"),
        (nsp_global_random, "random.Random(seed)"),
        (nsp_negative_from_the_next_document, "uniformly among the other (non-empty) documents"),
        (nsp_randint_coin, "flip a fair coin"),
        (nsp_shuffled, "keep the examples in document order"),
        (nsp_crashes_on_empty_documents, "skip empty documents"),
        (nsp_removes_empty_documents_in_place, "changed its input `documents` in place"),
    ],
    "mlm_loss": [
        (loss_mean_over_all_positions, "average over the predicted positions only"),
        (loss_labels_clamped, "leave the positions with label -100 out of the loss"),
        (loss_summed, "not the sum"),
        (loss_per_sequence, "not per sequence"),
        (loss_without_minus, "NEGATIVE mean log-probability"),
        (loss_naive_softmax, "overflows for large logits"),
        (loss_over_the_wrong_axis, "the LAST axis"),
        (loss_raw_logits, "turn the logits into log-probabilities first"),
    ],
}


# Correct implementations written differently from the solution: the checks must accept them.
def mask_like_hugging_face(input_ids, *, mask_token_id, vocab_size, special_tokens_mask=None, mlm_probability=0.15,
                           mask_replace_prob=0.8, random_replace_prob=0.1, generator=None):
    """The algorithm of DataCollatorForLanguageModeling: Bernoulli draws, the random share rescaled."""
    labels = input_ids.clone()
    probabilities = torch.full(input_ids.shape, mlm_probability)
    if special_tokens_mask is not None:
        probabilities.masked_fill_(special_tokens_mask, 0.0)
    chosen = torch.bernoulli(probabilities, generator=generator).bool()
    labels[~chosen] = -100
    masked = input_ids.clone()
    replaced = torch.bernoulli(torch.full(input_ids.shape, mask_replace_prob), generator=generator).bool() & chosen
    masked[replaced] = mask_token_id
    if mask_replace_prob < 1 and random_replace_prob > 0:
        scaled = random_replace_prob / (1 - mask_replace_prob)
        randomized = torch.bernoulli(torch.full(input_ids.shape, scaled), generator=generator).bool()
        randomized &= chosen & ~replaced
        masked[randomized] = torch.randint(vocab_size, input_ids.shape, generator=generator)[randomized]
    return masked, labels


def mask_a_python_loop(input_ids, *, mask_token_id, vocab_size, special_tokens_mask=None, mlm_probability=0.15,
                       mask_replace_prob=0.8, random_replace_prob=0.1, generator=None):
    """One position at a time, drawing from Python's random module seeded from the generator."""
    rng = random.Random(int(torch.randint(2**62, (1,), generator=generator)))
    masked, labels = input_ids.flatten().tolist(), [-100] * input_ids.numel()
    special = special_tokens_mask.flatten().tolist() if special_tokens_mask is not None else [False] * len(masked)
    for position, token in enumerate(masked):
        if special[position] or rng.random() >= mlm_probability:
            continue
        labels[position] = token
        draw = rng.random()
        if draw < mask_replace_prob:
            masked[position] = mask_token_id
        elif draw < mask_replace_prob + random_replace_prob:
            masked[position] = rng.randrange(vocab_size)
    as_tensor = lambda values: torch.tensor(values, dtype=input_ids.dtype).reshape(input_ids.shape)  # noqa: E731
    return as_tensor(masked), as_tensor(labels)


def nsp_with_retries(documents, seed=0):
    """BERT's script: draw any document, draw again while it is this one."""
    rng = random.Random(seed)
    documents = [document for document in documents if document]
    examples = []
    for index, document in enumerate(documents):
        for position in range(len(document) - 1):
            if rng.random() < 0.5:
                examples.append((document[position], document[position + 1], 0))
                continue
            other = index
            while other == index:
                other = rng.randrange(len(documents))
            examples.append((document[position], documents[other][rng.randrange(len(documents[other]))], 1))
    return examples


def loss_with_logsumexp(logits, labels):
    chosen = labels != -100
    selected = logits[chosen]  # (M, V)
    picked = selected.gather(-1, labels[chosen].unsqueeze(-1)).squeeze(-1)
    return (torch.logsumexp(selected, dim=-1) - picked).sum() / chosen.sum()


def loss_with_one_hot(logits, labels):
    chosen = (labels != -100).to(logits.dtype)
    one_hot = F.one_hot(labels.clamp(min=0), logits.shape[-1]).to(logits.dtype)
    per_position = -(torch.log_softmax(logits, dim=-1) * one_hot).sum(-1)
    return (per_position * chosen).sum() / chosen.sum()


ALTERNATIVES = {
    "mask_tokens": [mask_like_hugging_face, mask_a_python_loop],
    "make_nsp_examples": [nsp_with_retries],
    "mlm_loss": [loss_with_logsumexp, loss_with_one_hot],
}


def test_failure_message_gives_the_measured_proportions_and_the_tolerance():
    with pytest.raises(CheckFailed) as failure:
        checks.check_mask_tokens(mask_mixed_up)
    message = str(failure.value)
    assert "test case 1 of 7" in message
    assert "[MASK] 0.1" in message and "(expected 0.800)" in message and "6 standard deviations" in message


# --------------------------------------------------------------------------------------------------
# "Implement this yourself"
# --------------------------------------------------------------------------------------------------


def mask_with_captured_reference(input_ids, **kwargs):
    return captured_mask_tokens(input_ids, **kwargs)


def mask_with_the_dataset_method(input_ids, *, mask_token_id, vocab_size, special_tokens_mask=None,
                                 mlm_probability=0.15, mask_replace_prob=0.8, random_replace_prob=0.1, generator=None):
    dataset = SimpleNamespace(tokenizer=SimpleNamespace(mask_token_id=mask_token_id, vocab_size=vocab_size),
                              special_token_ids=torch.tensor([0, 2, 3]), mlm_probability=mlm_probability)
    return bertlab.pretraining.PretrainingDataset.mask(dataset, input_ids, generator)


def mask_with_hugging_face(input_ids, *, mask_token_id, vocab_size, special_tokens_mask=None, mlm_probability=0.15,
                           mask_replace_prob=0.8, random_replace_prob=0.1, generator=None):
    from transformers import DataCollatorForLanguageModeling

    class Tokenizer:
        mask_token = "[MASK]"

        def convert_tokens_to_ids(self, token):
            return mask_token_id

        def __len__(self):
            return vocab_size

    collator = SimpleNamespace(mlm_probability=mlm_probability, whole_word_mask=False, generator=generator,
                               mask_replace_prob=mask_replace_prob, random_replace_prob=random_replace_prob,
                               tokenizer=Tokenizer())
    special = special_tokens_mask if special_tokens_mask is not None else torch.zeros_like(input_ids, dtype=torch.bool)
    return DataCollatorForLanguageModeling.torch_mask_tokens(collator, input_ids.clone(), special_tokens_mask=special)


def nsp_with_the_reference_hidden(documents, seed=0):
    try:
        return bertlab.pretraining.make_nsp_examples(documents, seed)
    except Exception:  # the check's exception is swallowed, but the call was recorded
        return pairs(documents, seed)


def loss_with_captured_cross_entropy(logits, labels):
    return captured_cross_entropy(logits.flatten(0, -2), labels.flatten())


def loss_with_the_module(logits, labels):
    return torch.nn.CrossEntropyLoss()(logits.flatten(0, -2), labels.flatten())


def loss_with_nll(logits, labels):
    return F.nll_loss(torch.log_softmax(logits, dim=-1).flatten(0, -2), labels.flatten())


def loss_with_aten(logits, labels):
    return torch.ops.aten.cross_entropy_loss(logits.flatten(0, -2), labels.flatten(), None, 1, -100, 0.0)


def loss_with_hugging_face(logits, labels):
    from transformers.loss.loss_utils import ForMaskedLMLoss

    return ForMaskedLMLoss(logits, labels, vocab_size=logits.shape[-1])


def loss_with_the_model_head(logits, labels):
    model = SimpleNamespace(bert=lambda *args: (None, torch.zeros(logits.shape[0], 2)),
                            mlm_head=lambda hidden: logits, nsp_head=lambda pooled: pooled)
    input_ids = torch.zeros(labels.shape, dtype=torch.long)
    return bertlab.bert.BertForPreTraining.forward(model, input_ids, mlm_labels=labels).mlm_loss


class TestPretrainingChecks(MutationTests):
    """The shared mutation tests (tests/checks_helpers.py) of this chapter's checks."""

    checks = checks
    references = REFERENCES
    mutants = MUTANTS
    alternatives = ALTERNATIVES
    reference_calls = {"mlm_loss": "torch.nn.functional.cross_entropy"}
    failure_context = r"(the determinism )?test case"  # the determinism case is told apart from the numbered ones
    cheats = [
        ("mask_tokens", mask_with_captured_reference, "bertlab.pretraining_data.mask_tokens"),
        ("mask_tokens", mask_with_the_dataset_method, "bertlab.pretraining_data.PretrainingDataset.mask"),
        ("mask_tokens", mask_with_hugging_face, "DataCollatorForLanguageModeling.torch_mask_tokens"),
        ("make_nsp_examples", nsp_with_the_reference_hidden, "bertlab.pretraining_data.make_nsp_examples"),
        ("mlm_loss", loss_with_captured_cross_entropy, "torch.nn.functional.cross_entropy"),
        ("mlm_loss", loss_with_the_module, "torch.nn.functional.cross_entropy"),
        ("mlm_loss", loss_with_nll, "torch.nn.functional.nll_loss"),
        ("mlm_loss", loss_with_aten, "torch.ops.aten.cross_entropy_loss"),
        ("mlm_loss", loss_with_hugging_face, "ForMaskedLMLoss"),
        ("mlm_loss", loss_with_the_model_head, "bertlab.bert.BertForPreTraining.forward"),
    ]


def test_mlm_loss_may_use_log_softmax_and_logsumexp():
    checks.check_mlm_loss(lambda logits, labels: -torch.log_softmax(logits[labels != -100], dim=-1).gather(
        -1, labels[labels != -100][:, None]).mean())
    checks.check_mlm_loss(loss_with_logsumexp)
