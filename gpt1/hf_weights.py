"""The one weight map between this project's GPT and transformers' OpenAIGPTLMHeadModel, used
in both directions: `gpt1 export-hf` (gpt1/export.py) and `gpt1 import-hf` (gpt1/hf_import.py).

Our state dict uses OpenAIGPT's own names without the `transformer.` prefix; its Conv1D layers
store weights as (in, out) where our Linear layers store (out, in), so those four are
transposed; the LM head is tied to the token embedding in both.
"""

from __future__ import annotations

from typing import Any

PREFIX = "transformer."
HEAD = "lm_head.weight"
CONV1D = (".attn.c_attn.weight", ".attn.c_proj.weight", ".mlp.c_fc.weight", ".mlp.c_proj.weight")
"""Weights stored transposed by OpenAIGPT's Conv1D layers."""


def layout(name: str, tensor: Any) -> Any:
    """A tensor in the other model's layout (transposed for Conv1D weights; its own inverse)."""
    return tensor.t().contiguous() if name.endswith(CONV1D) else tensor


def to_hf(state: dict[str, Any], vocab_size: int | None = None) -> dict[str, Any]:
    """Our GPT state dict -> OpenAIGPTLMHeadModel's (prefix, Conv1D transposes, tied head); the
    embedding's padded rows (model.vocab_pad_multiple) stripped to `vocab_size` when given."""
    out = {f"{PREFIX}{name}": layout(name, tensor) for name, tensor in state.items()}
    embed = out[f"{PREFIX}tokens_embed.weight"]
    if vocab_size is not None and embed.shape[0] > vocab_size:
        embed = out[f"{PREFIX}tokens_embed.weight"] = embed[:vocab_size].contiguous()
    out[HEAD] = embed
    return out


def pad_embedding(state: dict[str, Any], rows: int) -> dict[str, Any]:
    """`state` (ours) with the token embedding padded by zero rows to `rows` (our model's
    model.vocab_pad_multiple; an export or a release has the real rows only)."""
    import torch

    embed = state["tokens_embed.weight"]
    if embed.shape[0] >= rows:
        return state
    pad = embed.new_zeros(rows - embed.shape[0], embed.shape[1])
    return {**state, "tokens_embed.weight": torch.cat([embed, pad])}


BUFFERS = (".attn.bias", ".attn.masked_bias", "position_ids")
"""Buffers older transformers versions saved with the weights (causal mask, position ids)."""


def from_hf(hf_state: dict[str, Any]) -> dict[str, Any]:
    """OpenAIGPT(LMHead)Model's state dict (with or without the `transformer.` prefix) -> ours.

    The tied head (`lm_head.weight`) is dropped: our output layer is the token embedding; so
    are the BUFFERS an older checkpoint may hold.
    """
    out = {}
    for name, tensor in hf_state.items():
        if name == HEAD or name.endswith(BUFFERS):
            continue
        ours = name.removeprefix(PREFIX)
        out[ours] = layout(ours, tensor)
    return out


def expected_shapes(vocab_size: int, n_positions: int, n_embd: int, n_layer: int
                    ) -> dict[str, tuple[int, ...]]:
    """Every weight an OpenAIGPTModel of this size holds, in transformers' names and layout
    (without the prefix), with its shape."""
    e = n_embd
    shapes: dict[str, tuple[int, ...]] = {"tokens_embed.weight": (vocab_size, e),
                                          "positions_embed.weight": (n_positions, e)}
    block = {"attn.c_attn.weight": (e, 3 * e), "attn.c_attn.bias": (3 * e,),
             "attn.c_proj.weight": (e, e), "attn.c_proj.bias": (e,),
             "ln_1.weight": (e,), "ln_1.bias": (e,),
             "mlp.c_fc.weight": (e, 4 * e), "mlp.c_fc.bias": (4 * e,),
             "mlp.c_proj.weight": (4 * e, e), "mlp.c_proj.bias": (e,),
             "ln_2.weight": (e,), "ln_2.bias": (e,)}
    for i in range(n_layer):
        shapes.update({f"h.{i}.{k}": v for k, v in block.items()})
    return shapes
