"""Whole models: CNNs, a nanoGPT-style decoder (inference and a training step), transformer layers, and
transformers' model zoo (BERT, GPT-2, Llama, T5, ViT inference and BERT and GPT-2 training steps) built
from their configs (random weights, nothing downloaded) when transformers imports."""

import torch
from torch import nn

from . import Case, WorkloadUnavailable, no_grad_step, pick, torchvision_model, train_step, workload
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


def _nanogpt_config(device, scale, full_t):
    """NanoGPT's arguments and (B, T) at `scale`; full: 4 layers d768, T from full_t = (cuda, cpu)."""
    cuda = torch.device(device).type == "cuda"
    cfg = pick(scale, dict(vocab=512, block_size=64, n_layer=1, n_head=2, d=64, B=1, T=16),
               dict(vocab=2048, block_size=128, n_layer=2, n_head=4, d=128, B=2, T=64),
               dict(vocab=50304, block_size=1024, n_layer=4, n_head=12, d=768, B=8 if cuda else 1,
                    T=full_t[0] if cuda else full_t[1]))
    return cfg, cfg.pop("B"), cfg.pop("T")


@workload("nanogpt", "models",
          description="nanoGPT-style decoder inference (full: 4 layers d768; CPU B1 T256, CUDA B8 T512)")
def build_nanogpt(device, scale):
    cfg, B, T = _nanogpt_config(device, scale, (512, 256))
    model = NanoGPT(**cfg).to(device).eval()
    idx = torch.randint(0, cfg["vocab"], (B, T), device=device)
    return Case(model, (idx,), step=no_grad_step, atol=1e-3, rtol=1e-3,
                note=f"{cfg['n_layer']} layers d{cfg['d']} B{B} T{T} vocab {cfg['vocab']}")


def _lm_cross_entropy(logits, targets):
    return nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten())


@workload("nanogpt_train_step", "models", "train",
          description="nanoGPT-style decoder forward + backward + AdamW step (full: 4 layers d768; "
                      "CPU B1 T128, CUDA B8 T256)")
def build_nanogpt_train_step(device, scale):
    cfg, B, T = _nanogpt_config(device, scale, (256, 128))
    model = NanoGPT(**cfg).to(device).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    idx = torch.randint(0, cfg["vocab"], (B, T), device=device)
    y = torch.randint(0, cfg["vocab"], (B, T), device=device)
    return Case(model, (idx, y), step=train_step(_lm_cross_entropy, opt), explain_args=(idx,), atol=1e-3,
                rtol=1e-3, note=f"{cfg['n_layer']} layers d{cfg['d']} B{B} T{T}; error: first-step loss")


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


@workload("llama", "models",
          description="transformers LlamaForCausalLM, GQA (full: 4 layers d1024, 16 heads, 4 kv heads; "
                      "CUDA bf16 B4 T512, CPU fp32 B1 T256)")
def build_llama(device, scale):
    tf = _transformers()
    cuda = torch.device(device).type == "cuda"
    # NB: intermediate 2816 is the (8/3 x 1024 rounded up to 256); LlamaConfig's default
    # ratio, 11008/4096, would give 2752. Quick and tiny keep GQA (2 query heads per kv head).
    d, layers, heads, kv, ff, B, T = pick(scale, (64, 2, 4, 2, 176, 1, 16), (128, 2, 4, 2, 352, 2, 64),
                                          (1024, 4, 16, 4, 2816, 4 if cuda else 1, 512 if cuda else 256))
    cfg = tf.LlamaConfig(vocab_size=32000, hidden_size=d, num_hidden_layers=layers, num_attention_heads=heads,
                         num_key_value_heads=kv, intermediate_size=ff)
    # bf16 is the GPU case; the CPU runs fp32 (its bf16 matmuls are slow and not what a CPU user runs).
    dtype = torch.bfloat16 if cuda else torch.float32
    model = tf.LlamaForCausalLM(cfg).to(device=device, dtype=dtype).eval()
    ids = torch.randint(0, cfg.vocab_size, (B, T), device=device)
    # bf16 carries 8 bits of mantissa: a fused kernel that keeps fp32 between ops differs from eager's
    # per-op rounding by a few bf16 ulps of the logits after 4 layers.
    tol = 5e-2 if dtype == torch.bfloat16 else 1e-3
    return Case(model, (ids,), step=no_grad_step, atol=tol, rtol=tol,
                note=f"transformers LlamaForCausalLM, random weights, {layers} layers d{d} {heads} heads "
                     f"{kv} kv heads ff{ff}, {str(dtype).removeprefix('torch.')}, B{B} T{T}")


@workload("t5", "models",
          description="transformers T5ForConditionalGeneration (full: T5Config() = t5-small; B8 S128 encoder, "
                      "S64 decoder)")
