"""A byte-level BPE tokenizer of the Qwen2/Qwen3 kind, trained with Hugging Face `tokenizers`:
NFC normalizer, Qwen's Split pattern + ByteLevel pre-tokenizer, ByteLevel decoder, the given
special tokens first (ids 0, 1, ...). Shared by make_tokenizer_golden.py and train_tiny.py.
Takes: nothing to run alone: a module (training a tokenizer with it takes seconds)."""
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers
from tokenizers import pre_tokenizers, processors, trainers

# The Split pattern of Qwen2/Qwen3's tokenizer.json.
QWEN_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
                r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def train_qwen_bpe(texts, vocab_size, specials, min_frequency=1):
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency,
                                  special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(texts, trainer)
    # As in Qwen's tokenizer.json: special tokens are not normalised.
    tok.add_special_tokens([AddedToken(s, normalized=False, special=True) for s in specials])
    return tok
