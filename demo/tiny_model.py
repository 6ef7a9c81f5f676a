"""``python -m demo.tiny_model --out DIR``: a tiny random Llama that vLLM loads, built from local resources only.

Run with ``.venv-engine/bin/python`` (it needs torch, transformers and tokenizers, which only the engine
virtualenv has). Writes ``config.json``, ``generation_config.json``, ``model.safetensors`` and a byte-level BPE
tokenizer (``tokenizer.json`` + ``tokenizer_config.json``) trained on the Python standard library's own sources,
so nothing is downloaded. Seeded: the same arguments give the same weights and the same tokenizer, so a
profile measured on one machine describes the model another machine builds.

The weights are random: the model streams fluent nonsense, which is all a latency benchmark needs (requests
use ``ignore_eos`` and a fixed ``max_tokens``). Shape defaults: hidden 512, 4 layers, 8 heads, 4 KV heads,
MLP 3 x hidden, vocabulary 8,192 (~21 M parameters, float32).
"""

from __future__ import annotations

import argparse
import json
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path
from typing import Any

SPECIAL_TOKENS = ("<s>", "</s>", "<unk>")
CORPUS_BYTES = 6_000_000
"""Standard-library source bytes the tokenizer is trained on (enough for a stable 8k vocabulary, ~10 s)."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m demo.tiny_model", description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, required=True, help="directory to write (created; files overwritten)")
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--kv-heads", type=int, default=4)
    p.add_argument("--vocab", type=int, default=8192)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-position", type=int, default=8192, help="max_position_embeddings (default 8192)")
    return p.parse_args(argv)


def check_shape(args: argparse.Namespace) -> str | None:
    """The first problem with the requested shape, or None."""
    if min(args.hidden, args.layers, args.heads, args.kv_heads) < 1:
        return "--hidden, --layers, --heads and --kv-heads must be positive"
    if args.hidden % args.heads:
        return f"--hidden {args.hidden} must be a multiple of --heads {args.heads}"
    if args.heads % args.kv_heads:
        return f"--heads {args.heads} must be a multiple of --kv-heads {args.kv_heads}"
    if (args.hidden // args.heads) % 2:
        return "the head dimension (hidden / heads) must be even (rotary embeddings)"
    if args.vocab < 512:
        return "--vocab must be at least 512"
    return None


def corpus_files(limit_bytes: int = CORPUS_BYTES) -> list[Path]:
    """Standard-library ``.py`` files in a fixed (sorted) order, up to ``limit_bytes`` in all."""
    root = Path(sysconfig.get_paths()["stdlib"])
    picked: list[Path] = []
    total = 0
    for path in sorted(root.rglob("*.py")):
        if "site-packages" in path.parts or "test" in path.parts or "tests" in path.parts:
            continue
        size = path.stat().st_size
        if total + size > limit_bytes:
            continue
        picked.append(path)
        total += size
    if not picked:
        raise SystemExit(f"tiny_model: no Python sources found under {root} to train the tokenizer on")
    return picked


def _lines(files: list[Path]) -> Iterator[str]:
    for path in files:
        yield path.read_text(encoding="utf-8", errors="replace")


def train_tokenizer(vocab: int) -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=list(SPECIAL_TOKENS), show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(_lines(corpus_files()), trainer=trainer)
    return tok


def build_model(args: argparse.Namespace, bos: int, eos: int) -> Any:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(args.seed)
    config = LlamaConfig(
        vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=3 * args.hidden,
        num_hidden_layers=args.layers, num_attention_heads=args.heads, num_key_value_heads=args.kv_heads,
        max_position_embeddings=args.max_position, rms_norm_eps=1e-5, rope_theta=10000.0,
        bos_token_id=bos, eos_token_id=eos, tie_word_embeddings=False, torch_dtype="float32",
    )
    model = LlamaForCausalLM(config)
    model.eval()
    return model


def write_tokenizer(tok: Any, out: Path, max_len: int) -> None:
    from transformers import PreTrainedTokenizerFast

    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                                   model_max_length=max_len)
    fast.save_pretrained(str(out))


def build(args: argparse.Namespace) -> dict[str, Any]:
    args.out.mkdir(parents=True, exist_ok=True)
    tok = train_tokenizer(args.vocab)
    bos, eos = tok.token_to_id("<s>"), tok.token_to_id("</s>")
    model = build_model(args, bos, eos)
    model.save_pretrained(str(args.out), safe_serialization=True)
    write_tokenizer(tok, args.out, args.max_position)
    params = sum(p.numel() for p in model.parameters())
    info = {"hidden": args.hidden, "layers": args.layers, "heads": args.heads, "kv_heads": args.kv_heads,
            "vocab": tok.get_vocab_size(), "seed": args.seed, "parameters": int(params),
            "kv_bytes_per_token": 2 * args.layers * args.kv_heads * (args.hidden // args.heads) * 4}
    (args.out / "tiny_model.json").write_text(json.dumps(info, indent=2) + "\n")
    return info


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    problem = check_shape(args)
    if problem:
        print(f"tiny_model: {problem}", file=sys.stderr)
        return 2
    try:
        import tokenizers  # noqa: F401
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as exc:
        print(f"tiny_model: {exc.name} is not installed; run it with .venv-engine/bin/python (make engine)",
              file=sys.stderr)
        return 2
    info = build(args)
    print(f"wrote {args.out}: {info['parameters'] / 1e6:.1f} M parameters, vocabulary {info['vocab']}, "
          f"{info['layers']} layers x hidden {info['hidden']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
