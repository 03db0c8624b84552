"""Where a zoo model's GPU time goes under framefuse: the CUDA kernels of a few steady calls, from
torch.profiler, against eager's (and torch.compile's with --torch-compile).
`python3 benchmarks/experiments/gpu_model_profile.py --workload llama`.
"""
import argparse

import torch

import framefuse
from benchmarks.core import build_case
from benchmarks.workloads import all_workloads


def profile(case, fn, label, rows):
    for _ in range(3):
        case.run(fn)
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA,
                                            torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(3):
            case.run(fn)
        torch.cuda.synchronize()
    print(f"=== {label}: per 3 calls")
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=rows, max_name_column_width=90))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--workload", default="llama")
    p.add_argument("--rows", type=int, default=25)
    p.add_argument("--torch-compile", action="store_true", help="profile torch.compile's default mode too")
    a = p.parse_args()
    case = build_case(all_workloads()[a.workload], "cuda", "full")
    profile(case, case.target, "eager", a.rows)
    profile(case, framefuse.compile(case.target), "framefuse", a.rows)
    if a.torch_compile:
        profile(case, torch.compile(case.target), "torch.compile", a.rows)


if __name__ == "__main__":
    main()
