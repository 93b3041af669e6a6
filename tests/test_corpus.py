"""A retrieval corpus of the target's own text: built from regenerated data, chosen by ``MethodOptions.corpus``.

What these tests could catch: a corpus built from the prompts instead of the responses, or from shards of another
temperature; a file for another vocabulary taken; an option that does not reach the drafter (retrieval then
proposes nothing where only the corpus matches); a corpus that changes greedy output (it must not: retrieval only
proposes, the target decides).
"""

from __future__ import annotations

import pytest
import torch

from specdec.cli import main
from specdec.drafters.retrieval import CorpusError, RetrievalCorpus, RetrievalDrafter
from specdec.generate import StopCondition, VanillaGenerator
from specdec.interfaces import Continuation, TargetHidden
from specdec.methods import MethodOptions, build_method, load_corpus
from specdec.models import MissingAssetError
from specdec.sampling import SamplingParams
from specdec.target import HFTarget
from specdec.train.regenerate import regenerate
from specdec.train.shards import response_sequences
from tests.test_train_regenerate import CONFIG, VOCAB, StubTokenizer, model, prompts

NO_HIDDEN = TargetHidden()


def test_the_data_corpus_command_keeps_the_responses_of_the_chosen_temperatures(tmp_path, capsys):
    data, out = tmp_path / "data", tmp_path / "corpus.safetensors"
    manifest = regenerate(model(), StubTokenizer(), data, 10, CONFIG, prompts=prompts(10), progress=False)
    greedy, _ = response_sequences(data, (0.0,))
    everything, _ = response_sequences(data)
    assert len(greedy) == 6 and len(everything) == 10  # shards at 0, 0.7, 0: 4 + 2 greedy responses
    prompt_ids = {tuple(p.ids) for p in prompts(10)}
    assert not any(tuple(r[: len(p)]) == p for r in greedy for p in prompt_ids)  # the prompts are cut off

    assert main(["data", "corpus", "--data", str(data), "--out", str(out)]) == 0
    assert f"{out}: 6 responses" in capsys.readouterr().out
    ids, metadata = RetrievalCorpus.read(out)
    assert ids.dtype == torch.int32
    assert ids.tolist() == [t for r in greedy for t in (*r, RetrievalCorpus.SEPARATOR)]
    assert metadata["vocab_size"] == str(VOCAB) and metadata["model"] == manifest["model"]
    with pytest.raises(CorpusError, match=f"built for a vocabulary of {VOCAB} tokens"):
        RetrievalCorpus.load(out, vocab_size=VOCAB + 1)
    assert main(["data", "corpus", "--data", str(data), "--out", str(out), "--temperatures", "0.3"]) == 2
    assert "lists no shard generated at temperature 0.3" in capsys.readouterr().err
    assert main(["data", "corpus", "--data", str(data), "--out", str(tmp_path / "no" / "c.safetensors")]) == 2
    assert "folder" in capsys.readouterr().err


def test_the_corpus_option_reaches_retrieval_and_keeps_greedy_output(tmp_path):
    """On a tiny target, a corpus holding the target's own greedy continuation: retrieval+corpus accepts more and
    emits exactly vanilla's tokens; the same method without the option proposes nothing from the corpus."""
    target = HFTarget(model(), max_len=64)
    prompt = torch.tensor(prompts(1)[0].ids)
    stop = StopCondition(max_new_tokens=12, eos_token_ids=())
    alone = VanillaGenerator(target).generate(prompt, SamplingParams(), stop).tokens
    path = tmp_path / "own.safetensors"
    RetrievalCorpus.build([list(alone)], "tiny", path, vocab_size=VOCAB)
    load_corpus.cache_clear()
    with_corpus = build_method("retrieval", target, MethodOptions(corpus=path))
    without = build_method("retrieval", target)
    out = with_corpus.generate(prompt, SamplingParams(), stop)
    plain = without.generate(prompt, SamplingParams(), stop)
    assert list(out.tokens) == list(plain.tokens) == list(alone)
    assert out.metrics.cycles < plain.metrics.cycles  # the corpus continuation was proposed and accepted


def test_a_corpus_that_cannot_serve_the_target_is_refused_by_name(tmp_path):
    target = HFTarget(model(), max_len=64)
    load_corpus.cache_clear()
    with pytest.raises(MissingAssetError, match="no retrieval corpus at .*nowhere.safetensors; build one with"):
        build_method("retrieval", target, MethodOptions(corpus=tmp_path / "nowhere.safetensors"))
    other = tmp_path / "other.safetensors"
    RetrievalCorpus.build([[1, 2, 3]], "bigger", other, vocab_size=VOCAB * 2)
    with pytest.raises(CorpusError, match=f"built for a vocabulary of {VOCAB * 2} tokens .* not {VOCAB}"):
        build_method("retrieval", target, MethodOptions(corpus=other))
    with pytest.raises(CorpusError, match=f"token id {VOCAB} is outside the vocabulary"):
        RetrievalCorpus.build([[VOCAB]], "tiny", tmp_path / "x.safetensors", vocab_size=VOCAB)


def test_an_int64_corpus_file_still_loads(tmp_path):
    """Files written before int32 storage: same format name, int64 tokens."""
    from safetensors.torch import save_file

    from specdec.drafters.retrieval import _digest

    ids = torch.tensor([5, 6, 7, -1], dtype=torch.long)
    path = tmp_path / "old.safetensors"
    metadata = {"format": RetrievalCorpus.FORMAT, "tokenizer": "tok", "sha256": _digest(ids)}
    save_file({"tokens": ids}, str(path), metadata=metadata)
    drafter = RetrievalDrafter(10, corpus=RetrievalCorpus.load(path, "tok"))
    drafter.prefill(torch.tensor([1, 5]), NO_HIDDEN)
    assert drafter.propose(6) == [Continuation((7,), 2)]
