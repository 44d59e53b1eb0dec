"""Scoring: the shared-prefix computation equals the plain one, greedy equals generate, k selection."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from testkit.samples import ATOL, assert_same, mixed_samples
from testkit.tiny_models import chat_tokenizer, tiny_model
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from rope_adapter.scoring.generation import GreedyResult, greedy_accuracy, greedy_generate
from rope_adapter.scoring.logprobs import TokenLogprobs, mean_by_position
from rope_adapter.scoring.shared_prefix import gold_logprob, prepare, token_logprobs
from rope_adapter.scoring.tasks import KVRetrievalTask, PasskeyTask, PerplexityTask, Sample, apply_chat_template
from rope_adapter.search.k_selection import select_k


@pytest.mark.parametrize("arch", ["llama", "gemma2", "gpt_neox"])
def test_shared_prefix_equals_separate_full_sequences(arch, tokenizer):
    model = tiny_model(arch, num_layers=2)
    task = prepare(mixed_samples(), tokenizer)
    # the KV records share their JSON; every member of a group sees the same shared tokens
    kv_groups = [g for g in task.logprob_groups if len(g.members) == 2 and task.samples[g.members[0]].task]
    assert len(kv_groups) == 2 and all(g.shared > 300 for g in kv_groups)
    reference = token_logprobs(model, task, shared_prefix=False)
    for batch_size, max_batch_tokens in [(1, 4096), (3, 64), (8, 4096)]:
        shared = token_logprobs(model, task, batch_size=batch_size, max_batch_tokens=max_batch_tokens)
        assert_same(shared, reference)
    # per-sample target lengths are the tokenised targets (byte tokenizer: one token per byte)
    assert [len(v) for v in reference.values] == [len(s.target.encode()) for s in task.samples]


def test_first_k_means_and_positions(tokenizer):
    model = tiny_model("llama", num_layers=2)
    task = prepare(KVRetrievalTask(num_records=2, num_pairs=3, positions=[0, 1, 2]).samples(), tokenizer)
    lp = token_logprobs(model, task)
    np.testing.assert_allclose(lp.mean(1), [v[0] for v in lp.values])
    np.testing.assert_allclose(lp.mean(3), [v[:3].mean() for v in lp.values])
    np.testing.assert_allclose(lp.mean(), [v.mean() for v in lp.values])
    np.testing.assert_allclose(gold_logprob(model, task, k=3), lp.mean(3), atol=1e-6)
    by_pos = lp.by_position(2)
    assert list(by_pos) == [0, 1, 2]
    assert by_pos[1] == pytest.approx(np.mean([lp.mean(2)[1], lp.mean(2)[4]]))
    with pytest.raises(ValueError, match="k must be"):
        lp.mean(0)


def test_token_boundary_merge_is_still_exact():
    """A tokenizer that merges ':' with the following space: the target's first token holds prompt text."""
    byte_vocab = {ch: i + 3 for i, ch in enumerate(pre_tokenizers.ByteLevel.alphabet())}
    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, **byte_vocab}
    vocab[":Ġ"] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[(":", "Ġ")]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    merging = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="</s>")
    samples = KVRetrievalTask(num_records=1, num_pairs=3, positions=[0, 2]).samples()
    with pytest.warns(UserWarning, match="merge with the end of their prompt"):
        task = prepare(samples, merging)
    assert task.exact_boundary == [False] * 4  # 2 samples x 2 answer forms
    assert task.target_ids(0)[0] == vocab[":Ġ"]
    model = tiny_model("llama", num_layers=2, vocab_size=len(vocab))
    assert_same(token_logprobs(model, task), token_logprobs(model, task, shared_prefix=False))


def test_perplexity_windows_score_from_the_second_token(tmp_path, tokenizer):
    path = tmp_path / "t.txt"
    path.write_text("The quick brown fox jumps over the lazy dog. " * 20)
    samples = PerplexityTask(data_path=str(path), window_chars=120, num_windows=3).samples()
    task = prepare(samples, tokenizer)
    assert task.target_start == [1, 1, 1] and all(g.shared == 1 for g in task.logprob_groups)
    model = tiny_model("llama", num_layers=2)
    assert_same(token_logprobs(model, task), token_logprobs(model, task, shared_prefix=False))
    with pytest.raises(ValueError, match="cannot be generated"):
        greedy_generate(model, task)


