"""The model card (README.md) of an embedded base policy: architecture, training recipe and its rebuild command
(from the model's config.json and train_log.json), and its base metrics (`benchmarks/base_metrics.py`)."""
from __future__ import annotations

import json
from pathlib import Path

from gpolib import folders
from gpolib.pretrain import MOE_ARCHS
from gpolib.tasks import MAX_OPS, MIN_OPS, P_MUL, SPLIT_N_OPS, SPLIT_P_MUL, repo_root


def write_model_card(out_dir: str | Path, metrics: dict | None = None) -> Path:
    """README.md for a pretrained embedded model from its config, train_log.json and `metrics`."""
    out = Path(out_dir)
    if not out.is_absolute() and not out.exists():
        out = repo_root() / out
    log = json.loads((out / "train_log.json").read_text())
    cfg = json.loads((out / "config.json").read_text())
    if metrics is not None:
        folders.write_text(out / "base_metrics.json", json.dumps(metrics, indent=1))
    elif (out / "base_metrics.json").exists():
        metrics = json.loads((out / "base_metrics.json").read_text())
    folders.write_text(out / "README.md", _card_text(log, cfg, metrics))
    return out / "README.md"


def _active_note(log: dict, cfg: dict) -> str:
    """For MoE: the parameters one token uses (top-k of the experts)."""
    n_experts = cfg.get("num_experts", cfg.get("num_local_experts", 0))
    if not n_experts:
        return ""
    idle = n_experts - cfg["num_experts_per_tok"]
    per_expert = 3 * cfg["hidden_size"] * cfg["moe_intermediate_size"]
    return f" in all, {log['n_params'] - cfg['num_hidden_layers'] * idle * per_expert:,} active per token"


def _arch_lines(log: dict, cfg: dict, arch: str) -> list[str]:
    n_experts = cfg.get("num_experts", cfg.get("num_local_experts"))
    mlp = (f"{n_experts} experts, top-{cfg['num_experts_per_tok']} routing in every layer, "
           f"moe_intermediate_size {cfg['moe_intermediate_size']}" if n_experts
           else f"intermediate_size {cfg['intermediate_size']}")
    return ["## Architecture", "",
            f"- `{arch}`: {cfg['num_hidden_layers']} layers, hidden {cfg['hidden_size']}, "
            f"{cfg['num_attention_heads']} heads ({cfg['num_key_value_heads']} KV heads, "
            f"head_dim {cfg['head_dim']}), {mlp}, tied embeddings, vocab {cfg['vocab_size']} (one token per character).",
            f"- Parameters: {log['n_params']:,}{_active_note(log, cfg)}.", ""]


def _recipe_lines(log: dict, cfg: dict) -> list[str]:
    rc = log["config"]
    form = ("the Switch Transformer's per layer, mean over layers (`pretrain.balance_per_layer`)"
            if rc.get("aux_per_layer") else "transformers' form, counts pooled over layers")
    aux = (f" plus the router load-balancing loss (coefficient {cfg['router_aux_loss_coef']}, {form})"
           if rc["arch"] in MOE_ARCHS else "")
    if rc.get("floor_coef"):
        aux += (f" plus {rc['floor_coef']} x the underload hinge (`pretrain.underload_per_layer`: each expert whose "
                f"share of the top-k picks is below {rc['floor']} x uniform pushed up, per layer)")
    init = ([f"- Starts from the weights of `{rc['init']}` (its own recipe in its card) and continues training."]
            if rc.get("init") else [])
    return ["## Training recipe", "", *init,
            f"- {rc['steps']} AdamW steps, batch {rc['batch_size']}, peak lr {rc['lr']} "
            f"(warmup {rc['warmup']}, cosine to 10%), weight decay {rc['weight_decay']}, grad-norm clip 1.0, "
            f"seed {rc['seed']}.",
            f"- Data: fresh problems from `gpolib.tasks.make_problem`, chains of {MIN_OPS}-{MAX_OPS} operators with a",
            f"  product at an allowed step with p={P_MUL} (the RL splits are harder: {'/'.join(map(str, SPLIT_N_OPS))}",
            f"  operators, p={SPLIT_P_MUL}); the val and held-out prompts excluded; one SFT completion each; every",
            f"  product written long (digit by digit) with p={rc['p_long']}, else directly; every written result correct.",
            f"- Loss: cross-entropy on completion tokens and EOS only{aux}."
            + (f" Each batch in {rc['micro_batches']} micro-batches of rows of similar length (less padding; "
               "`PretrainConfig.micro_batches`)." if rc.get("micro_batches", 1) > 1 else ""),
            f"- Wall time: {log['wall_s']} s on {log['torch_threads']} CPU threads; "
            f"final loss {log['loss'][-1]:.4f} (curve in `train_log.json`"
            + ("; the loss includes the balancing term, coefficient x k at a uniform load" if rc.get("aux_per_layer")
               else "") + ").", "",
            "Rebuild:", "", "```",
            rebuild_command(rc),
            f"python benchmarks/base_metrics.py --arch {rc['arch']} --write-card", "```", ""]


