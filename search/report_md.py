"""The search report as Markdown (``search_report.md``): settings, search set, held-out tables and the verdict."""

from __future__ import annotations

from rope_adapter.differences import MeanDifference, PositionDifference
from rope_adapter.scoring.metrics import metric_title
from rope_adapter.scoring.numbers import fmt, fmt_interval

from .lengths import is_multi, key_label
from .report_lengths import length_lines
from .report_types import ChosenCurve, Confirmation, SearchReport


def _diff_cell(d: PositionDifference | MeanDifference) -> str:
    """A paired difference with its 95 % interval (``± se`` for reports written before intervals were stored)."""
    if d.get("ci_low") is not None:
        return fmt_interval(d["diff"], d["ci_low"], d["ci_high"], 3, sign=True)
    return f"{fmt(d['diff'], 3, sign=True)} ± {fmt(d.get('se'))}"


def _found_label(chosen: ChosenCurve | None) -> str:
    if chosen is None:
        return "found (–)"
    if chosen.get("baseline"):
        return f"found (trial {chosen['number']}: a baseline, since no searched curve was scored)"
    return f"found (trial {chosen['number']})"


def markdown_summary(report: SearchReport) -> str:
    """A short human-readable summary of the report."""
    s = report["settings"]
    study = report["study"]
    timing = report["timing"]
    task = report["task"]
    lines = [
        f"# Search report: {report['model']['name']} ({report['model']['num_layers']} layers)",
        "",
        f"- task: {task['name']} ({task['data']}), "
        + (
            f"record lengths {list(s['pairs'])} pairs, (length:position) keys "
            f"{[key_label(p, True) for p in task['positions']]}"
            if is_multi(s["pairs"])
            else f"positions {task['positions']}"
        )
        + f", score {task['score']}"
        + (f" (mean log-prob of the first {task['k']} answer tokens)" if task["k"] else "")
        + f", {task['search_records']} search / {task['holdout_records']} held-out records",
        f"- space: Bezier degree {s['degree']} ({s['x_mode']} xs), factors in [{s['s_min']}, {s['s_max']}]"
        + (f", layer bounds {s['layer_bounds']}" if s["layer_bounds"] else "")
        + (f", max step {s['max_step']}" if s["max_step"] is not None else "")
        + (f", perplexity guard +{s['max_ppl_increase']:.0%}" if s["max_ppl_increase"] is not None else ""),
        f"- study `{study['name']}` in `{study['storage']}`: {study['complete']} finished trials "
        f"({study['evaluated']} scored, {study['infeasible']} infeasible and not scored, {study['failed']} failed; "
        f"{study.get('repeats_pruned', 0)} repeated proposals pruned without scoring), "
        f"{study['sampler']}, seed {study['seed']}, {s['workers']} worker(s) on {timing['device']} ({timing['dtype']})",
        f"- throughput: {fmt(timing['trials_per_minute_this_run'], 2)} trials/min this run "
        f"({timing['trials_this_run']} trials in {timing['search_seconds_this_run']:.0f} s), "
        f"{fmt(timing['evaluated_trials_per_minute_study'], 2)} scored trials/min over the study; "
        f"{fmt(timing['median_eval_seconds'], 1)} s per scored trial = "
        f"{fmt(timing['seconds_per_scored_sample'], 2)} s per scored sample "
        f"({timing['search_samples']} samples, tokens per trial {timing['tokens_per_trial']})",
        "",
    ]
    chosen = report.get("chosen")
    base = report["baselines"]["base"]
    uniform = report["baselines"]["best_uniform"]
    positions = [str(p) for p in task["positions"]]
    multi = is_multi(s["pairs"])
    lines += [
        "## Search set",
        "",
        "| configuration | " + " | ".join(f"pos {key_label(p, multi)}" for p in positions) + " | mean | worst |",
    ]
    lines.append("|---" * (len(positions) + 3) + "|")
    for label, rec in (
        ("base (all 1)", base),
        (f"best uniform ({uniform['uniform'] if uniform else '–'})", uniform),
        (_found_label(chosen), chosen),
    ):
        if rec is None or not rec.get("by_position"):
            continue
        bp = rec["by_position"] or {}
        obj = rec["objectives"] or {}
        lines.append(
            f"| {label} | "
            + " | ".join(fmt(bp.get(p)) for p in positions)
            + f" | {fmt(obj.get('mean'))} | {fmt(obj.get('worst'))} |"
        )
    if chosen is not None and chosen.get("warning"):
        lines += ["", f"**Warning:** {chosen['warning']}"]
    lines += confirmation_lines(report.get("confirmation"))
    holdout = report.get("holdout")
    if holdout:
        lines += ["", f"## Held-out ({holdout['records']} records, {holdout['samples']} samples)", ""]
        if any("tf_accuracy_by_position" in c for c in holdout["configs"].values()):
            lines += [
                f"{metric_title('tf_accuracy')}:",
                "",
                "| configuration | " + " | ".join(f"pos {key_label(p, multi)}" for p in positions) + " | mean |",
                "|---" * (len(positions) + 2) + "|",
            ]
            for name, cfg in holdout["configs"].items():
                if "tf_accuracy_by_position" in cfg:
                    acc = cfg["tf_accuracy_by_position"]
                    lines.append(
                        f"| {name} | "
                        + " | ".join(fmt(acc.get(p), 2) for p in positions)
                        + f" | {cfg['tf_accuracy']:.3f} |"
                    )
            rows = [(k, d["tf_accuracy"]) for k, d in holdout["differences"].items() if d.get("tf_accuracy")]
            for label, d in rows:
                cells = [_diff_cell(d["by_position"][p]) for p in positions]
                lines.append(f"| {label} | " + " | ".join(cells) + f" | {_diff_cell(d['mean'])} |")
            lines += ["", f"Score ({holdout['score']}):", ""]
        lines += [
            "| configuration | " + " | ".join(f"pos {key_label(p, multi)}" for p in positions) + " | mean | worst |",
            "|---" * (len(positions) + 3) + "|",
        ]
        for name, cfg in holdout["configs"].items():
            label = {
                "base": "base (all 1)",
                "best_uniform": f"best uniform ({cfg.get('uniform')})",
                "found": _found_label(chosen),
            }[name]
            bp = cfg["by_position"]
            lines.append(
                f"| {label} | "
                + " | ".join(fmt(bp.get(p)) for p in positions)
                + f" | {fmt(cfg['mean'])} | {fmt(cfg['worst'])} |"
            )
        lines += [
            "",
            "Paired differences with 95 % t intervals (per position over samples; the mean over positions paired by "
            "record; the worst position ± a bootstrap standard error over records):",
            "",
        ]
        lines.append(
            "| difference | " + " | ".join(f"pos {key_label(p, multi)}" for p in positions) + " | mean | worst |"
        )
        lines.append("|---" * (len(positions) + 3) + "|")
        rows = [(key, d) for key, d in holdout["differences"].items()]
        rows += [(f"{key}, whole answer", d["whole_answer"]) for key, d in rows if d.get("whole_answer")]
        for label, d in rows:
            cells = [_diff_cell(d["by_position"][p]) for p in positions]
            w = d["worst"]
            lines.append(
                f"| {label} | " + " | ".join(cells) + f" | {_diff_cell(d['mean'])} | "
                f"{fmt(w['diff'], 3, sign=True)} ± {fmt(w['se_bootstrap'])} |"
            )
        if any("accuracy_by_position" in c for c in holdout["configs"].values()):
            lines += ["", f"{metric_title('accuracy')}:", ""]
            for name, cfg in holdout["configs"].items():
                if "accuracy_by_position" in cfg:
                    acc = cfg["accuracy_by_position"]
                    lines.append(
                        f"- {name}: " + ", ".join(f"pos {p}: {acc.get(p, float('nan')):.2f}" for p in positions)
                    )
        if "k_selection" in holdout:
            ks = holdout["k_selection"]
            lines += [
                "",
                f"Which k separates the positions best (one-way ANOVA F on the base model): k = {ks['best_k']} "
                f"(F by k: {', '.join(f'{k}: {v:.1f}' for k, v in ks['f_statistic'].items())}).",
            ]
        lines += ["", f"**{holdout['verdict']}**", ""]
    lines += length_lines(report)
    if chosen is not None:
        lines += ["## Found factors", "", "`" + " ".join(f"{f:.3f}" for f in chosen["factors"]) + "`", ""]
    return "\n".join(lines) + "\n"


