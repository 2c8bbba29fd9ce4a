"""tok_peers.py: shared helpers for the tokenizer tests and benchmark (not a test itself).

The peers are encoders nobody here wrote, built from the same local GPT-2
files (no download at run time): tiktoken with its own GPT-2 definition
(tiktoken_ext.openai_public.gpt2, its pattern and its sha256 checks of the
files), and Hugging Face tokenizers' BPE with the ByteLevel pre-tokenizer,
as GPT-2's tokenizer.json configures it. They need the bench virtual
environment (scripts/install-test-peers.sh); `varied_text` needs only the
standard library.
"""
import os
import random
import subprocess
import sys
import unicodedata

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GPT2_DIR = os.environ.get("BS_GPT2_DIR", os.path.join(ROOT, "tests", "data", "gpt2"))


def peer_python():
    """Installs the peers if needed; returns the python that has them."""
    p = subprocess.run([os.path.join(ROOT, "scripts", "install-test-peers.sh")], capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError("scripts/install-test-peers.sh failed:\n" + p.stderr)
    return p.stdout.strip().splitlines()[-1]


def tiktoken_gpt2(vocab_dir=GPT2_DIR):
    os.environ["TIKTOKEN_CACHE_DIR"] = ""  # read the local files, cache nothing
    import tiktoken
    from tiktoken_ext import openai_public

    real = openai_public.data_gym_to_mergeable_bpe_ranks

    def local_files(vocab_bpe_file, encoder_json_file, vocab_bpe_hash=None, encoder_json_hash=None, **kw):
        return real(os.path.join(vocab_dir, "vocab.bpe"), os.path.join(vocab_dir, "encoder.json"),
                    vocab_bpe_hash, encoder_json_hash, **kw)

    openai_public.data_gym_to_mergeable_bpe_ranks = local_files
    try:
        return tiktoken.Encoding(**openai_public.gpt2())
    finally:
        openai_public.data_gym_to_mergeable_bpe_ranks = real


def hf_bpe(vocab_dir=GPT2_DIR):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    tok = Tokenizer(models.BPE.from_file(os.path.join(vocab_dir, "encoder.json"), os.path.join(vocab_dir, "vocab.bpe")))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    return tok


WORDS = ("the of and to in is was he for it with as his on be at by I this had not are but from or have an they "
         "which one you were her all she there would their we him been has when who will more no if out so said "
         "what up its about into than them can only other new some could time these two may then do first any my "
         "now such like our over man me even most made after also did many before must through back years where "
         "much your way well down should because each just those people Mr how too little state good very make "
         "world still own see men work long get here between both life being under never day same another know "
         "while last might us great old year off come since against go came right used take three Hello WORLD "
         "naïve café résumé coöperate façade jalapeño Zürich straße Ærø ŒUVRE").split()
CONTRACTIONS = ("don't I'm they're we've you'll she'd it's IT'S DON'T We'Re o'clock rock'n'roll 'tis '' '''s "
                "'s 't 're 've 'm 'll 'd 'S 'T 'X ’s can’t l'été aujourd'hui").split()
NUMBERS_FIXED = ["3.14159", "1,000,000", "2024-05-20", "0x1F600", "1e-9", "٣٤٥", "१२३", "１２３", "²³", "½",
                 "Ⅻ", "ⅷ", "一二三", "৫৬", "๓๔"]
PUNCT = ["...", "!!!", "?!", "--", "—", "«", "»", "“quoted”", "(parens)", "[x]", "{\"json\": 1}", "<html>",
         "@#$%^&*", "\\", "~`", "…", "¿", "¡", "§", "©", "™", "→", "∑", "√", "≠", "€", "£", "¥", ":-)", "<|endoftext|>"]
SPACES = ["  ", "   ", "    ", "\t", "\t\t", " \t ", "\u00a0", "\u3000", "\u2028", "\u2029", "\u2009", "\u200a",
          "\u1680", "\u202f", "\u205f", "\x0b", "\x0c", "\x85", "\r", "\r\n", "\n\n", " \n ", "\x1c", "\x1d", "\x1e",
          "\x1f", "\u200b", "\ufeff", "\u180e"]
EMOJI = ["😀", "🎉", "👍", "👍🏽", "👨‍👩‍👧", "❤️", "🇫🇷", "🏳️‍🌈", "🤖", "💯", "🙂🙂🙂", "☕", "🐍", "\u20e3", "🧑🏿‍💻"]
SCRIPT_RANGES = [(0x00C0, 0x024F), (0x0370, 0x03FF), (0x0400, 0x04FF), (0x0590, 0x05FF), (0x0600, 0x06FF),
                 (0x0900, 0x097F), (0x0E00, 0x0E7F), (0x3040, 0x30FF), (0x4E00, 0x9FFF), (0xAC00, 0xD7A3),
                 (0x0300, 0x036F), (0x2000, 0x2BFF), (0x1F300, 0x1FAFF), (0x10000, 0x2FFFF)]


def _assigned(cp):
    """Assigned in this Python's Unicode database (14.0 for Python 3.11), not a surrogate: every
    tool here (utf8proc, tiktoken, Hugging Face) knows its category."""
    return unicodedata.category(chr(cp)) not in ("Cn", "Cs")


def _script_run(rng):
    lo, hi = rng.choice(SCRIPT_RANGES)
    out = []
    while len(out) < rng.randint(1, 8):
        cp = rng.randint(lo, hi)
        if _assigned(cp):
            out.append(chr(cp))
    return "".join(out)


def _item(rng):
    r = rng.random()
    if r < 0.40:
        w = rng.choice(WORDS)
        return w.upper() if rng.random() < 0.05 else w.capitalize() if rng.random() < 0.1 else w
    if r < 0.50:
        return rng.choice(CONTRACTIONS)
    if r < 0.60:
        return rng.choice(NUMBERS_FIXED) if rng.random() < 0.3 else str(rng.randint(0, 10 ** rng.randint(1, 12)))
    if r < 0.68:
        return rng.choice(PUNCT)
    if r < 0.78:
        return _script_run(rng)
    if r < 0.84:
        return rng.choice(EMOJI)
    if r < 0.93:
        return rng.choice(SPACES)
    if r < 0.96:  # glued: letters, digits, marks and symbols with no space between
        return "".join(_item(rng) for _ in range(rng.randint(2, 4))).replace(" ", "")
    if r < 0.98:
        return rng.choice(WORDS) + rng.choice(["'s", "'S", "'ll", "n't", "'re", "'ve", "'d", "'m"])
    return rng.choice(["a" * rng.randint(50, 400), "7" * rng.randint(50, 2000), " " * rng.randint(5, 300),
                       "\n" * rng.randint(2, 50), "ab" * rng.randint(30, 300), "!?" * rng.randint(10, 200)])


def varied_text(lines=12000, seed=1234):
    """Deterministic text of many kinds (lines joined by newlines): words, contractions, numbers in
    several scripts, punctuation runs, letters of many scripts, combining marks, emoji sequences,
    whitespace runs of every Unicode kind, glued mixtures, and pieces hundreds of symbols long."""
    rng = random.Random(seed)
    out = []
    for _ in range(lines):
        parts = [_item(rng) for _ in range(rng.randint(0, 24))]
        seps = [rng.choice([" ", " ", " ", " ", "", "  ", "\t"]) for _ in parts]
        out.append("".join(p + s for p, s in zip(parts, seps)))
    return "\n".join(out)


if __name__ == "__main__":
    sys.stdout.write(varied_text())
