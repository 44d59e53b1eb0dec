"""On a device (default: a GPU): the adapter at a uniform factor equals transformers' native linear RoPE scaling
bit for bit (prefill logits and greedy decoding with a KV cache), every tiny architecture, float32 and bfloat16;
and per-layer factors give the same logits on the device as on the CPU (float32, to rounding). Tiny random models from the tests'
testkit; writes one JSON row per (architecture, dtype):

    python benchmarks/exact_device.py [--device cuda] [--out benchmarks/results/overhead_h200/exact_cuda.json]
"""

import argparse
import copy
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import torch
from peft import get_peft_model
from testkit.tiny_models import ARCHITECTURES, native_linear, tiny_model, weights_in

from rope_adapter import LrsConfig, files

parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("--device", default="cuda")
parser.add_argument("--out", type=Path, default=Path("exact_device.json"))
args = parser.parse_args()
dev = torch.device(args.device)
ids = torch.randint(3, 250, (2, 96), generator=torch.Generator().manual_seed(0)).to(dev)
rows = []
for arch in ARCHITECTURES:
    for dtype in (torch.float32, torch.bfloat16):
        base = tiny_model(arch)
        ref = weights_in(native_linear(base, 1.37).to(dev), dtype)
        model = get_peft_model(weights_in(copy.deepcopy(base).to(dev), dtype), LrsConfig(factors=1.37))
        with torch.inference_mode():
            same_logits = torch.equal(model(ids).logits, ref(ids).logits)
            kw = dict(max_new_tokens=24, do_sample=False, pad_token_id=0)
            g_ref = ref.generate(ids[:1, :40], **kw)
            g_ad = model.generate(input_ids=ids[:1, :40], **kw)
        row = {"arch": arch, "dtype": str(dtype), "logits_equal": same_logits, "greedy_equal": torch.equal(g_ref, g_ad)}
        if dtype == torch.float32:
            layers = base.config.num_hidden_layers
            facs = [1.0 + 0.3 * i for i in range(layers)]
            cpu = get_peft_model(copy.deepcopy(base), LrsConfig(factors=facs))
            gpu = get_peft_model(copy.deepcopy(base), LrsConfig(factors=facs)).to(dev)
            with torch.inference_mode():
                diff = (cpu(ids.cpu()).logits - gpu(ids).logits.cpu()).abs().max().item()
            row["per_layer_cpu_vs_gpu_max_abs"] = diff
        rows.append(row)
        print(files.dumps_json(row), flush=True)
ok = all(r["logits_equal"] and r["greedy_equal"] for r in rows)
print("ALL EQUAL" if ok else "NOT ALL EQUAL")
files.write_json(args.out, rows, indent=1)
