"""Is cuDNN's fused convolution with a bias + relu epilogue (torch.cudnn_convolution_relu /
_add_relu) as fast as the bare convolution, against the convolution followed by batch-norm affine and
relu as eager ops? resnet18's 3x3 shapes at b32, channels-last, torch's default precision.

    python3 benchmarks/experiments/gpu_cudnn_fused.py
"""
import torch
import torch.nn.functional as F
dev = "cuda"
torch.manual_seed(0)
def bench(f, n=50):
    for _ in range(5): f()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(n): f()
    e.record(); torch.cuda.synchronize()
    return s.elapsed_time(e) / n
for (N, C, H, K) in [(32, 64, 56, 64), (32, 128, 28, 128), (32, 256, 14, 256), (32, 512, 7, 512)]:
    x = torch.randn(N, C, H, H, device=dev).contiguous(memory_format=torch.channels_last)
    w = torch.randn(K, C, 3, 3, device=dev).contiguous(memory_format=torch.channels_last) * 0.05
    b = torch.randn(K, device=dev)
    z = torch.randn(N, K, H, H, device=dev).contiguous(memory_format=torch.channels_last)
    sc, sh = torch.randn(K, 1, 1, device=dev), torch.randn(K, 1, 1, device=dev)
    t_sep = bench(lambda: torch.relu(F.conv2d(x, w, None, 1, 1) * sc + sh))
    t_conv = bench(lambda: F.conv2d(x, w, None, 1, 1))
    try:
        t_fused = bench(lambda: torch.cudnn_convolution_relu(x, w, b, [1, 1], [1, 1], [1, 1], 1))
        ref = torch.relu(F.conv2d(x, w, b, 1, 1)); got = torch.cudnn_convolution_relu(x, w, b, [1, 1], [1, 1], [1, 1], 1)
        err = ((got - ref).abs().max() / ref.abs().max()).item()
        t_add = bench(lambda: torch.cudnn_convolution_add_relu(x, w, z, 1.0, b, [1, 1], [1, 1], [1, 1], 1))
    except Exception as ex:
        t_fused = t_add = float("nan"); err = str(ex)[:200]
    print(f"N{N} C{C} H{H}: conv {t_conv:.4f}  conv+bn+relu (2 kernels, eager ops) {t_sep:.4f}  cudnn conv_relu {t_fused:.4f}  conv_add_relu {t_add:.4f}  err {err}", flush=True)
