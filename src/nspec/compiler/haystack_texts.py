"""The haystack as each trial reads it: its documents joined (repeated as often as the longest length needs) and
tokenised once per tokenizer, the trial's order and first token, held for the trial and no longer."""

from __future__ import annotations

from .draws import Draws
from .haystack import HaystackSource, Layout, TokenizedText, trial_order
from .tokenizers import Tokenizer


class HaystackTexts:
    """The tokenised haystacks of a compile: one per encoding and haystack (the spec's, or a task's variant of it),
    and per trial where the trials' orders differ (`vary: shuffle`: only the current trial's are kept)."""

    def __init__(self, seed: int, longest: int, trials: int, pass_tokens: dict[str, int]) -> None:
        self.seed, self.longest, self.trials = seed, longest, trials
        self.pass_tokens = pass_tokens  # filled in: per encoding, the tokens of one pass over the sources
        self._texts: dict[tuple[str, object, str], TokenizedText] = {}

    def text(self, tokenizer: Tokenizer, trial: int, source: HaystackSource) -> tuple[TokenizedText, int]:
        """The trial's tokenised haystack of ``source`` and its first token."""
        shuffled = source.vary == "shuffle" and trial > 0
        key = (tokenizer.encoding_name, trial if shuffled else "all", source.digest)
        if key not in self._texts:
            if shuffled:  # only the current trial's shuffled texts are kept
                for old in [k for k in self._texts if k[1] != "all"]:
                    del self._texts[old]
            tt = self._texts[key] = self._tokenize(tokenizer, trial_order(source, self.seed, trial), source)
            if tt.layout is not None and len(tt.data) >= tt.layout.pass_bytes:  # the text holds a whole pass
                self.pass_tokens.setdefault(tokenizer.encoding_name, tt.pass_tokens)
        tt = self._texts[key]
        return tt, self._start(tt, trial, source)

    def _tokenize(self, tokenizer: Tokenizer, order: list[int], source: HaystackSource) -> TokenizedText:
        """Join the documents (repeated as often as needed) and tokenise them once."""
        is_stack = source.kind == "stack"
        sep = source.separator
        docs = [source.documents[i] for i in order]
        one_pass = sum(len(d.encode()) for d in docs) + len(sep.encode()) * len(docs)
        offset_room = one_pass if source.vary == "offset" and self.trials > 1 else 0
        want_bytes = offset_room + self.longest * 6 + 4096
        while True:
            parts: list[str] = []
            starts: list[int] = []
            size = 0
            i = 0
            while size < want_bytes:
                if parts:
                    parts.append(sep)
                    size += len(sep.encode())
                starts.append(size)
                doc = docs[i % len(docs)]
                parts.append(doc)
                size += len(doc.encode())
                i += 1
            text = "".join(parts)
            if not is_stack and len(text) > want_bytes:
                # The last document overshoots by up to a whole novel: tokenise only up to the line end after the
                # bytes wanted (some tokenizers, llama.cpp's among them, take seconds per megabyte).
                end = text.find("\n", want_bytes)
                text = text if end < 0 else text[: end + 1]
            n = len(docs)
            ends = [start + len(doc.encode()) for start, doc in zip(starts[:n], docs, strict=False)]
            layout = Layout(starts[:n], ends, order[: len(ends)], one_pass)
            tt = TokenizedText(text, tokenizer, starts if is_stack else None, layout)
            if tt.n_tokens - tt.token_at_byte(offset_room) >= self.longest + 64:
                tt.pass_tokens = tt.token_at_byte(min(one_pass, len(tt.data)))
                return tt
            want_bytes *= 2

    def _start(self, tt: TokenizedText, trial: int, source: HaystackSource) -> int:
        if source.vary != "offset" or trial == 0:
            return 0
        wanted = Draws(self.seed, "haystack-offset", trial).below(max(1, tt.pass_tokens))
        return tt.last("boundary", wanted, 0)
