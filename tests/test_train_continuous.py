"""Continuous batching for data generation: every response equals the one its prompt gets alone."""

from __future__ import annotations

import pytest
import torch

from specdec.generate import StopCondition, VanillaGenerator
from specdec.kvcache import CacheFullError
from specdec.models import tiny_llama
from specdec.sampling import SamplingParams
from specdec.target import HFTarget
from specdec.train import continuous
from specdec.train.continuous import Job, generate_continuous
from specdec.train.features import FeatureSpec, target_hidden

VOCAB, EOS = 64, 1


def model():
    return tiny_llama(vocab_size=VOCAB, hidden_size=32, num_layers=2, seed=3, logit_scale=0.5)


def jobs(n: int, temperature: float = 0.0) -> list[Job]:
    g = torch.Generator().manual_seed(1)
    out = []
    for i in range(n):
        length = int(torch.randint(2, 12, (1,), generator=g))
        out.append(Job(i, torch.randint(2, VOCAB, (length,), generator=g).tolist(), temperature, seed=100 + i))
    return out


def alone(m, job: Job, max_new: int) -> list[int]:
    stop = StopCondition(max_new_tokens=max_new, eos_token_ids=[EOS])
    return VanillaGenerator(HFTarget(m, max_len=64)).generate(torch.tensor(job.ids), SamplingParams(), stop).tokens


class Counting:
    """Counts the batch's compactions, admissions and shrinks (wraps the private class under test)."""

    def __init__(self, monkeypatch):
        self.calls = {"compact": 0, "admit": 0, "keep_rows": 0}
        for name in self.calls:
            original = getattr(continuous._Batch, name)

            def wrapped(batch, *args, _name=name, _original=original):
                self.calls[_name] += 1
                return _original(batch, *args)

            monkeypatch.setattr(continuous._Batch, name, wrapped)


def test_greedy_responses_equal_one_by_one_decoding_through_refills_and_compactions(monkeypatch):
    m, count = model(), Counting(monkeypatch)
    work = jobs(20)
    got = {
        f.job.key: f
        for f in generate_continuous(
            m, work, batch_size=3, max_new_tokens=25, eos_token_id=EOS, capacity=40, compact_at=8
        )
    }
    assert sorted(got) == list(range(20))
    assert count.calls["admit"] > 3 and count.calls["compact"] > 0 and count.calls["keep_rows"] > 0
    ends = set()
    for job in work:
        item = got[job.key]
        assert item.response == alone(m, job, 25)  # refills, gaps, compactions and shrinking change nothing
        ends.add(item.finished)
        assert item.finished == (1 if item.response[-1] == EOS else 0)
    assert ends == {0, 1}, "the tiny model must end some responses at EOS and some at the budget"


def test_a_sampled_response_depends_on_its_seed_not_on_its_batch():
    m = model()
    work = jobs(9, temperature=0.9)
    run = dict(max_new_tokens=12, eos_token_id=EOS)
    batched = {f.job.key: f.response for f in generate_continuous(m, work, batch_size=4, **run)}
    single = {f.job.key: f.response for f in generate_continuous(m, work, batch_size=1, **run)}
    assert batched == single
    reseeded = [Job(j.key, j.ids, j.temperature, j.seed + 1) for j in work]
    other = {f.job.key: f.response for f in generate_continuous(m, reseeded, batch_size=4, **run)}
    assert other != batched  # the seed does decide the draws
    greedy = {f.job.key: f.response for f in generate_continuous(m, jobs(9), batch_size=4, **run)}
    assert greedy != batched


def test_responses_come_out_in_finishing_order_and_rows_refill_at_once():
    m = model()
    work = jobs(12)
    order = [f.job.key for f in generate_continuous(m, work, batch_size=4, max_new_tokens=25, eos_token_id=EOS)]
    assert sorted(order) == list(range(12)) and order != list(range(12))  # short answers leave first


def test_bad_input_is_refused():
    m = model()
    with pytest.raises(ValueError, match="does not fit"):
        list(generate_continuous(m, [Job(0, [2] * 30)], batch_size=2, max_new_tokens=20, eos_token_id=EOS, capacity=40))
    with pytest.raises(ValueError, match="loop_window"):
        list(generate_continuous(m, jobs(2), batch_size=2, max_new_tokens=5, eos_token_id=EOS, loop_window=1))
    with pytest.raises(ValueError, match="top_p"):
        list(generate_continuous(m, jobs(2), batch_size=2, max_new_tokens=5, eos_token_id=EOS, top_p=0.0))
    assert issubclass(CacheFullError, ValueError)


def test_a_sliding_window_model_is_refused():
    m = model()
    m.config.sliding_window = 4
    m.config.layer_types = ["sliding_attention"] * m.config.num_hidden_layers
    with pytest.raises(ValueError, match="sliding-window"):
        list(generate_continuous(m, jobs(2), batch_size=2, max_new_tokens=5, eos_token_id=EOS))


def relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).norm(dim=-1).max() / b.float().norm(dim=-1).min())


def test_captured_features_equal_a_separate_forward_over_the_finished_sequence():
    m = tiny_llama(vocab_size=VOCAB, hidden_size=32, num_layers=4, seed=3, logit_scale=0.5)
    spec = FeatureSpec(final=True, layers=(0, 2, 3))
    work = jobs(10) + [Job(10 + j.key, j.ids, 0.8, j.seed) for j in jobs(4)]
    run = dict(batch_size=3, max_new_tokens=20, eos_token_id=EOS, capacity=40, compact_at=8)
    got = list(generate_continuous(m, work, capture=spec, capture_dtype=torch.float32, **run))
    plain = {f.job.key: f.response for f in generate_continuous(m, work, **run)}
    assert len(got) == len(work)
    for item in got:
        assert item.response == plain[item.job.key]  # capturing changes no token
        sequence = torch.tensor(item.job.ids + item.response)
        with torch.no_grad():
            final, fused = target_hidden(m, sequence[None], spec)
        assert item.final.shape == final[0].shape and item.fused.shape == fused[0].shape
        assert relative_error(item.final, final[0]) < 1e-4 and relative_error(item.fused, fused[0]) < 1e-4
    shifted = got[0].final.roll(1, dims=0)  # negative control: one position off is far off
    sequence = torch.tensor(got[0].job.ids + got[0].response)
    with torch.no_grad():
        assert relative_error(shifted, target_hidden(m, sequence[None], spec)[0][0]) > 1e-2