@pytest.mark.parametrize("arch", ["llama", "gemma2"])
def test_greedy_matches_generate(arch, tokenizer):
    model = tiny_model(arch, num_layers=2)
    task = prepare(mixed_samples(), tokenizer, max_new_tokens=5)
    ours = greedy_generate(model, task, batch_size=3)
    for ids, prediction in zip(task.prompt_ids, ours, strict=True):
        out = model.generate(torch.tensor([ids]), max_new_tokens=5, do_sample=False, pad_token_id=0)
        assert prediction == tokenizer.decode(out[0, len(ids) :], skip_special_tokens=True)


def test_greedy_accuracy_applies_the_judge(tokenizer):
    model = tiny_model("llama", num_layers=2)
    kv = KVRetrievalTask(num_records=2, num_pairs=3, positions=[0, 2])
    task = prepare(kv.samples(), tokenizer, generation_slack=kv.generation_slack)
    assert task.max_new_tokens == 38 + kv.generation_slack  # the longest form, ' "' + uuid, in bytes, plus slack
    result = greedy_accuracy(model, task, lambda prediction, sample: sample.position == 0, max_new_tokens=2)
    assert isinstance(result, GreedyResult) and len(result.predictions) == 4
    assert result.accuracy() == 0.5 and result.by_position() == {0: 1.0, 2: 0.0}
    real = greedy_accuracy(model, task, kv.is_correct, max_new_tokens=2)
    assert real.accuracy() == 0.0  # a random tiny model cannot produce a uuid in two bytes


def test_chat_template_samples_are_scored_like_full_strings():
    tok = chat_tokenizer("<s>", "", "</s>")
    samples = PasskeyTask(num_records=1, num_filler=2, positions=[0, 2]).samples()
    task = prepare(samples, tok, chat_template=True)
    assert all(s.chat for s in task.samples)
    assert task.prompt_ids[0][0] == tok.convert_tokens_to_ids("<s>")  # special tokens from the template text
    assert task.samples[0].prefix == apply_chat_template(samples, tok)[0].prefix
    model = tiny_model("llama", num_layers=2)
    assert_same(token_logprobs(model, task), token_logprobs(model, task, shared_prefix=False))


def test_select_k_finds_the_separating_tokens():
    rng = np.random.default_rng(0)
    samples, values = [], []
    for i in range(40):
        position = i % 4
        v = rng.normal(-1.0, 0.05, size=6)
        v[1] -= 0.8 * position  # only the second token depends on the position
        v[2:] = rng.normal(-0.5, 1.0, size=4)  # later tokens are noisy
        values.append(v)
        samples.append(Sample(prefix="p", query="q", answers=["a"], position=position, record_id=str(i), target="t"))
    selection = select_k(TokenLogprobs(samples, values), max_k=6)
    assert selection.k == 2
    assert set(selection.f_statistic) == set(range(1, 7))
    assert selection.f_statistic[2] > selection.f_statistic[1]
    assert list(selection.position_means[2]) == [0, 1, 2, 3]
    assert selection.spread[2] > selection.spread[1]
    with pytest.raises(ValueError, match="two or more gold positions"):
        select_k(TokenLogprobs(samples[:1], values[:1]))


def test_mean_by_position_and_errors(tokenizer):
    samples = KVRetrievalTask(num_records=2, num_pairs=3, positions=[0, 2]).samples()
    assert mean_by_position(samples, [1, 0, 3, 0]) == {0: 2.0, 2: 0.0}
    with pytest.raises(ValueError, match="3 scores for 4 samples"):
        mean_by_position(samples, [1, 2, 3])
    with pytest.raises(ValueError, match="no samples"):
        prepare([], tokenizer)
    with pytest.raises(ValueError, match="batch_size"):
        token_logprobs(tiny_model("llama", num_layers=2), prepare(samples, tokenizer), batch_size=0)


