"""Character-level tokenizer for the embedded task, in Hugging Face format.

Every printable ASCII character and `\\n` is one token; anything else maps to
`<unk>`. Special tokens: `<pad>` (id 0), `<eos>` (id 1), `<unk>` (id 2). No token is
added automatically (prompts are encoded as they are; the SFT data appends EOS).
The decoder joins tokens without spaces, so for task strings
`tok.decode(tok(s).input_ids, skip_special_tokens=True) == s`.
"""
from __future__ import annotations

import string

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

SPECIAL_TOKENS = ("<pad>", "<eos>", "<unk>")
CHARS = "\n" + "".join(c for c in string.printable if c.isprintable())
"""the vocabulary after the special tokens: newline and the 95 printable ASCII characters"""


def _backend() -> Tokenizer:
    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS)}
    vocab.update({c: len(SPECIAL_TOKENS) + i for i, c in enumerate(CHARS)})
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    # every character (newline included) becomes its own pre-token
    backend.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    backend.decoder = decoders.Fuse()
    return backend


def build_tokenizer(padding_side: str = "left") -> PreTrainedTokenizerFast:
    """The task tokenizer; `padding_side` is "left" (generation) or "right"."""
    return PreTrainedTokenizerFast(
        tokenizer_object=_backend(), pad_token="<pad>", eos_token="<eos>", unk_token="<unk>",
        padding_side=padding_side, clean_up_tokenization_spaces=False, model_max_length=512)
