"""The Hugging Face baselines of the benchmark: ``model.generate`` (and its prompt lookup) behind the generators'
``generate(ids, sampling, stop)`` call, on the model exactly as the caller loaded it."""

from __future__ import annotations

import copy
import time

import torch

from specdec.calls import GenerationMetrics, GenerationResult, StopCondition
from specdec.sampling import SamplingParams

__all__ = ["HFGenerate"]


class HFGenerate:
    """``model.generate`` behind the ``generate(ids, sampling, stop)`` call of our generators."""

    def __init__(self, model, eos_token_id: int | None, prompt_lookup: int | None = None) -> None:
        self.model = model
        self.eos_token_id = eos_token_id
        self.prompt_lookup = prompt_lookup

    def config(self, sampling: SamplingParams, max_new_tokens: int):
        gc = copy.deepcopy(self.model.generation_config)
        eos = self.eos_token_id
        gc.update(
            eos_token_id=eos,
            pad_token_id=eos if eos is not None else 0,
            max_new_tokens=max_new_tokens,
            min_new_tokens=None,
            min_length=0,
            max_length=None,
            do_sample=not sampling.greedy,
            temperature=None if sampling.greedy else sampling.temperature,
            top_k=None if sampling.greedy else (sampling.top_k or 0),
            top_p=None if sampling.greedy else sampling.top_p,
            repetition_penalty=None,
            num_beams=1,
            prompt_lookup_num_tokens=self.prompt_lookup,
        )
        return gc

    @torch.no_grad()
    def generate(self, input_ids: torch.Tensor, sampling: SamplingParams, stop: StopCondition) -> GenerationResult:
        device = self.model.get_output_embeddings().weight.device
        ids = input_ids.to(device)[None]
        gc = self.config(sampling, stop.max_new_tokens)
        if sampling.seed is not None:
            torch.manual_seed(sampling.seed)
        _sync(device)
        t0 = time.perf_counter()
        out = self.model.generate(ids, attention_mask=torch.ones_like(ids), generation_config=gc)
        _sync(device)
        elapsed = time.perf_counter() - t0
        tokens = out[0, ids.shape[1] :].tolist()
        metrics = GenerationMetrics(new_tokens=len(tokens), time_total=elapsed)
        return GenerationResult(tokens, stop.check(tokens) or "length", metrics)

    @torch.no_grad()
    def generate_batch(
        self, prompts: list[torch.Tensor], sampling: SamplingParams, stop: StopCondition, max_batch: int
    ) -> list[GenerationResult]:
        """``model.generate`` over ``max_batch`` prompts at a time, left-padded (pad = EOS) with their attention mask,
        as HF batches: each chunk runs until its longest row ends. A row's tokens end at its first stop."""
        device = self.model.get_output_embeddings().weight.device
        gc = self.config(sampling, stop.max_new_tokens)
        if sampling.seed is not None:
            torch.manual_seed(sampling.seed)
        results: list[GenerationResult] = []
        for start in range(0, len(prompts), max_batch):
            chunk = prompts[start : start + max_batch]
            width = max(p.shape[0] for p in chunk)
            ids = torch.full((len(chunk), width), gc.pad_token_id, dtype=torch.long, device=device)
            mask = torch.zeros_like(ids)
            for r, p in enumerate(chunk):
                ids[r, width - p.shape[0] :], mask[r, width - p.shape[0] :] = p.to(device), 1
            _sync(device)
            t0 = time.perf_counter()
            out = self.model.generate(ids, attention_mask=mask, generation_config=gc)
            _sync(device)
            elapsed = time.perf_counter() - t0
            for row in out[:, width:].tolist():
                tokens: list[int] = []
                for token in row:
                    tokens.append(token)
                    if stop.check(tokens):
                        break
                metrics = GenerationMetrics(new_tokens=len(tokens), time_total=elapsed)
                results.append(GenerationResult(tokens, stop.check(tokens) or "length", metrics))
        return results


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