def confirmation_lines(confirmation: Confirmation | None) -> list[str]:
    """The confirmation section: each top curve's search-set and confirmation scores and its selection gap."""
    if not confirmation:
        return []
    chosen_text = []
    for key, label in (("found", "adapter"), ("best_uniform", "best uniform")):
        if confirmation[key] is not None:
            searched = confirmation[f"search_{key}"]
            other = "" if confirmation[key] == searched else f" (the search set chose trial {searched})"
            chosen_text.append(f"{label} trial {confirmation[key]}{other}")
    lines = [
        "",
        f"## Confirmation ({confirmation['records']} fresh records, top {confirmation['top']} of each group)",
        "",
        f"Chosen on the confirmation records: {'; '.join(chosen_text)}. Selection gap = search-set score minus "
        "confirmation score.",
        "",
        "| trial | group | search mean | confirmation mean | gap (mean) | search worst | confirmation worst | gap (worst) |",
        "|---" * 8 + "|",
    ]
    chosen = {confirmation["found"], confirmation["best_uniform"]}
    for c in confirmation["candidates"]:
        group = c["group"] if c["uniform"] is None else f"uniform {c['uniform']:g}"
        mark = " (chosen)" if c["trial"] in chosen else ""
        s, k, g = c["search"], c["confirmation"], c["gap"]
        lines.append(
            f"| {c['trial']}{mark} | {group} | {fmt(s.get('mean'))} | {fmt(k.get('mean'))} | "
            f"{fmt(g.get('mean'), 3, sign=True)} | {fmt(s.get('worst'))} | {fmt(k.get('worst'))} | "
            f"{fmt(g.get('worst'), 3, sign=True)} |"
        )
    return lines
