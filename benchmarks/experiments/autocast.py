"""transformers GPT-2 and Llama under torch.autocast(bfloat16): eager, torch.compile and framefuse in one run.

Each contender compiles the model (its first call is timed: cold compile in this process), then rounds
run every contender for the same number of steps, one after another; the result is the median over
rounds of each contender's time over eager's in the same round (this machine's speed drifts). A step is
inference (no_grad) or a training step: the forward and the loss under autocast, backward outside it,
then AdamW's step (outside the compiled model). The first output of each compiled model is compared
with eager autocast's.

    PYTHONPATH=python python benchmarks/experiments/autocast.py [--device cuda] [--model gpt2|llama]
        [--mode infer|train] [--rounds 10] [--steps 10]
"""
import argparse
import statistics
import time

import torch


def build(model_name, device, small):
    import transformers as tf

    torch.manual_seed(0)
    if model_name == "gpt2":
        cfg = tf.GPT2Config(n_layer=4, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                            **({"n_embd": 256, "n_head": 4} if small else {}))
        model = tf.GPT2LMHeadModel(cfg)
    else:
        cfg = tf.LlamaConfig(num_hidden_layers=4, hidden_size=256 if small else 1024, intermediate_size=688 if small else 2816,
                             num_attention_heads=4 if small else 16, num_key_value_heads=4 if small else 16,
                             vocab_size=32000)
        model = tf.LlamaForCausalLM(cfg)
    return model.to(device), cfg.vocab_size


def sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def contender(name, model_name, device, small, mode, ids):
    model, _ = build(model_name, device, small)
    model.train(mode == "train")
    fwd = model
    if name == "torch.compile":
        fwd = torch.compile(model)
    elif name == "framefuse":
        import framefuse
        fwd = framefuse.compile(model, backend="inductor")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4) if mode == "train" else None

    def step():
        if mode == "infer":
            with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16):
                return fwd(input_ids=ids).logits
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device, dtype=torch.bfloat16):
            out = fwd(input_ids=ids, labels=ids)
        out.loss.backward()
        opt.step()
        return out.logits

    return step


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--model", default="gpt2", choices=("gpt2", "llama"))
    p.add_argument("--mode", default="infer", choices=("infer", "train"))
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--steps", type=int, default=10, help="steps per contender per round")
    p.add_argument("--contenders", default="eager,torch.compile,framefuse")
    a = p.parse_args()
    small = a.device == "cpu"
    batch, seq = (2, 128) if small else (8, 256)
    _, vocab = build(a.model, "cpu", small)
    ids = torch.randint(0, vocab, (batch, seq), generator=torch.Generator().manual_seed(1)).to(a.device)
    names = a.contenders.split(",")
    steps, cold, peak, first = {}, {}, {}, {}
    for n in names:
        if a.device == "cuda":
            torch.cuda.reset_peak_memory_stats()
        steps[n] = contender(n, a.model, a.device, small, a.mode, ids)
        t0 = time.perf_counter()
        first[n] = steps[n]().detach().float()
        sync(a.device)
        cold[n] = time.perf_counter() - t0
        for _ in range(3):
            steps[n]()
        sync(a.device)
        if a.device == "cuda":
            peak[n] = torch.cuda.max_memory_allocated() / 2**20
    ratios = {n: [] for n in names}
    ms = {n: [] for n in names}
    for _ in range(a.rounds):
        took = {}
        for n in names:
            sync(a.device)
            t0 = time.perf_counter()
            for _ in range(a.steps):
                steps[n]()
            sync(a.device)
            took[n] = (time.perf_counter() - t0) / a.steps * 1e3
            ms[n].append(took[n])
        for n in names:
            ratios[n].append(took["eager"] / took[n])
    ref = first["eager"]
    print(f"{a.model} {a.mode} B{batch} T{seq} autocast bfloat16 on {a.device} (torch {torch.__version__}), "
          f"{a.rounds} rounds x {a.steps} steps")
    print(f"{'contender':15s} {'steady ms':>10s} {'x eager':>8s} {'cold s':>8s} {'peak MiB':>9s} {'rel. diff':>10s}")
    for n in names:
        diff = ((first[n] - ref).norm() / ref.norm()).item()
        print(f"{n:15s} {statistics.median(ms[n]):10.3f} {statistics.median(ratios[n]):8.3f} {cold[n]:8.2f} "
              f"{peak.get(n, float('nan')):9.1f} {diff:10.2e}")


if __name__ == "__main__":
    main()
