"""A Qwen2-architecture causal LM with random weights and a BPE tokenizer with a ChatML chat template,
saved as a Hugging Face folder: the gpu code path (chat prompts, bf16, gradient checkpointing, LoRA)
exercised without a model hub.

    python scale/random_qwen.py --out runs/qwen-small                  # a few MB, for CPU tests
    python scale/random_qwen.py --out runs/qwen-0.5b --shape qwen2.5-0.5b   # Qwen2.5-0.5B's shape

The tokenizer is a byte-level BPE trained here on the task prompts, worked answers of the embedded
task and the chat instruction (not Qwen's vocabulary); its special tokens and chat template follow
Qwen2.5-Instruct's: <|im_start|>role\\ncontent<|im_end|>, eos = <|im_end|>, pad = <|endoftext|>.
The model's vocabulary keeps the shape's size (151936 for the 0.5B shape), so the embedding and
LM-head cost is the real one; ids beyond the tokenizer's vocabulary decode to nothing.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

SHAPES = {
    "small": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                  intermediate_size=128, vocab_size=None, max_position_embeddings=512, tie_word_embeddings=True),
    "qwen2.5-0.5b": dict(hidden_size=896, num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
                         intermediate_size=4864, vocab_size=151936, max_position_embeddings=32768,
                         tie_word_embeddings=True),
}
"""`small` for tests; `qwen2.5-0.5b` is Qwen2.5-0.5B's published config.json shape (vocab None: the tokenizer's)."""
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHATML = ("{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
          "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def corpus(limit: int = 2000) -> list:
    """Task prompts with their answer lines, and the chat instruction: the text the tokenizer must cover."""
    from gpolib.tasks import INSTRUCTION, load_tasks

    rows = load_tasks("data/tasks/train.jsonl")[:limit]
    return [INSTRUCTION] + [f"{r['prompt']}A={r['answer']}\n" for r in rows]


def chat_tokenizer(vocab_size: int = 512):
    """A byte-level BPE `PreTrainedTokenizerFast` with Qwen2.5-Instruct's special tokens and chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(corpus(), trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   chat_template=CHATML, padding_side="left")


def save_random_qwen(out_dir, shape: str = "small", seed: int = 0) -> str:
    """Write the random-weight Qwen2 model and the chat tokenizer to `out_dir`; returns the path."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    tok = chat_tokenizer()
    dims = dict(SHAPES[shape])
    dims["vocab_size"] = dims["vocab_size"] or len(tok)
    torch.manual_seed(seed)
    cfg = Qwen2Config(**dims, rope_theta=1_000_000.0, pad_token_id=tok.pad_token_id,
                      eos_token_id=tok.eos_token_id, bos_token_id=None)
    Qwen2ForCausalLM(cfg).save_pretrained(out_dir)
    tok.save_pretrained(out_dir)
    return str(out_dir)


def main(argv: list | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("--shape", default="small", choices=sorted(SHAPES))
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    print(save_random_qwen(a.out, a.shape, a.seed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
