"""A zoo of tiny transformers models built from their configs (random weights, nothing downloaded) and the
inputs they run on: models/test_hf_models.py compares them compiled and eager, tests/tools/hf_breaks.py
counts their graph breaks (issue #28).

Each model is the smallest that still has every part of its architecture (hidden 32, 2 layers, 2 heads,
a vocabulary of 64, batch 2, sequence 8), so a compile takes a second on a small CPU. Dropout is 0 in
every config: a training step is then deterministic and can be compared with eager's.

    model = build("gpt2")                 # weights drawn after torch.manual_seed(0)
    out = model.eval()(**inputs("gpt2"))  # the same inputs on every call
    loss = loss_of(model.train()(**inputs("gpt2", train=True)))

Importing this module imports transformers: callers skip first when it is absent
(`pytest.importorskip("transformers")`; the Debian lane has none).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch
import transformers as tf

VOCAB = 64
BATCH, SEQ = 2, 8


@dataclasses.dataclass(frozen=True)
class Entry:
    model: Callable[[], torch.nn.Module]
    inputs: Callable[[torch.Generator], dict]  # the forward's keyword arguments, drawn from the generator
    labels: bool  # the model computes a loss from `labels` (else loss_of uses its first output)


def _ids(gen):
    return torch.randint(0, VOCAB, (BATCH, SEQ), generator=gen)


def _bert():
    cfg = tf.BertConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=16,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    return tf.BertModel(cfg)


def _gpt2():
    # NB: bos/eos inside the vocabulary: GPT2Config's 50256 makes transformers warn on every build.
    cfg = tf.GPT2Config(
        vocab_size=VOCAB,
        n_embd=32,
        n_layer=2,
        n_head=2,
        n_positions=16,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=VOCAB - 1,
        eos_token_id=VOCAB - 1,
    )
    return tf.GPT2LMHeadModel(cfg)


def _llama():
    cfg = tf.LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        intermediate_size=64,
        max_position_embeddings=16,
    )
    return tf.LlamaForCausalLM(cfg)


def _t5():
    # decoder_start_token_id: T5 shifts `labels` right to make the decoder's inputs of a training step.
    cfg = tf.T5Config(
        vocab_size=VOCAB,
        d_model=32,
        d_kv=8,
        d_ff=64,
        num_layers=2,
        num_decoder_layers=2,
        num_heads=2,
        dropout_rate=0.0,
        decoder_start_token_id=0,
    )
    return tf.T5ForConditionalGeneration(cfg)


def _vit():
    cfg = tf.ViTConfig(
        image_size=16,
        patch_size=8,
        num_channels=3,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    return tf.ViTModel(cfg)


ZOO = {
    "bert": Entry(
        _bert,
        lambda gen: dict(input_ids=_ids(gen), attention_mask=torch.ones(BATCH, SEQ, dtype=torch.long)),
        labels=False,
    ),
    "gpt2": Entry(_gpt2, lambda gen: dict(input_ids=_ids(gen)), labels=True),
    "llama": Entry(_llama, lambda gen: dict(input_ids=_ids(gen)), labels=True),
    "t5": Entry(_t5, lambda gen: dict(input_ids=_ids(gen), decoder_input_ids=_ids(gen)), labels=True),
    "vit": Entry(_vit, lambda gen: dict(pixel_values=torch.randn(BATCH, 3, 16, 16, generator=gen)), labels=False),
}


def build(name):
    """The zoo's model `name` with the weights torch.manual_seed(0) draws (train mode, as built)."""
    torch.manual_seed(0)
    return ZOO[name].model()


def inputs(name, train=False):
    """The keyword arguments of model `name` (the same on every call); with train=True also `labels` where the
    model computes its own loss."""
    kwargs = ZOO[name].inputs(torch.Generator().manual_seed(1))
    if train and ZOO[name].labels:
        kwargs["labels"] = torch.randint(0, VOCAB, (BATCH, SEQ), generator=torch.Generator().manual_seed(2))
    return kwargs


def loss_of(out):
    """The model's own loss, or for a bare encoder the mean square of its first output."""
    loss = out.get("loss")
    return loss if loss is not None else out[0].square().mean()


def leaves(value, path="out"):
    """(path, leaf) for everything a model returned: the tensors and other values of a ModelOutput, its tuples
    and the keys and values of every layer of its caches; a container contributes its type's name, so two
    outputs with the same leaves have the same structure."""
    if isinstance(value, torch.Tensor):
        yield path, value
    elif isinstance(value, tf.cache_utils.EncoderDecoderCache):
        yield path, type(value).__name__
        yield from leaves(value.self_attention_cache, f"{path}.self_attention_cache")
        yield from leaves(value.cross_attention_cache, f"{path}.cross_attention_cache")
    elif isinstance(value, tf.cache_utils.Cache):
        yield path, type(value).__name__
        for i, layer in enumerate(value.layers):
            yield f"{path}.layers[{i}]", type(layer).__name__
            yield from leaves(getattr(layer, "keys", None), f"{path}.layers[{i}].keys")
            yield from leaves(getattr(layer, "values", None), f"{path}.layers[{i}].values")
    elif isinstance(value, dict):  # ModelOutput is an OrderedDict
        yield path, (type(value).__name__, list(value.keys()))
        for key, item in value.items():
            yield from leaves(item, f"{path}[{key!r}]")
    elif isinstance(value, (tuple, list)):
        yield path, (type(value).__name__, len(value))
        for i, item in enumerate(value):
            yield from leaves(item, f"{path}[{i}]")
    else:
        yield path, value
