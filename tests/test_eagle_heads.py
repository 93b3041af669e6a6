"""EAGLE-1 / EAGLE-3 heads and drafters: module math, explicit attention API, and drafter == full-sequence forward."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from transformers import LlamaConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

from specdec.attention import additive_mask
from specdec.backends import Int8Linear, PackedLinear
from specdec.drafters.eagle1 import EagleDrafter
from specdec.drafters.eagle3 import Eagle3Drafter
from specdec.eagle.config import EagleConfig, default_aux_layers
from specdec.eagle.heads import Eagle1Head, Eagle3Head
from specdec.eagle.layers import EagleAttention, causal_bias
from specdec.interfaces import TargetHidden, VocabMismatchError
from specdec.models import tiny_llama
from specdec.tree import PartialTree

V, H = 16, 32


def make_config(**kw) -> EagleConfig:
    raw = dict(hidden_size=H, intermediate_size=48, num_attention_heads=4, num_key_value_heads=2, vocab_size=V)
    raw.update(kw)
    return EagleConfig.from_hf(raw)


def randomize(module: torch.nn.Module, seed: int, std: float = 0.15) -> None:
    """Random weights everywhere (norm weights too, so a skipped or swapped norm changes the output)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            noise = torch.randn(p.shape, generator=g)
            p.copy_(1.0 + 0.3 * noise if "norm" in name else std * noise)


def eagle1_head(seed: int = 0, **kw) -> Eagle1Head:
    head = Eagle1Head(make_config(**kw)).eval()
    randomize(head, seed)
    return head


def eagle3_head(seed: int = 0, draft_vocab: int = 10, **kw) -> Eagle3Head:
    head = Eagle3Head(make_config(draft_vocab_size=draft_vocab, **kw)).eval()
    randomize(head, seed)
    if draft_vocab < V:
        ids = torch.randperm(V, generator=torch.Generator().manual_seed(seed + 1))[:draft_vocab].sort().values
        head.set_vocab_map(ids)
    return head


@pytest.fixture(scope="module")
def target():
    return tiny_llama(vocab_size=V, hidden_size=H, num_layers=4)


def target_hidden(target, tokens: list[int]):
    with torch.no_grad():
        out = target(torch.tensor([tokens]), output_hidden_states=True)
    return [h[0] for h in out.hidden_states]


# ----------------------------------------------------------------------------------------------------- modules