def build_t5(device, scale):
    tf = _transformers()
    cfg = tf.T5Config() if scale == "full" else tf.T5Config(num_layers=2, d_model=128, d_kv=32, d_ff=512,
                                                             num_heads=4)
    B, S = pick(scale, (1, 16), (2, 64), (8, 128))
    model = tf.T5ForConditionalGeneration(cfg).to(device).eval()
    ids = torch.randint(0, cfg.vocab_size, (B, S), device=device)
    decoder_ids = torch.randint(0, cfg.vocab_size, (B, S // 2), device=device)
    # NB: positional, as Case calls its target: forward(input_ids, attention_mask, decoder_input_ids, ...).
    return Case(model, (ids, None, decoder_ids), step=no_grad_step, atol=1e-3, rtol=1e-3,
                note=f"transformers T5ForConditionalGeneration, random weights, {cfg.num_layers} + "
                     f"{cfg.num_decoder_layers} layers d{cfg.d_model}, B{B} encoder S{S} decoder S{S // 2}")


@workload("vit", "models",
          description="transformers ViTModel from ViTConfig() (full: ViT-B/16 at 224x224; CPU b2, CUDA b32)")
def build_vit(device, scale):
    tf = _transformers()
    cuda = torch.device(device).type == "cuda"
    cfg = tf.ViTConfig() if scale == "full" else tf.ViTConfig(
        image_size=pick(scale, 32, 64, None), patch_size=8, num_hidden_layers=2, hidden_size=128,
        num_attention_heads=2, intermediate_size=512)
    # NB: CPU full is b2: ViT-B/16 costs about 4x resnet50's FLOPs an image, so b2 is resnet50's b8.
    batch = pick(scale, 1, 2, 32 if cuda else 2)
    model = tf.ViTModel(cfg).to(device).eval()
    x = torch.randn(batch, 3, cfg.image_size, cfg.image_size, device=device)
    return Case(model, (x,), step=no_grad_step, atol=1e-3, rtol=1e-3,
                note=f"transformers ViTModel, random weights, {cfg.num_hidden_layers} layers d{cfg.hidden_size}, "
                     f"batch {batch} at {cfg.image_size}x{cfg.image_size} patch {cfg.patch_size}")


def _logits_cross_entropy(out, y):
    return nn.functional.cross_entropy(out.logits, y)


def _lm_logits_cross_entropy(out, y):
    return _lm_cross_entropy(out.logits, y)


@workload("gpt2_train_step", "models", "train",
          description="transformers GPT2LMHeadModel forward + backward + AdamW step (full: 4 layers d768; "
                      "CUDA B8 T256, CPU B1 T128)")
def build_gpt2_train_step(device, scale):
    tf = _transformers()
    cuda = torch.device(device).type == "cuda"
    no_dropout = dict(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    cfg = tf.GPT2Config(n_layer=4, **no_dropout) if scale == "full" else tf.GPT2Config(
        n_layer=2, n_embd=128, n_head=2, vocab_size=2048, n_positions=256, **no_dropout)
    B, T = pick(scale, (1, 16), (2, 64), (8, 256) if cuda else (1, 128))
    model = tf.GPT2LMHeadModel(cfg).to(device).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(0, cfg.vocab_size, (B, T), device=device)
    y = torch.randint(0, cfg.vocab_size, (B, T), device=device)
    return Case(model, (ids, y), step=train_step(_lm_logits_cross_entropy, opt), explain_args=(ids,), atol=1e-3,
                rtol=1e-3, note=f"transformers GPT2LMHeadModel, random weights, dropout 0, {cfg.n_layer} layers "
                                f"d{cfg.n_embd}, B{B} T{T}; error: first-step loss")


@workload("bert_train_step", "models", "train",
          description="transformers BertForSequenceClassification forward + backward + AdamW step "
                      "(full: BertConfig(); CUDA B8 S128, CPU B2 S64)")
def build_bert_train_step(device, scale):
    tf = _transformers()
    cuda = torch.device(device).type == "cuda"
    # Dropout off: a compiler's random streams differ from eager's, and the first-step loss is compared.
    no_dropout = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, classifier_dropout=0.0)
    cfg = tf.BertConfig(**no_dropout) if scale == "full" else tf.BertConfig(
        num_hidden_layers=2, hidden_size=128, num_attention_heads=2, intermediate_size=512, **no_dropout)
    # NB: CPU full is B2 S64: a BERT-base step at B8 S128 is about 0.5 TFLOP, seconds a step on a small CPU.
    B, S = pick(scale, (2, 16), (2, 64), (8, 128) if cuda else (2, 64))
    model = tf.BertForSequenceClassification(cfg).to(device).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(0, cfg.vocab_size, (B, S), device=device)
    y = torch.randint(0, cfg.num_labels, (B,), device=device)
    return Case(model, (ids, y), step=train_step(_logits_cross_entropy, opt), explain_args=(ids,), atol=1e-3,
                rtol=1e-3, note=f"transformers BertForSequenceClassification, random weights, dropout 0, "
                                f"B{B} S{S}; error: first-step loss")
