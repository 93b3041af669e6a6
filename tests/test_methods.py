"""The named methods: one record each, and options that are read or refused, never ignored (issue 48).

* A method registered in one place (:func:`specdec.methods.register`) is built, listed, ranked for the default and
  accepted by the command line, with nothing else edited.
* Every :class:`MethodOptions` field set for a method that does not read it is refused by ``build_method``, naming
  the field and the ones the method reads (methods x fields, all enumerated); set for a method that reads it, it
  passes the check.
* No option changes another's meaning: the pairs that would are refused where the options are built.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from specdec.cli import main
from specdec.generate import SpeculativeGenerator, StopCondition, VanillaGenerator
from specdec.method_options import ADAPTIVE_OPTIONS, MethodOptions
from specdec.methods import (
    METHODS,
    Method,
    MethodOptionError,
    build_method,
    default_method,
    method,
    method_names,
    preference,
    register,
    unregister,
)
from specdec.models import tiny_llama
from specdec.sampling import SamplingParams
from specdec.target import HFTarget
from specdec.trees import DynamicTreePolicy

#: A valid value other than the default for every field (so setting it is visible in ``given``).
SET = {
    "topk": 3,
    "depth": 2,
    "total_tokens": 8,
    "max_total_tokens": 16,
    "adapt_depth": False,
    "deferred_budget": True,
    "small_lm_layers": 1,
    "head_dir": Path("some-head"),
    "draft_weights": "packed",
    "draft_shortlist": False,
    "sampled_tree": "r3",
    "draft_temperature_ratio": 0.5,
    "sampled_level_gate": True,
    "corpus": Path("some-corpus.safetensors"),
}


def test_every_field_has_a_sample_value():
    assert set(SET) == set(MethodOptions.model_fields)
    for name, value in SET.items():
        assert MethodOptions(**{name: value}).given == {name}


@pytest.mark.parametrize("name", list(METHODS))
def test_an_option_a_method_does_not_read_is_refused(name):
    record = method(name)
    for field, value in SET.items():
        options = MethodOptions(**{field: value})
        if field in record.reads:
            record.check(options)  # read: passes
            assert record.narrow(options).given == {field}
            continue
        with pytest.raises(MethodOptionError, match=rf"method '{name}' does not read {field} \(it reads: "):
            build_method(name, None, options)  # refused before anything is built
        assert record.narrow(options).given == frozenset()  # a multi-method caller's explicit narrowing


def test_what_the_methods_read():
    """The table the records imply (a change here is a change of the command line's and the bench's behaviour)."""
    reads = {name: m.reads for name, m in METHODS.items()}
    assert reads["vanilla"] == frozenset()
    assert reads["retrieval"] == {"corpus"}
    assert reads["ngram"] == {"topk", "depth", "total_tokens", *ADAPTIVE_OPTIONS}
    assert reads["small-lm"] == reads["ngram"] | {
        "small_lm_layers",
        "sampled_tree",
        "draft_temperature_ratio",
        "sampled_level_gate",
    }
    assert reads["eagle1-static"] == {"head_dir", "draft_weights", "draft_shortlist"}
    assert reads["eagle2"] == reads["hass"] == reads["eagle1-static"] | reads["small-lm"] - {"small_lm_layers"}
    assert reads["eagle3"] == reads["eagle2"] - {"draft_shortlist"}  # EAGLE-3: own vocabulary
    assert reads["composite"] == reads["eagle3"] | {"corpus"}


def test_options_that_would_change_each_other_are_refused():
    for adaptive in ADAPTIVE_OPTIONS:
        with pytest.raises(ValueError, match=f"{adaptive} set the adaptive budget, and total_tokens=8 fixes"):
            MethodOptions(total_tokens=8, **{adaptive: SET[adaptive]})
    with pytest.raises(ValueError, match="draft_temperature_ratio sets the sampled tree's draws"):
        MethodOptions(sampled_tree=None, draft_temperature_ratio=0.5)
    with pytest.raises(ValueError, match="sampled_level_gate gates a sampled tree of a fixed shape, not 'menu'"):
        MethodOptions(sampled_tree="menu", sampled_level_gate=True)
    for bad in ({"topk": 0}, {"total_tokens": 1}, {"small_lm_layers": 0}, {"nope": 1}):
        with pytest.raises(ValueError):
            MethodOptions(**bad)
    with pytest.raises(ValueError):  # frozen
        MethodOptions().topk = 3
    o = MethodOptions(topk=3).replace(depth=2)
    assert o.given == {"topk", "depth"} and (o.topk, o.depth) == (3, 2)


def _chain_method(target: HFTarget, o: MethodOptions) -> SpeculativeGenerator:
    """A new method for the test: the small-LM drafter on a fixed chain of ``o.depth`` nodes."""
    from specdec.drafters import SmallLMDrafter

    policy = DynamicTreePolicy(topk=1, depth=o.depth, total_tokens=o.depth + 1)
    return SpeculativeGenerator(target, SmallLMDrafter.from_target(target, 1), policy)


@pytest.fixture
def registered():
    record = register(Method("test-chain", _chain_method, rank=-1, extra_reads=("depth",), summary="a test"))
    try:
        yield record
    finally:
        unregister("test-chain")
    assert "test-chain" not in METHODS


def test_a_method_registered_in_one_place_is_everywhere(registered, monkeypatch, tmp_path, capsys):
    """One :func:`register` call: built by name, listed, ranked first for the default, read options checked, and
    run by ``specdec generate`` (no other table edited)."""
    assert "test-chain" in method_names() and preference()[0] == "test-chain" and default_method() == "test-chain"
    model = tiny_llama(vocab_size=32, hidden_size=32, num_layers=2, seed=1)
    target = HFTarget(model, max_len=64)
    gen = build_method("test-chain", target, MethodOptions(depth=3))
    prompt, stop = torch.tensor([1, 2, 3, 4]), StopCondition(max_new_tokens=8)
    assert gen.generate(prompt, SamplingParams(), stop).tokens == (
        VanillaGenerator(HFTarget(model, max_len=64)).generate(prompt, SamplingParams(), stop).tokens
    )
    with pytest.raises(MethodOptionError, match="does not read topk"):
        build_method("test-chain", target, MethodOptions(topk=2))
    with pytest.raises(ValueError, match="already registered"):
        register(registered)

    from specdec import models
    from tests.test_bench import FakeTokenizer

    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(models, "load_smollm2", lambda **kwargs: (model, FakeTokenizer()))
    assert main(["generate", "abc", "--max-new-tokens", "4", "--no-chat"]) == 0  # the default: test-chain
    assert "test-chain" in capsys.readouterr().err


def test_unknown_names_are_refused_with_the_choices():
    with pytest.raises(ValueError, match="unknown method 'nope'; choose from vanilla, ngram"):
        build_method("nope", None)
    with pytest.raises(ValueError, match="unknown method 'nope'"):
        unregister("nope")


@pytest.mark.parametrize("command", ["generate", "bench"])
def test_help_lists_every_method(command, capsys):
    assert main([command, "--help"]) == 0
    out = " ".join(capsys.readouterr().out.split()).replace("- ", "-")  # argparse wraps lines, at hyphens too
    assert all(f"{name} (" in out for name in METHODS)
