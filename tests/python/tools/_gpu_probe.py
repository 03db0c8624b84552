import torch, framefuse, time, sys
import transformers as tf
torch.manual_seed(0)
cfg = tf.GPT2Config(n_layer=4, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
model = tf.GPT2LMHeadModel(cfg).cuda().train()
ids = torch.randint(0, cfg.vocab_size, (8, 256), device="cuda")
cm = framefuse.compile(model) if sys.argv[1] == "ff" else model
def step():
    out = cm(ids).logits
    loss = torch.nn.functional.cross_entropy(out.flatten(0, 1), ids.flatten())
    loss.backward()
for _ in range(3): step()
torch.cuda.synchronize(); t = time.perf_counter()
for _ in range(10): step()
torch.cuda.synchronize(); print(sys.argv[1], (time.perf_counter() - t) / 10 * 1e3, "ms")
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]) as p:
    for _ in range(3): step()
    torch.cuda.synchronize()
print(p.key_averages().table(sort_by="cuda_time_total", row_limit=22, max_name_column_width=60))
