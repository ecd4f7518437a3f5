"""LLaMA from transformers, built from a size preset (never downloaded from a hub)."""

from __future__ import annotations

from typing import cast

import torch
from transformers import LlamaConfig, LlamaForCausalLM


def build_model(
    model_cfg, vocab_size: int, seed: int, device: str = "cpu", dtype: torch.dtype = torch.float32
) -> torch.nn.Module:
    """A freshly initialised LlamaForCausalLM; the same seed gives the same weights.

    `device="meta"` builds the shape only (no memory, no values): what the FLOP counter and a
    numerics-free run need, at any size.

    `vocab_size` is the tokenizer's; a preset that pins a larger vocabulary (GaLore's 32000)
    keeps its size, a smaller one is an error because token ids would fall off the table.
    """
    vocab = model_cfg.vocab_size or vocab_size
    if vocab < vocab_size:
        raise ValueError(f"model.vocab_size={vocab} is smaller than the tokenizer's {vocab_size} tokens")
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=model_cfg.hidden_size,
        intermediate_size=model_cfg.intermediate_size,
        num_attention_heads=model_cfg.num_attention_heads,
        num_key_value_heads=model_cfg.num_key_value_heads or model_cfg.num_attention_heads,
        num_hidden_layers=model_cfg.num_hidden_layers,
        max_position_embeddings=model_cfg.max_position_embeddings,
        rms_norm_eps=model_cfg.rms_norm_eps,
        initializer_range=model_cfg.initializer_range,
        tie_word_embeddings=False,
        use_cache=False,
    )
    config._attn_implementation = model_cfg.attn_implementation
    # held as a torch Module: transformers wraps Module.to with functools.wraps, which a type
    # checker reads as an unbound function
    if device == "meta":
        with torch.device("meta"):
            return cast(torch.nn.Module, LlamaForCausalLM(config)).to(dtype)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = cast(torch.nn.Module, LlamaForCausalLM(config))
    return model.to(dtype) if dtype != torch.float32 else model


def count_parameters(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
