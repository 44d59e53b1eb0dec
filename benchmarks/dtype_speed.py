"""Is bfloat16 faster than float32 on this CPU? One matmul of a Qwen2.5-0.5B MLP's shape (1024 tokens x 896 ->
4864) in both dtypes on the given threads, median of repeats; the ratio is what to read (about 4x faster with AMX,
about 4x slower without). Writes ``<out>/<out name>.json``.

    .venv/bin/python benchmarks/dtype_speed.py --out benchmarks/results/dtype_speed
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from pathlib import Path

import torch
from result_files import result_file

from rope_adapter import files
from rope_adapter.scoring.loading import cpu_bfloat16_flags


def seconds(dtype: torch.dtype, repeats: int) -> float:
    a, b = torch.randn(1024, 896, dtype=dtype), torch.randn(896, 4864, dtype=dtype)
    for _ in range(3):
        a @ b
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        a @ b
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--out", type=Path, required=True, help="result folder (the JSON is named after it)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    cpu_flags = cpu_bfloat16_flags() or {"amx_bf16": None, "avx512_bf16": None}  # None: no /proc/cpuinfo
    f32, bf16 = seconds(torch.float32, args.repeats), seconds(torch.bfloat16, args.repeats)
    result = {
        "threads": args.threads,
        "float32_s": f32,
        "bfloat16_s": bf16,
        "bfloat16_over_float32": bf16 / f32,
        **cpu_flags,
        "machine": platform.machine(),
        "torch": torch.__version__,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    files.write_json(result_file(args.out, ".json"), result, indent=2)
    print(files.dumps_json(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