@pytest.mark.integration
def test_shared_prefix_equals_separate_on_smollm2(smollm2):
    model, tok = smollm2
    model = model.float().eval()
    samples = KVRetrievalTask(num_records=2, num_pairs=4, positions=[0, 3], seed=0).samples()
    chat = prepare(samples, tok, chat_template=True)  # tokenisation only: the template keeps boundaries exact
    assert all(chat.exact_boundary) and all(len(g.members) == 4 for g in chat.logprob_groups)  # 2 forms each
    task = prepare(samples, tok)
    assert all(task.exact_boundary)
    assert all(len(g.members) == 4 and g.shared > 200 for g in task.logprob_groups)
    assert_same(token_logprobs(model, task, batch_size=2), token_logprobs(model, task, shared_prefix=False))
    prediction = greedy_generate(model, task, max_new_tokens=3, batch_size=2)[0]
    ids = task.prompt_ids[0]
    out = model.generate(torch.tensor([ids]), max_new_tokens=3, do_sample=False, pad_token_id=tok.pad_token_id)
    assert prediction == tok.decode(out[0, len(ids) :], skip_special_tokens=True)


def test_teacher_forced_exact_match_is_greedy_decoding(tokenizer):
    """exact() is True exactly when greedy decoding writes the target: targets made from the model's own greedy
    output are all exact, the same targets with their first character changed are not; with two answer forms the
    verdict is the form greedy decoding writes."""
    model = tiny_model("llama", num_layers=2)
    printable = tokenizer.convert_tokens_to_ids([chr(c) for c in range(48, 123) if chr(c).isalnum()])
    keep = torch.zeros(model.lm_head.weight.shape[0], dtype=torch.bool)
    keep[printable] = True
    # only letters and digits can win the argmax, so the greedy text decodes back to the same tokens
    model.lm_head.register_forward_hook(lambda module, args, out: out.masked_fill(~keep, -1e4))
    base = KVRetrievalTask(num_records=2, num_pairs=3, positions=[0, 2], seed=5, alt_target_prefixes=()).samples()
    written = greedy_generate(model, prepare(base, tokenizer), max_new_tokens=6)
    assert all(len(w) == 6 and w.isalnum() for w in written), written  # byte tokenizer: a character a token
    own = [dataclasses.replace(s, target=w) for s, w in zip(base, written, strict=True)]
    wrong = [
        dataclasses.replace(s, target=chr((ord(w[0]) + 1) % 128 or 65) + w[1:])
        for s, w in zip(base, written, strict=True)
    ]
    assert token_logprobs(model, prepare(own, tokenizer)).exact().all()
    assert not token_logprobs(model, prepare(wrong, tokenizer)).exact().any()
    # both forms offered, in either order: the one greedy writes is chosen and scored
    both = [dataclasses.replace(w, alt_targets=(o.target,)) for w, o in zip(wrong, own, strict=True)]
    task = prepare(both, tokenizer)
    assert task.forms is not None and all(len(rows) == 2 for rows in task.forms)
    lp = token_logprobs(model, task)
    assert lp.exact().all()
    single = token_logprobs(model, prepare(own, tokenizer))
    assert_same(lp, single)
    assert_same(token_logprobs(model, task, shared_prefix=False), single)
    # neither form exact: the more probable one is kept
    other = [dataclasses.replace(w, alt_targets=(w.target[::-1],)) for w in wrong]
    lp_other = token_logprobs(model, prepare(other, tokenizer))
    a = token_logprobs(model, prepare(wrong, tokenizer))
    b = token_logprobs(model, prepare([dataclasses.replace(w, target=w.target[::-1]) for w in wrong], tokenizer))
    for chosen, x, y in zip(lp_other.values, a.values, b.values, strict=True):
        np.testing.assert_allclose(chosen, x if x.sum() >= y.sum() else y, atol=ATOL)