def rebuild_command(rc: dict) -> str:
    """The `python -m gpolib pretrain` command line that rebuilds a model from its train_log.json's config `rc`."""
    cmd = f"python -m gpolib pretrain --arch {rc['arch']} --steps {rc['steps']} --seed {rc['seed']}"
    if rc.get("micro_batches", 1) > 1:
        cmd += f" --micro-batches {rc['micro_batches']}"
    if rc.get("init"):
        cmd += f" --init {rc['init']} --lr {rc['lr']} --warmup {rc['warmup']}"
    if rc.get("aux_coef") is not None:
        cmd += f" --aux-coef {rc['aux_coef']}" + (" --aux-per-layer" if rc.get("aux_per_layer") else "")
    if rc.get("floor_coef"):
        cmd += f" --floor-coef {rc['floor_coef']} --floor {rc['floor']}"
    return cmd


def _metrics_lines(metrics: dict | None) -> list[str]:
    if not metrics:
        return []
    return ["## Base metrics", "",
            f"Held-out prompts {metrics['n_prompts']}, G={metrics['G']}, temperature 1, top_k=0, "
            f"max {metrics['max_new_tokens']} new tokens (`benchmarks/base_metrics.py`):", "",
            "```json", json.dumps(metrics, indent=1), "```", ""] + _routing_lines(metrics.get("routing"))


def _routing_lines(routing: dict | None) -> list[str]:
    if not routing:
        return []
    return ["`routing` (`gpolib.router_stats.routing_stats`, the completion tokens of one sample per prompt of the first "
            f"{routing['n_prompts']} held-out prompts): each expert's share of the activated (token, slot) pairs, "
            f"min and max over the experts per layer (uniform: {routing['uniform_share']}), and quantiles of the router "
            "margin p_(k) - p_(k+1) between the k-th and (k+1)-th largest router probability of a token, "
            "pooled over layers (a small margin: a small router change swaps the k-th expert).", ""]


def balance_lines(routing: dict | None) -> list[str]:
    """Per layer, the lowest and highest expert share of the routed held-out (token, slot) pairs as multiples of the
    uniform share 1/E, and the experts never routed (`dead_experts`, when recorded): P3's premise is min >= 0.25."""
    if not routing:
        return []
    n_experts = round(1 / routing["uniform_share"])
    dead = routing.get("dead_experts") or ["-"] * len(routing["expert_share_min"])
    rows = [f"| {i} | {lo * n_experts:.2f} | {hi * n_experts:.2f} | {d} |"
            for i, (lo, hi, d) in enumerate(zip(routing["expert_share_min"], routing["expert_share_max"], dead))]
    return ["## Load balance", "", f"Per layer, each expert's share of the routed held-out (token, slot) pairs as a "
            f"multiple of the uniform share 1/{n_experts} (P3's premise: min >= 0.25 in every layer), and the experts "
            "no held-out token was routed to:", "", "| layer | min share / uniform | max share / uniform | dead experts |",
            "|---|---|---|---|", *rows, ""]


