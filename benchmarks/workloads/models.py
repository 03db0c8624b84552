"""Whole-model inference: CNNs, a nanoGPT-style decoder, transformer layers, and transformers' BERT
and GPT-2 built from their configs (random weights, nothing downloaded) when transformers imports."""

import torch
from torch import nn

from . import Case, WorkloadUnavailable, no_grad_step, pick, torchvision_model, workload
from .nets import MobileNetV2Style, NanoGPT, ResNetStyle


def _cnn_case(name, fallback, fallback_name, device, scale):
    cuda = torch.device(device).type == "cuda"
    batch, hw = pick(scale, (1, 64), (2, 64), (32, 224) if cuda else (8, 224))
    model, note = torchvision_model(name, fallback, fallback_name)
    model = model.to(device).eval()
    x = torch.randn(batch, 3, hw, hw, device=device)
    return Case(model, (x,), step=no_grad_step, atol=1e-3, rtol=1e-3, note=f"{note}; batch {batch} at {hw}x{hw}")


@workload("resnet18", "models", description="resnet18 inference (full: b8 224x224 on CPU, b32 on CUDA)")
def build_resnet18(device, scale):
    return _cnn_case("resnet18", lambda: ResNetStyle(18), "ResNet-18-style net", device, scale)


@workload("resnet50", "models", description="resnet50 inference (full: b8 224x224 on CPU, b32 on CUDA)")
def build_resnet50(device, scale):
    return _cnn_case("resnet50", lambda: ResNetStyle(50), "ResNet-50-style net", device, scale)


@workload("mobilenet_v2", "models", description="mobilenet_v2 inference (full: b8 224x224 on CPU, b32 on CUDA)")
def build_mobilenet_v2(device, scale):
    return _cnn_case("mobilenet_v2", MobileNetV2Style, "MobileNetV2-style net", device, scale)


@workload("nanogpt", "models",
          description="nanoGPT-style decoder inference (full: 4 layers d768; CPU B1 T256, CUDA B8 T512)")
def build_nanogpt(device, scale):
    cuda = torch.device(device).type == "cuda"
    cfg = pick(scale, dict(vocab=512, block_size=64, n_layer=1, n_head=2, d=64, B=1, T=16),
               dict(vocab=2048, block_size=128, n_layer=2, n_head=4, d=128, B=2, T=64),
               dict(vocab=50304, block_size=1024, n_layer=4, n_head=12, d=768, B=8 if cuda else 1,
                    T=512 if cuda else 256))
    B, T = cfg.pop("B"), cfg.pop("T")
    model = NanoGPT(**cfg).to(device).eval()
    idx = torch.randint(0, cfg["vocab"], (B, T), device=device)
    return Case(model, (idx,), step=no_grad_step, atol=1e-3, rtol=1e-3,
                note=f"{cfg['n_layer']} layers d{cfg['d']} B{B} T{T} vocab {cfg['vocab']}")


@workload("transformer_encoder_layer", "models",
          description="nn.TransformerEncoderLayer inference (full: d512, 8 heads, B8 S128)")
def build_transformer_encoder_layer(device, scale):
    d, heads, B, S = pick(scale, (32, 2, 2, 8), (128, 4, 4, 32), (512, 8, 8, 128))
    layer = nn.TransformerEncoderLayer(d, heads, dim_feedforward=4 * d, dropout=0.0, batch_first=True)
    layer = layer.to(device).eval()
    x = torch.randn(B, S, d, device=device)
    return Case(layer, (x,), step=no_grad_step, atol=1e-4, rtol=1e-4, note=f"d{d} heads {heads} B{B} S{S}")


def _transformers():
    try:
        import transformers
    except Exception as e:
        raise WorkloadUnavailable(f"transformers not importable ({type(e).__name__})") from None
    return transformers


def _hf_case(model, vocab, device, scale):
    B, S = pick(scale, (1, 16), (2, 64), (8, 128))
    model = model.to(device).eval()
    ids = torch.randint(0, vocab, (B, S), device=device)
    return Case(model, (ids,), step=no_grad_step, atol=1e-3, rtol=1e-3,
                note=f"transformers {model.__class__.__name__}, random weights, B{B} S{S}")


@workload("bert", "models", description="transformers BertModel from BertConfig() (random weights)")
def build_bert(device, scale):
    tf = _transformers()
    cfg = tf.BertConfig() if scale == "full" else tf.BertConfig(num_hidden_layers=2, hidden_size=128,
                                                                  num_attention_heads=2, intermediate_size=512)
    return _hf_case(tf.BertModel(cfg), cfg.vocab_size, device, scale)


@workload("gpt2", "models", description="transformers GPT2LMHeadModel from GPT2Config() (random weights)")
def build_gpt2(device, scale):
    tf = _transformers()
    cfg = tf.GPT2Config() if scale == "full" else tf.GPT2Config(n_layer=2, n_embd=128, n_head=2)
    return _hf_case(tf.GPT2LMHeadModel(cfg), cfg.vocab_size, device, scale)
