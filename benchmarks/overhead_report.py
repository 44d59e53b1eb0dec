"""The Markdown page of benchmarks/overhead.py's results (imported by the script beside it)."""

from __future__ import annotations


def _ms(seconds: list[float]) -> str:
    return f"{min(seconds) * 1e3:,.1f}"


def split_half(seconds: list[float]) -> float | None:
    """The base timed against itself from the runs of one measurement: the fastest of its odd-numbered runs over
    the fastest of its even-numbered ones (the order alternates with the adapter's, so both halves saw the same
    conditions). A ratio the adapter's cannot be told apart from, in every result, ``--control`` or not."""
    return min(seconds[1::2]) / min(seconds[0::2]) if len(seconds) > 1 else None


def _ratio(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}"


def _row(label: str, both: dict, target: float) -> str:
    row, cpu = both["wall"], both["cpu"]
    flag = "" if row["fastest_ratio"] <= target else " (above)"
    control = both.get("control")
    return (
        f"| {label} | {_ms(row['base_s'])} | {_ms(row['adapter_s'])} | {row['fastest_ratio']:.3f}{flag} | "
        f"{row['median_ratio']:.3f} | {_ratio(split_half(row['base_s']))} | "
        f"{row['paired_ratio_min']:.3f}-{row['paired_ratio_max']:.3f} | "
        f"{row['base_spread']:.2f} / {row['adapter_spread']:.2f} | {cpu['fastest_ratio']:.3f} | "
        f"{cpu['median_ratio']:.3f} |"
    ) + (f" {control['wall']['fastest_ratio']:.3f} / {control['wall']['median_ratio']:.3f} |" if control else "")


CONTROL_HEADER = (" A/A control: fastest / median ratio |", "---|")
"""The extra column of a run with ``--control`` (base against base, the same model both times)."""


HEADER = (
    "| measurement | base, fastest (ms) | adapter, fastest (ms) | fastest-of-N ratio | median ratio | base against "
    "itself: odd / even runs, fastest | paired ratios (min-max) | spread base / adapter (slowest / fastest) | CPU "
    "time: fastest ratio | CPU time: median ratio |\n"
    "|---|---|---|---|---|---|---|---|---|---|"
)


def markdown(results: dict) -> str:
    """Every ratio with its spread, the machine and its load, memory and torch.compile, as one page."""
    target = results["target"]["fastest_ratio_max"]
    settings = results["settings"]
    machine = results["machine"]
    where = (
        f"GPU: {machine['gpu']}, {settings.get('dtype', 'float32')}, torch {machine['torch']}; host CPU "
        f"{machine.get('cpu_model', '?')}. Every timing waits for the GPU; the CPU-time columns are the host thread's"
        " time (launching kernels and waiting for them)."
        if "gpu" in machine
        else f"CPU: {machine.get('cpu_model', '?')}, {machine['cpus_visible']} visible, torch {machine['torch']} with "
        f"{settings['threads']} thread(s), {settings.get('dtype', 'float32')}."
    )
    lines = [
        "# Inference cost of the adapter (`benchmarks/overhead.py`)",
        "",
        f"{where} Load average (1/5/15 min) at the start {results['load_start']}, at the "
        f"end {results['load_end']}; {results['minutes']:.1f} minutes in all. Random weights in the real shapes, "
        "one different factor per layer (the first 1.0). Base and adapter runs interleaved, the order alternating; "
        "N runs each (per size below). Decode: "
        f"{settings['decode_steps']} tokens per run after a KV cache of {settings['decode_context']} tokens. "
        f"Target: every fastest-of-N ratio at most {target}. Times are wall clock; the CPU-time columns are the "
        "thread's CPU time (all the work runs on that one thread), which leaves out time spent waiting for a core. "
        "*Base against itself* is the fastest of the base's odd-numbered runs over the fastest of its even-numbered "
        "ones: how far apart two timings of the same model come out here (a ratio of the adapter's within that "
        "distance of 1 is not resolved).",
        "",
    ]
    above = []
    for size, result in results["sizes"].items():
        lines += [
            f"## {size}",
            "",
            f"{result['layers']} layers; N = {result['repeats'][0]} (prefill 1k, decode), {result['repeats'][1]} "
            f"(prefill 4k); load average {result['load_before']} before, {result['load_after']} after.",
            "",
            HEADER,
        ]
        if any("control" in row for row in result["rows"].values()):
            lines[-1] = HEADER.replace(" |\n|", " |" + CONTROL_HEADER[0] + "\n|") + CONTROL_HEADER[1]
        for label, row in result["rows"].items():
            lines.append(_row(label, row, target))
            if row["wall"]["fastest_ratio"] > target:
                above.append(f"{size} {label} ({row['wall']['fastest_ratio']:.3f})")
        lines += ["", "The adapter's own work per decode step, timed alone (fastest of 2,000 calls):", ""]
        for label, row in result["rows"].items():
            if "added" in row:
                a = row["added"]
                lines.append(
                    f"- {label}: rotary wrapper {a['rotary_s'] * 1e6:+.1f} us over the base rotary, hook "
                    f"{a['hook_s'] * 1e6:.2f} us x {result['layers']} layers = {a['added_s'] * 1e6:.0f} us a step; "
                    f"over the base step's fastest CPU time: ratio {a['estimated_ratio']:.4f}"
                )
        lines.append("")
    lines += [
        "Above the target: " + (", ".join(above) if above else "none") + ".",
        "",
    ]
    if "memory" in results:
        lines += [
            "## Peak memory (SmolLM2 shape, "
            + ("CUDA allocator's peak" if "gpu" in machine else "fresh process, resident set")
            + " during one prefill)",
            "",
            "| prefill tokens | base peak (MiB) | adapter peak (MiB) | ratio | the prefill adds: base / adapter (MiB) |",
            "|---|---|---|---|---|",
        ]
        for length, row in results["memory"].items():
            base, adapter = row["base"]["peak_bytes"] / 2**20, row["adapter"]["peak_bytes"] / 2**20
            added = [(row[v]["peak_bytes"] - row[v]["before_bytes"]) / 2**20 for v in ("base", "adapter")]
            lines.append(
                f"| {length} | {base:,.0f} | {adapter:,.0f} | {row['ratio']:.3f} | {added[0]:.1f} / {added[1]:.1f} |"
            )
        lines.append("")
    if "compile" in results:
        c = results["compile"]
        lines += [
            f"## torch.compile ({c['model']} model, prefill {c['prefill']} tokens)",
            "",
            f"- Base: {c['base']['graphs']} graph(s), {c['base']['graph_breaks']} break(s), first call "
            f"{c['base']['first_call_s']:.0f} s. Adapter: {c['adapter']['graphs']} graph(s), "
            f"{c['adapter']['graph_breaks']} break(s), first call {c['adapter']['first_call_s']:.0f} s.",
            f"- Compiled adapter against eager adapter, logits: max abs difference {c['max_abs_diff_vs_eager']:.2e}.",
            "",
            HEADER.replace("base, fastest", "first, fastest").replace("adapter, fastest", "second, fastest"),
        ]
        lines += [_row(label, row, float("inf")) for label, row in c["rows"].items()]
        lines.append("")
    return "\n".join(lines)