def test_attention_with_past_equals_full_causal_forward():
    torch.manual_seed(0)
    attn = EagleAttention(make_config(qkv_bias=True), input_size=2 * H).eval()
    x = torch.randn(2, 7, 2 * H)
    pos = torch.arange(7).expand(2, 7)
    with torch.no_grad():
        full, (k_full, v_full) = attn(x, pos, causal_bias(7))
        first, kv = attn(x[:, :4], pos[:, :4], causal_bias(4))
        second, (k2, v2) = attn(x[:, 4:], pos[:, 4:], causal_bias(3, past=4), past_kv=kv)
    assert k_full.shape == (2, 2, 7, H // 4)
    torch.testing.assert_close(torch.cat((first, second), 1), full, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(k2, k_full[:, :, 4:])
    torch.testing.assert_close(v2, v_full[:, :, 4:])


def test_attention_custom_mask_isolates_rows():
    """A row that may only see itself equals that row run alone at its position (what tree/TTT masks rely on)."""
    torch.manual_seed(1)
    attn = EagleAttention(make_config(), input_size=H).eval()
    x = torch.randn(1, 5, H)
    pos = torch.tensor([[0, 1, 2, 3, 9]])
    mask = torch.tril(torch.ones(5, 5, dtype=torch.bool))
    mask[4, :4] = False
    with torch.no_grad():
        out, _ = attn(x, pos, additive_mask(mask, torch.float32))
        alone, _ = attn(x[:, 4:], pos[:, 4:], causal_bias(1))
        causal, _ = attn(x, pos, causal_bias(5))
    torch.testing.assert_close(out[:, 4], alone[:, 0], atol=1e-5, rtol=1e-5)
    assert not torch.allclose(causal[:, 4], alone[:, 0], atol=1e-3)


def test_rope_theta_default_and_from_config():
    assert make_config().rope_theta == 10000.0
    assert make_config(rope_theta=None).rope_theta == 10000.0
    assert make_config(rope_parameters={"rope_theta": 500000.0, "rope_type": "default"}).rope_theta == 500000.0
    torch.manual_seed(2)
    a = EagleAttention(make_config(), H).eval()
    b = EagleAttention(make_config(rope_theta=100.0), H).eval()
    b.load_state_dict(a.state_dict())
    x, pos = torch.randn(1, 4, H), torch.arange(4)[None]
    with torch.no_grad():
        assert not torch.allclose(a(x, pos, causal_bias(4))[0], b(x, pos, causal_bias(4))[0], atol=1e-4)
    with pytest.raises(ValueError, match="rope_scaling"):
        make_config(rope_scaling={"rope_type": "yarn", "factor": 2.0})


def test_rope_scaling_variants():
    torch.manual_seed(5)
    base = EagleAttention(make_config(), H).eval()
    x = torch.randn(1, 4, H)
    pos = torch.tensor([[0, 3, 5, 11]])

    def run(attn_cfg, positions):
        attn = EagleAttention(attn_cfg, H).eval()
        attn.load_state_dict(base.state_dict())
        with torch.no_grad():
            return attn(x, positions, causal_bias(4))[0]

    default = run(make_config(), pos)
    # linear: positions divided by the factor ("type" is the legacy spelling of "rope_type")
    torch.testing.assert_close(run(make_config(rope_scaling={"type": "linear", "factor": 2.0}), 2 * pos), default)
    # dynamic NTK: unchanged below max_position_embeddings, rescaled beyond
    dynamic = make_config(rope_scaling={"type": "dynamic", "factor": 2.0}, max_position_embeddings=8)
    torch.testing.assert_close(run(dynamic, pos.clamp(max=7)), run(make_config(), pos.clamp(max=7)))
    assert not torch.allclose(run(dynamic, pos), default, atol=1e-4)
    llama3 = make_config(
        rope_scaling={
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 16,
        }
    )
    assert not torch.allclose(run(llama3, pos), default, atol=1e-4)
    # llama3 frequencies agree with transformers' own implementation of that scaling
    hf = LlamaConfig(
        hidden_size=H,
        num_attention_heads=4,
        rope_parameters={"rope_type": "llama3", "rope_theta": 10000.0, **llama3.rope_scaling},
    )
    expected, _ = ROPE_INIT_FUNCTIONS["llama3"](hf, None)
    torch.testing.assert_close(EagleAttention(llama3, H).rotary.inv_freq, expected)


def _attn_single(attn: EagleAttention, x: torch.Tensor) -> torch.Tensor:
    """Attention over one position by hand: softmax over a single key is 1, so the output is o_proj(repeat(v))."""
    v = attn.v_proj(x).view(attn.num_kv_heads, attn.head_dim)
    return attn.o_proj(v.repeat_interleave(attn.num_heads // attn.num_kv_heads, 0).reshape(-1))


def test_eagle1_layer_math_embedding_first_no_input_norm():
    head = eagle1_head(3)
    assert not hasattr(head.layers[0], "input_layernorm")
    torch.manual_seed(3)
    emb, feat = torch.randn(H), torch.randn(H)
    with torch.no_grad():
        out, _ = head(emb[None, None], feat[None, None], torch.zeros(1, 1, dtype=torch.long), causal_bias(1))
        layer = head.layers[0]
        x = head.fc(torch.cat((emb, feat)))
        h = x + _attn_single(layer.self_attn, x)
        expected = h + layer.mlp(layer.post_attention_layernorm(h))
        x_swapped = head.fc(torch.cat((feat, emb)))
    torch.testing.assert_close(out[0, 0], expected, atol=1e-5, rtol=1e-5)
    h_swapped = x_swapped + _attn_single(layer.self_attn, x_swapped)
    assert not torch.allclose(out[0, 0], h_swapped + layer.mlp(layer.post_attention_layernorm(h_swapped)))


def test_eagle3_midlayer_math_and_logits():
    head = eagle3_head(4)
    torch.manual_seed(4)
    emb, hid = torch.randn(H), torch.randn(H)
    with torch.no_grad():
        out, _ = head(emb[None, None], hid[None, None], torch.zeros(1, 1, dtype=torch.long), causal_bias(1))
        m = head.midlayer
        x = torch.cat((m.input_layernorm(emb), m.hidden_norm(hid)))
        r = hid + _attn_single(m.self_attn, x)
        expected = r + m.mlp(m.post_attention_layernorm(r))
        logits = head.logits(out)
    torch.testing.assert_close(out[0, 0], expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(logits[0, 0], head.lm_head(head.norm(expected)), atol=1e-5, rtol=1e-5)
    assert head.midlayer.self_attn.q_proj.weight.shape == (H, 2 * H)
    assert head.fc.weight.shape == (H, 3 * H)


def test_eagle3_vocab_mapping():
    head = eagle3_head(5, draft_vocab=6)
    ids = torch.tensor([1, 4, 5, 9, 12, 15])
    head.set_vocab_map(ids)
    assert head.d2t.dtype == torch.int64 and head.t2d.dtype == torch.bool
    assert torch.equal(head.to_target_ids(torch.arange(6)), ids)
    assert torch.equal(head.t2d.nonzero().flatten(), ids)
    draft_logits = torch.randn(2, 6)
    full = head.target_logits(draft_logits)
    assert full.shape == (2, V)
    torch.testing.assert_close(full[:, ids], draft_logits)
    others = torch.ones(V, dtype=torch.bool)
    others[ids] = False
    assert torch.isneginf(full[:, others]).all()


# ----------------------------------------------------------------------------------------------------- drafters


def reference_path_logits(head, hidden_committed, tokens_committed, path_tokens, logits_fn):
    """Logits at each node of one root path by full causal forwards without any cache.

    Pairs: (hidden_t, token_{t+1}) for committed t, then (hidden_{c-1}, root), then (predicted hidden of the previous
    path node, path token); positions 0, 1, 2, ...
    """
    hiddens = list(hidden_committed)
    tokens = list(tokens_committed[1:]) + [path_tokens[0]]
    results = []
    for j in range(len(path_tokens)):
        n = len(tokens)
        with torch.no_grad():
            out, _ = head(
                head.embed(torch.tensor(tokens))[None],
                torch.stack(hiddens)[None],
                torch.arange(n)[None],
                causal_bias(n),
            )
        last = out[0, -1]
        results.append(logits_fn(last[None])[0])
        if j + 1 < len(path_tokens):
            hiddens.append(last)
            tokens.append(path_tokens[j + 1])
    return results


def root_path(tree: PartialTree, node: int) -> list[int]:
    path = [node]
    while tree.parents[path[-1]] >= 0:
        path.append(int(tree.parents[path[-1]]))
    return path[::-1]


def drive(drafter, target, features_of, hidden_of, ref_hidden, logits_fn, seed: int):
    """Prefill + several cycles; every expanded node's logits must equal the cache-free reference."""
    g = torch.Generator().manual_seed(seed)
    committed = torch.randint(0, V, (5,), generator=g).tolist()
    hs = target_hidden(target, committed)
    drafter.prefill(torch.tensor(committed), hidden_of(hs, 0, len(committed)))

    def check(tree: PartialTree, nodes: torch.Tensor, logits: torch.Tensor) -> None:
        all_hs = target_hidden(target, committed)
        hidden_committed = ref_hidden(features_of(all_hs))
        for row, node in enumerate(nodes.tolist()):
            path = root_path(tree, node)
            ref = reference_path_logits(
                drafter.head, hidden_committed, committed, [int(tree.tokens[i]) for i in path], logits_fn
            )[-1]
            torch.testing.assert_close(logits[row], ref, atol=1e-4, rtol=1e-4)
            assert torch.isfinite(logits[row]).any()

    def grow(root: int, levels: list[list[tuple[int, int]]]) -> PartialTree:
        """levels: for each level, (parent index among the previous level's new nodes, token) pairs."""
        tree = PartialTree(torch.tensor(root), 32)
        frontier = torch.tensor([0])
        check(tree, frontier, drafter.expand(tree, frontier))
        for level in levels:
            parents = torch.tensor([int(frontier[p]) for p, _ in level])
            new = tree.add(parents, torch.tensor([t for _, t in level]), torch.zeros(len(level)))
            order = torch.randperm(len(level), generator=g)  # frontier order and node ids need not agree
            check(tree, new[order], drafter.expand(tree, new[order]))
            frontier = new
        return tree

    def commit(tree: PartialTree, path_nodes: list[int]) -> None:
        tokens = [int(tree.tokens[i]) for i in path_nodes]
        c = len(committed)
        committed.extend(tokens)
        hs_all = target_hidden(target, committed)
        drafter.commit(torch.tensor(tokens), hidden_of(hs_all, c, len(committed)))

    # cycle 1: a 3-level tree, accept root + 2 nodes
    tree = grow(3, [[(0, 1), (0, 2), (0, 7)], [(1, 4), (1, 5), (0, 6)], [(2, 8)]])
    commit(tree, [0, 2, 6])
    # cycle 2: root-only tree, no expand at all
    commit(PartialTree(torch.tensor(9), 4), [0])
    # cycle 3: tree expanded, only the root accepted
    tree = grow(11, [[(0, 12), (0, 13)]])
    commit(tree, [0])
    # cycle 4: a tree grown and abandoned, then a second tree under the same root; accept 3 nodes of the second
    grow(14, [[(0, 1)], [(0, 2)]])
    tree = grow(14, [[(0, 15), (0, 0)], [(1, 3)], [(0, 4), (0, 5)]])
    commit(tree, [0, 2, 4, 5])
    # cycle 5: back to a plain tree
    grow(6, [[(0, 7), (0, 8), (0, 9)], [(2, 10)]])


def final_hidden(hs, start, end):
    return TargetHidden(final=hs[-1][start:end])


@pytest.mark.parametrize("weights", ["packed", "stock"])  # exact weights: the math must match to 1e-4
@pytest.mark.parametrize("seed", [0, 1])
def test_eagle1_drafter_matches_full_forward(target, seed, weights):
    head = eagle1_head(seed + 10)
    drafter = EagleDrafter(head, target, max_len=64, weights=weights)
    assert drafter.execution.weights == weights
    assert drafter.hidden_request.final and not drafter.hidden_request.layers
    assert drafter.vocab_size == V
    # the feature is what the target feeds its lm_head
    hs = target_hidden(target, [1, 2, 3])
    with torch.no_grad():
        torch.testing.assert_close(target.lm_head(hs[-1]), target(torch.tensor([[1, 2, 3]])).logits[0])
    drive(
        drafter,
        target,
        features_of=lambda hs: hs[-1],
        hidden_of=final_hidden,
        ref_hidden=lambda f: f,
        logits_fn=lambda out: target.lm_head(out).float(),
        seed=seed,
    )


@pytest.mark.parametrize(("layers", "weights"), [(None, "packed"), ((3, 0, 1), "packed"), (None, "stock")])
def test_eagle3_drafter_matches_full_forward(target, layers, weights):
    head = eagle3_head(20, draft_vocab=10)
    drafter = Eagle3Drafter(head, target, max_len=64, layers=layers, weights=weights)
    used = layers or default_aux_layers(4)
    assert drafter.hidden_request.layers == used and not drafter.hidden_request.final

    def hidden_of(hs, start, end):
        return TargetHidden(layers={i: hs[i][start:end] for i in set(used)})

    def features_of(hs):
        return torch.cat([hs[i] for i in used], dim=-1)

    drive(
        drafter,
        target,
        features_of=features_of,
        hidden_of=hidden_of,
        ref_hidden=lambda f: head.project(f),
        logits_fn=lambda out: head.target_logits(head.logits(out)),
        seed=7,
    )


def test_eagle1_drafter_shortlist_matches_full_forward(target):
    """Drafting over a shortlist = the full lm_head's logits at the shortlist ids, -inf (q = 0) elsewhere."""
    head = eagle1_head(30)
    ids = torch.tensor([0, 2, 3, 5, 8, 9, 13, 15])
    drafter = EagleDrafter(head, target, max_len=64, draft_vocab=ids, weights="packed")
    assert isinstance(drafter.lm_head, PackedLinear) and drafter.lm_head.out_features == ids.shape[0]
    outside = torch.ones(V, dtype=torch.bool)
    outside[ids] = False

    def logits_fn(out):
        full = target.lm_head(out).float()
        return full.masked_fill(outside, float("-inf"))

    drive(
        drafter,
        target,
        features_of=lambda hs: hs[-1],
        hidden_of=final_hidden,
        ref_hidden=lambda f: f,
        logits_fn=logits_fn,
        seed=3,
    )


def _prefilled_pair(target, kind: str) -> tuple[tuple, list[PartialTree]]:
    """Two identical drafters of ``kind`` (EAGLE-3 with a 10-token draft vocabulary, EAGLE-1 with or without an
    8-token shortlist) prefilled on the same prompt, and a fresh tree for each."""

    def make():
        if kind == "eagle3":
            return Eagle3Drafter(eagle3_head(40, draft_vocab=10), target, max_len=64, weights="stock")
        ids = torch.tensor([0, 2, 3, 5, 8, 9, 13, 15]) if kind == "eagle1-shortlist" else None
        return EagleDrafter(eagle1_head(41), target, max_len=64, draft_vocab=ids, weights="stock")

    pair = make(), make()
    prompt = torch.tensor([1, 4, 2, 7, 3])
    hs = target_hidden(target, prompt.tolist())
    hidden = TargetHidden(final=hs[-1], layers=dict(enumerate(hs)))
    for d in pair:
        d.prefill(prompt, hidden)
    return pair, [PartialTree(torch.tensor(6), 128) for _ in range(2)]


@pytest.mark.parametrize("kind", ["eagle1", "eagle1-shortlist", "eagle3"])
def test_expand_draft_placed_at_its_ids_is_expand(target, kind):
    """``expand_draft``'s ``[F, V_d]`` logits put at their target ids (``-inf`` elsewhere) are the ``expand`` row."""
    (full, draft), trees = _prefilled_pair(target, kind)
    frontier = torch.tensor([0])
    for _ in range(3):
        row = full.expand(trees[0], frontier)
        logits, ids = draft.expand_draft(trees[1], frontier)
        assert (ids is None) == (kind == "eagle1")
        assert logits.shape[-1] == {"eagle3": 10, "eagle1-shortlist": 8}.get(kind, V)
        placed = logits if ids is None else torch.full_like(row, float("-inf")).index_copy(-1, ids, logits)
        torch.testing.assert_close(placed, row)
        tokens = torch.topk(row, 3, dim=-1).indices
        for tree in trees:
            new = tree.add(frontier.repeat_interleave(3), tokens.reshape(-1), torch.zeros(tokens.numel()))
        frontier = new[:3]


@pytest.mark.parametrize("kind", ["eagle1", "eagle1-shortlist", "eagle3"])
@pytest.mark.parametrize("k", [3, 12])  # 12 > V_d = 10 (EAGLE-3) and 8 (shortlist): clamped to what can be proposed
def test_expand_topk_equals_topk_of_expand(target, kind, k):
    """The draft-vocabulary top-k equals the top-k of the full ``[F, V]`` row (same log q, same target tokens)."""
    (full, fast), trees = _prefilled_pair(target, kind)
    frontier = torch.tensor([0])
    for _ in range(3):
        ref_logq, ref_tokens = torch.topk(torch.log_softmax(full.expand(trees[0], frontier), -1), k, dim=-1)
        logq, tokens = fast.expand_topk(trees[1], frontier, k)
        kept = tokens.shape[-1]
        assert kept == min(k, {"eagle3": 10, "eagle1-shortlist": 8}.get(kind, V))
        torch.testing.assert_close(logq, ref_logq[:, :kept], atol=1e-5, rtol=1e-5)
        assert torch.equal(tokens, ref_tokens[:, :kept])
        assert torch.isinf(ref_logq[:, kept:]).all()  # what was dropped had q = 0
        for tree in trees:
            new = tree.add(frontier.repeat_interleave(kept), tokens.reshape(-1), logq.reshape(-1))
        frontier = new[:3]


@pytest.mark.parametrize(
    ("ids", "match"),
    [([], "empty"), ([0, 16], r"\[0, 16\)"), ([3, 2], "increasing"), ([1, 1], "increasing")],
)
def test_eagle1_drafter_rejects_bad_shortlist(target, ids, match):
    with pytest.raises(ValueError, match=match):
        EagleDrafter(eagle1_head(), target, 16, draft_vocab=torch.tensor(ids, dtype=torch.long))


def test_drafter_leaves_the_callers_head_untouched(target):
    """The packed copy is the drafter's: the caller's head keeps plain, trainable nn.Linear layers."""
    head = eagle1_head(31)
    drafter = EagleDrafter(head, target, max_len=16)  # auto: int8 draft weights
    assert drafter.execution.weights == "int8" and drafter.head is not head
    assert isinstance(drafter.head.fc, Int8Linear) and isinstance(drafter.lm_head, Int8Linear)
    assert all(type(m) is not torch.nn.Linear for m in drafter.head.modules())
    assert any(type(m) is torch.nn.Linear for m in head.modules())
    assert drafter.head.fc.weight is head.fc.weight  # shared, not copied


def test_int8_drafter_tracks_the_exact_one(target):
    """The int8 draft (the CPU default) is an approximation: its logits stay close to the exact drafter's and its
    top-1 mostly agrees. Losslessness does not depend on it (greedy and statistical suites run with it)."""
    hs = target_hidden(target, [1, 2, 3, 4, 5])
    out = {}
    for weights in ("int8", "packed"):
        drafter = Eagle3Drafter(eagle3_head(40, draft_vocab=V), target, 16, weights=weights)
        drafter.prefill(torch.tensor([1, 2, 3, 4, 5]), TargetHidden(layers={i: hs[i] for i in drafter.layers}))
        out[weights] = drafter.expand(PartialTree(torch.tensor(6), 4), torch.tensor([0]))[0]
    q8, q32 = out["int8"].softmax(-1), out["packed"].softmax(-1)
    assert float((q8 - q32).abs().sum()) < 0.05  # total variation x2


def test_eagle3_default_and_configured_layers():
    assert default_aux_layers(8) == (2, 4, 5)
    assert default_aux_layers(32) == (2, 16, 29)
    target8 = tiny_llama(vocab_size=V, hidden_size=H, num_layers=8)
    assert Eagle3Drafter(eagle3_head(), target8, 16).hidden_request.layers == (2, 4, 5)
    assert Eagle3Drafter(eagle3_head(), target8, 16, layers=(1, 3, 7)).layers == (1, 3, 7)
    configured = Eagle3Head(make_config(draft_vocab_size=10, aux_layer_ids=(0, 6, 7)))
    assert Eagle3Drafter(configured, target8, 16).hidden_request.layers == (0, 6, 7)
    with pytest.raises(ValueError, match="outside"):
        Eagle3Drafter(eagle3_head(), target8, 16, layers=(2, 4, 8))
    with pytest.raises(ValueError, match="fuses 3"):
        Eagle3Drafter(eagle3_head(), target8, 16, layers=(2, 4))


def test_drafters_validate_target(target):
    wrong_vocab = tiny_llama(vocab_size=V + 1, hidden_size=H, num_layers=4)
    wrong_width = tiny_llama(vocab_size=V, hidden_size=2 * H, num_layers=4)
    with pytest.raises(VocabMismatchError):
        EagleDrafter(eagle1_head(), wrong_vocab, 16)
    with pytest.raises(VocabMismatchError):
        Eagle3Drafter(eagle3_head(), wrong_vocab, 16)
    with pytest.raises(ValueError, match="hidden_size"):
        EagleDrafter(eagle1_head(), wrong_width, 16)
    with pytest.raises(ValueError, match="target_hidden_size"):
        Eagle3Drafter(eagle3_head(), wrong_width, 16)
    with pytest.raises(TypeError):
        EagleDrafter(eagle3_head(), target, 16)
    drafter = EagleDrafter(eagle1_head(), target, 4)
    hs = target_hidden(target, [1, 2, 3])
    drafter.prefill(torch.tensor([1, 2, 3]), final_hidden(hs, 0, 3))
    with pytest.raises(ValueError, match="max_len"):
        drafter.commit(torch.tensor([4, 5]), TargetHidden(final=torch.zeros(2, H)))


def test_eagle1_drafter_uses_own_embedding_when_present(target):
    head = Eagle1Head(make_config(), with_embedding=True).eval()
    randomize(head, 30)
    drafter = EagleDrafter(head, target, 16, weights="stock")
    tokens = torch.tensor([1, 2, 3])
    assert torch.equal(head.embed(tokens), head.embed_tokens(tokens))
    assert not torch.allclose(head.embed(tokens), F.embedding(tokens, target.get_input_embeddings().weight))
    hs = target_hidden(target, [1, 2, 3])
    drafter.prefill(tokens, final_hidden(hs, 0, 3))
    logits = drafter.expand(PartialTree(torch.tensor(4), 4), torch.tensor([0]))
    ref = reference_path_logits(head, hs[-1], [1, 2, 3], [4], lambda o: target.lm_head(o))[-1]
    torch.testing.assert_close(logits[0], ref, atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize("kind", ["eagle1", "eagle3"])
@pytest.mark.parametrize("qkv_bias", [False, True])
def test_fused_inference_copy_computes_the_same_outputs(kind: str, qkv_bias: bool) -> None:
    """fuse_for_inference: one qkv and one gate/up GEMM, torch's rms_norm; same outputs; the original is untouched."""
    from specdec.backends import packed_copy
    from specdec.eagle.fusion import FusedRMSNorm, fuse_for_inference

    head = eagle1_head(qkv_bias=qkv_bias) if kind == "eagle1" else eagle3_head(qkv_bias=qkv_bias)
    keys = list(head.state_dict())
    fused = packed_copy(head, transform=fuse_for_inference)
    attn = fused.layers[0].self_attn if kind == "eagle1" else fused.midlayer.self_attn
    assert isinstance(attn.qkv_proj, PackedLinear) and not hasattr(attn, "q_proj")
    assert any(isinstance(m, FusedRMSNorm) for m in fused.modules())
    assert list(head.state_dict()) == keys  # the caller's head keeps the official layout
    plain = packed_copy(head)
    g = torch.Generator().manual_seed(3)
    t = 5
    emb, feat = torch.randn(1, t, H, generator=g), torch.randn(1, t, H, generator=g)
    pos, bias = torch.arange(t)[None], causal_bias(t, 0)
    with torch.no_grad():
        if kind == "eagle3":
            feat = head.project(torch.randn(1, t, 3 * H, generator=g))
        out_f, kv_f = fused(emb, feat, pos, bias)
        out_p, kv_p = plain(emb, feat, pos, bias)
    torch.testing.assert_close(out_f, out_p, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(kv_f[0], kv_p[0], atol=1e-5, rtol=1e-5)
    int8 = packed_copy(head, int8=True, transform=fuse_for_inference)
    attn8 = int8.layers[0].self_attn if kind == "eagle1" else int8.midlayer.self_attn
    assert isinstance(attn8.qkv_proj, Int8Linear) and attn8.qkv_proj._weight is None  # made for the copy: released


def test_int8_linear_releases_a_weight_it_does_not_share() -> None:
    lin = torch.nn.Linear(32, 24)
    kept, released = Int8Linear(lin), Int8Linear(lin, keep_weight=False)
    assert kept.weight is lin.weight and released._weight is None
    torch.testing.assert_close(released.weight, lin.weight, atol=lin.weight.abs().max().item() / 127, rtol=0)
    x = torch.randn(3, 32)
    assert torch.equal(kept(x), released(x))


def test_rope_table_equals_the_computed_rotation() -> None:
    from specdec.eagle.layers import EagleRotary

    rotary = EagleRotary(make_config())
    pos = torch.tensor([[0, 5, 17, 63]])
    cos, sin = rotary(pos, torch.float32)
    rotary.cache(64, torch.device("cpu"), torch.float32)
    cached = rotary(pos, torch.float32)
    torch.testing.assert_close(cached[0], cos, atol=1e-6, rtol=0)
    torch.testing.assert_close(cached[1], sin, atol=1e-6, rtol=0)
    assert rotary(pos, torch.float64)[0].dtype == torch.float64  # another dtype is computed, not looked up


def test_rope_call_stores_nothing() -> None:
    """A call on another device computes there and keeps nothing: a compiled CUDA-graph step that stored the moved
    frequencies kept a graph output that the next replay overwrote (``docs/results/2026-11-30-gpu-h200``); the
    drafter moves them once, eagerly (:meth:`~specdec.eagle.layers.EagleRotary.place`). The meta device stands in
    for a GPU."""
    from specdec.eagle.layers import EagleRotary

    rotary = EagleRotary(make_config())
    before = rotary.inv_freq
    cos, _ = rotary(torch.zeros(1, 3, dtype=torch.long, device="meta"), torch.float32)
    assert cos.device.type == "meta" and rotary.inv_freq is before
    rotary.place(torch.device("meta"))
    assert rotary.inv_freq.device.type == "meta"
    attention = EagleAttention(make_config(), 32).to(torch.float64).to("meta")  # moving the head moves its RoPE
    assert attention.rotary.inv_freq.device.type == "meta" and attention.rotary.inv_freq.dtype == torch.float32