def sweep_table(rows: list) -> list[str]:
    """Markdown rows of a load-balancing sweep (`benchmarks/moe_balance_sweep.py`'s JSON lines): per setting the
    worst layer's lowest and highest expert share over uniform, dead experts per layer, P3's premise, accuracy."""
    lines = ["| setting | prompts | aux coef | form | steps | lr | min share / uniform (worst layer) | dead experts per "
             "layer | max share / uniform (worst layer) | premise | accuracy (T = 1) | train s |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ro = r["routing"]
        n_experts = round(1 / ro["uniform_share"])
        form = "-" if not r["steps"] else "per layer" if r["per_layer"] else "pooled"
        lines.append(f"| {r['setting']} | {r.get('split', 'heldout')} | {r['coef']:g} | {form} | {r['steps']} | {r['lr'] if r['steps'] else '-'} "
                     f"| {n_experts * min(ro['expert_share_min']):.2f} | {'/'.join(map(str, ro['dead_experts']))} "
                     f"| {n_experts * max(ro['expert_share_max']):.2f} | {'met' if ro['premise'] == 'reproduced' else 'not met'} | {r['accuracy']:.3f} "
                     f"({r['acc_prompts']} x {r['acc_G']}) | {r['train_s']:.0f} |")
    return lines


SWEEP = "benchmarks/moe_balance_sweep.jsonl"
"""the load-balancing sweep that chose the balanced MoE's recipe (repository-relative)"""


def _sweep_lines(log: dict) -> list[str]:
    """For a model trained on with its own load-balancing coefficient (`init` and `aux_coef` set): the sweep that
    chose it, when the repository holds it."""
    rc, f = log["config"], repo_root() / SWEEP
    if not (rc.get("init") and rc.get("aux_coef") is not None and f.is_file()):
        return []
    rows = [json.loads(line) for line in f.read_text().splitlines() if line.strip()]
    return ["## How the recipe was chosen", "", f"`{SWEEP}` (`benchmarks/moe_balance_sweep.py`, its rounds and rules in "
            "benchmarks/README.md): each setting continues `data/models/tiny-qwen3-moe-fine`, or the model its name "
            "starts from (\"from-...\"), (warm-up 10 steps, cosine to 10%) on one thread under a shared machine's load "
            "(train s: wall time; 0: measured only), then measures the routing of one sample per prompt of 64 prompts and the accuracy of 256 prompts x 4 "
            "samples, on the split the row names. The first rows were measured on held-out prompts; from 2026-12-06 on, "
            "recipes are chosen on validation prompts and only the chosen model is measured on held-out ones (its card "
            "above):", "", *sweep_table(rows), ""]


def _card_text(log: dict, cfg: dict, metrics: dict | None) -> str:
    arch = cfg["architectures"][0]
    head = [f"# {Path(log['config']['out']).name}: embedded base policy ({arch})", "",
            "Character-level policy for the arithmetic-chain task of `gpolib.tasks`, trained by supervised learning"
            + (" (continued from another model's weights: the recipe below)." if log["config"].get("init") else
               " from scratch."), "It is a base policy of the workbook's RL experiments.", "",
            "Prompt `47*6+13*7=?\\n` (left to right); completion: one line per step (a product either direct,",
            "`295*7=2065`, or long, `295*7:5*7=35,9*7+3=66,2*7+6=20;295*7=2065`), final line `A=<int>`, then `<eos>`. Load with `gpolib.models.load_policy(path)` or",
            "`AutoModelForCausalLM.from_pretrained(path)` / `AutoTokenizer.from_pretrained(path)`.", ""]
    router = (["With LoRA the routers stay frozen unless `TrainConfig(train_router=True)`, which trains each",
               "layer's router weight `mlp.gate.weight` in full (GSPO Sec. 5.3 experiments).", ""]
              if "num_experts_per_tok" in cfg else [])
    lines = (head + _arch_lines(log, cfg, arch) + router + _recipe_lines(log, cfg)
             + balance_lines((metrics or {}).get("routing")) + _sweep_lines(log) + _metrics_lines(metrics))
    return "\n".join(lines)
