"""Reading a free-text answer the way a careful judge does: its content words, its sentences and clauses, what it
puts in quotes, whether it refuses or says the context lacks the answer, its yes/no stance, negations and hedges.

Pure functions of text; `nspec.runners.grading.grader` builds the default cascade (`auto`) on them.
"""

from __future__ import annotations

import difflib
import gzip
import re
from collections import Counter
from dataclasses import dataclass, field
from functools import cache, lru_cache
from importlib import resources

# Answers longer than this are not read (an answer runs to a few thousand characters; one far longer is a model
# that did not stop): their verdict is left to the judges.
LONGEST = 20_000
TOO_LONG = f"longer than {LONGEST:,} characters: not read"

# Function words and the scaffolding of answers about a text ("according to the limerick, ..."): never evidence.
_STOP_WORDS = """
a an the this that these those there here it its it's itself he him his himself she her hers herself they them
their theirs themselves we us our ours you your yours i me my mine one ones who whom whose which what when where
why how whether if then than so as such some any each every all both either neither other another same own is
are was were be been being am do does did doing done have has had having will would shall should can could may
might must ought of in on at by for with without from to into onto upon about above below over under between
among through during before after until till up down out off again further once and or nor but also just only
very too quite rather really even still yet ever much many more most less least few per via like unlike while
whereas although though because since unless whilst text texts context document documents passage passages
limerick limericks poem poems verse verses line lines stanza sentence sentences story stories log entry entries
question questions answer answers according based provided given above following mentioned mention mentions
mentioning states stated state says said say tell tells told describes described describe refers referred appear
appears seems seem specifically exactly simply actually indeed therefore thus hence answer's unfortunately sorry
apologise apologize apologies afraid sure certainly okay ok well oh hmm i'm i've it's that's there's yes no not
never none nothing n't
"""
_STOP = frozenset(_STOP_WORDS.split())
_NEGATIONS = frozenset(["not", "never", "no", "none", "nothing", "nobody", "neither", "nor", "without", "n't"])
_WORD = re.compile(r"[a-z0-9]+(?:\.[0-9]+)?(?:'[a-z]+)?")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}\b)")
_UNITS = {
    "zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9,
    "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14, "fifteen": 15, "sixteen": 16,
    "seventeen": 17, "eighteen": 18, "nineteen": 19, "dozen": 12,
}  # fmt: skip
_TENS = {"twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80, "ninety": 90}
_SCALES = {"hundred": 100, "thousand": 1000, "million": 1_000_000}

# "The context does not hold the answer", in the ways models say it. Matched on one clause, in normalised text.
# The sayer of a "does not say": the text or its parts — not a character of the story ("He didn't say anything" can
# be the right answer). The one answering says it with verbs of finding ("I do not see...", "we don't have..."): "I
# don't give a damn" is a line of a limerick, not a "not found".
_SAYER = r"""(?:text|texts|context|document|documents|passage|passages|limerick|limericks|poem|poems|log|logs
    |story|stories|entry|entries|information|excerpt|source|sources|it|this|they|these)"""
_NOT_THERE = re.compile(
    rf"""
    \b{_SAYER}\b(?:\s+[\w'.-]+){{0,6}}?\s+(?:does|do|did|is|are|was|were|has|have|am)\s*(?:not|n't)\s+(?:\w+\s+){{0,2}}?
        (?:contain|mention|say|state|specify|provide|include|indicate|reveal|give|tell|describe|discuss|address
          |offer|explain|identify|name|list|refer|record|show|see|find|know|seem|appear|clarify|answer)
    | \b(?:i|we)\b(?:\s+[\w'-]+){{0,3}}?\s+(?:do|did|have|am)\s*(?:not|n't)\s+(?:\w+\s+){{0,2}}?
        (?:see|find|know|have|locate|notice|spot|recall|recognise|recognize)
    | \b(?:no|not\s+any)\s+(?:\w+\s+){{0,2}}?(?:mention|information|reference|record|details?|indication|data|clue
          |limerick|such|entry|answer|evidence)s?\b
    | \bnot\s+(?:\w+\s+)?(?:mentioned|found|provided|stated|specified|given|included|available|present|listed
          |contained|described|discussed|addressed|indicated|known|clear|specify|possible\s+to|able\s+to|recorded
          |explained|identified|named|revealed)\b
    | (?:^|\b(?:i|we|you|it|one)\b)(?:\s+[\w'-]+){{0,3}}?\s*
        (?:cannot|can't|can\s+not|could\s*not|couldn't|unable\s+to|not\s+able\s+to)\s+
          (?:\w+\s+){{0,2}}?(?:find|locate|determine|answer|identify|tell|say|provide|see|confirm|know|be\s+sure
          |be\s+determined|be\s+answered|be\s+found|give|spot|infer)
    | \b{_SAYER}\b(?:\s+[\w'.-]+){{0,6}}?\s+never\s+(?:\w+\s+)?
        (?:says|mentions|states|specifies|tells|explains|reveals|gives|names|identifies)\b
    | \b(?:says|states|mentions|tells\s+us|reveals)\s+nothing\b
    | \bnothing\s+(?:is\s+|was\s+)?(?:mentioned|said|stated|known|given|specified)\b
    | \bthere\s+(?:is|are|was|were)\s+no\b
    | \bunanswerable\b | \bnot\s+answerable\b
    | \b(?:insufficient|not\s+enough)\s+(?:\w+\s+)?(?:information|context|detail|details|data)\b
    | \bi\s+(?:do\s+not|don't)\s+know\b
    | \bnone\s+of\s+the\b
    | \b(?:impossible|not\s+possible)\s+to\s+(?:say|determine|tell|answer|know)
    | \bnot\s+in\s+the\s+(?:text|context|document|passage|limerick|log|provided)
    """,
    re.VERBOSE,
)
# A refusal to answer at all (policy, not the context).
_WONT = re.compile(
    r"\b(?:i'm\s+sorry|i\s+am\s+sorry|i\s+apologi[sz]e)\b[^.]*\b(?:can't|cannot|can\s+not|won't|unable)\s+"
    r"(?:help|assist|comply|provide|do\s+that|answer)"
)
# Doubt ("probably 47"), and alternatives offered in place of one answer ("a circus or a zoo").
_HEDGE = re.compile(
    r"\b(?:maybe|perhaps|possibly|probably|not\s+sure|unsure|uncertain|ambiguous|unclear|i\s+guess"
    r"|(?:may|might|could)\s+(?:have\s+)?be(?:en)?)\b"
)
_ALTERNATIVES = frozenset(["or", "either"])
_NEAR = 3  # words either side of an "or" that it offers alternatives to
# A yes or no opening an answer: "No.", "No, he...", "No he does not"; not "No fame came to him".
_THEN = r"(?=\s*[,.!;:\u2014\u2013-]|\s*$|\s+(?:he|she|it|they|i|that|this|the|not|sir|madam)\b)"
YES = re.compile(r"^\W*(?:yes|yeah|yep|correct|true|indeed)" + _THEN)
NO = re.compile(r"^\W*(?:no|nope|incorrect|false|not\s+at\s+all)" + _THEN)
_LEADS = re.compile(
    r"^\W*(?:(?:based\s+on|according\s+to|from|in)\s+(?:the\s+)?(?:provided\s+|given\s+|above\s+)?"
    r"(?:text|context|document|passage|limerick|log|information|poem)s?\s*,?\s*"
    r"|(?:the\s+)?answer(?:\s+to\s+(?:the|this|your)\s+question)?\s+is\s*:?\s*)"
)
# A sentence ends at . ! or ? (not after a title: "Mr. Smith") or at a line break.
_SENTENCES = re.compile(
    r"(?<=[.!?])(?<!\bMr\.)(?<!\bMrs\.)(?<!\bMs\.)(?<!\bDr\.)(?<!\bSt\.)[\"'\u201d\u2019)\]]*\s+(?=[^a-z])|\n+"
)
_CLAUSES = re.compile(r"[;:,\u2014\u2013]|\s-\s|\b(?:but|however|although|though|whereas|while|yet|except)\b")
# Quoted text: straight or typographic double quotes, typographic single quotes, straight single quotes that are not
# apostrophes (the man's hat), and > block quotes.
_QUOTES = re.compile(
    r"\"([^\"]+)\"|\u201c([^\u201d]+)\u201d|\u2018([^\u2019]+)\u2019"
    r"|(?<![\w])'((?:[^'\n]|'(?=\w))+)'(?![\w])|^\s*>\s?(.+)$",
    re.MULTILINE,
)
_ELLIPSIS = re.compile(r"\.\.\.|\u2026")
_MARKUP = re.compile(r"\*\*|__|`|^#+\s*|^\s*[-*\u2022]\s+", re.MULTILINE)


def words(text: str) -> list[str]:
    """Lower-case word tokens, thousands separators and typographic apostrophes normalised."""
    return _WORD.findall(_THOUSANDS.sub("", text.replace("\u2019", "'").replace("\u2018", "'").casefold()))


# Irregular verb forms, so that "ate" in an answer meets "eat" in a question (and "wrote" meets "write").
_IRREGULAR_FORMS = """
    ate:eat eaten:eat wrote:write written:write went:go gone:go came:come took:take taken:take gave:give given:give
    saw:see seen:see found:find bought:buy thought:think told:tell said:say ran:run sang:sing sung:sing drank:drink
    drunk:drink swam:swim flew:fly flown:fly fell:fall fallen:fall sold:sell sent:send spent:spend built:build
    caught:catch brought:bring taught:teach kept:keep lost:lose made:make met:meet paid:pay rode:ride ridden:ride
    wore:wear worn:wear won:win threw:throw thrown:throw knew:know known:know grew:grow grown:grow drew:draw
    drawn:draw became:become began:begin begun:begin broke:break broken:break chose:choose chosen:choose
    drove:drive driven:drive forgot:forget forgotten:forget froze:freeze frozen:freeze got:get gotten:get
    held:hold hid:hide hidden:hide shook:shake shot:shoot slept:sleep spoke:speak spoken:speak stole:steal
    stolen:steal stood:stand struck:strike swore:swear tore:tear woke:wake sat:sit dug:dig fed:feed fought:fight
    hung:hang heard:hear meant:mean sought:seek sank:sink sunk:sink slid:slide spun:spin stuck:stick swept:sweep
    swung:swing understood:understand wept:weep wound:wind blew:blow blown:blow bit:bite bitten:bite hurt:hurt
    """
_IRREGULAR = dict(pair.split(":") for pair in _IRREGULAR_FORMS.split())


def stem(word: str) -> str:
    """A light suffix stripper: composed, composing, composes and compose share a stem; so do crate and crates, and
    an irregular past and its verb (ate, eat)."""
    if word.endswith("'s"):
        word = word[:-2]
    word = _IRREGULAR.get(word, word)
    if len(word) <= 3 or word[0].isdigit():
        return word
    for suffix, keep in (("ies", "y"), ("sses", "ss"), ("ing", ""), ("ed", ""), ("es", "e"), ("ly", "")):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            word = word[: -len(suffix)] + keep
            if keep == "" and len(word) > 3 and word[-1] == word[-2] and word[-1] not in "lsz":
                word = word[:-1]  # stopped -> stop, but fall -> fall
            break
    else:
        if word.endswith("s") and not word.endswith(("ss", "us", "is")):
            word = word[:-1]
    return word[:-1] if word.endswith("e") and len(word) > 4 else word


def numbers(tokens: list[str]) -> list[str]:
    """The tokens with number words joined into digits: 'forty-nine' -> '49', 'a dozen' -> '12'."""
    out: list[str] = []
    total = current = 0
    active = False
    for token in tokens:
        if token in _UNITS or token in _TENS:
            current += _UNITS.get(token, 0) + _TENS.get(token, 0)
            active = True
        elif active and token in _SCALES:
            if _SCALES[token] == 100:
                current = (current or 1) * 100
            else:
                total, current = total + (current or 1) * _SCALES[token], 0
        elif active and token == "and":
            continue  # one hundred and five
        else:
            if active:
                out.append(str(total + current))
                total = current = 0
                active = False
            out.append(token)
    if active:
        out.append(str(total + current))
    return out


def content(text: str) -> list[str]:
    """The stems of a text's content words, in order (numbers as digits)."""
    return [stem(w) for w in numbers(words(text)) if w not in _STOP and not w.endswith("n't")]


@lru_cache(maxsize=4096)
def stems_of(text: str | None) -> frozenset[str]:
    """The stems of the content words of a question or needle (none for None), read once for all its answers."""
    return frozenset(content(text)) if text else frozenset()


def is_negation(token: str) -> bool:
    """A word token that negates: not, never, nothing, don't..."""
    return token in _NEGATIONS or token.endswith("n't")


def is_number(token: str) -> bool:
    return token[:1].isdigit()


@cache
def common_stems() -> frozenset[str]:
    """Light words: stems at least as frequent as one in 2,000 words of the bundled Austen corpus, counting only
    lower-case occurrences (so that names are never light). Answers swap these freely ("made" for "put", "went"
    for "came"), so an expected answer's light words are not required where it has others."""
    counts: Counter[str] = Counter()
    folder = resources.files("nspec.compiler.corpora").joinpath("austen")
    for part in sorted(folder.iterdir(), key=lambda p: p.name):
        if part.name.endswith(".txt.gz"):
            counts.update(_WORD.findall(gzip.decompress(part.read_bytes()).decode("utf-8")))
    stems: Counter[str] = Counter()
    for word, n in counts.items():
        stems[stem(word)] += n
    floor = sum(counts.values()) / 2000
    return frozenset(s for s, n in stems.items() if n >= floor and not s[:1].isdigit())


@dataclass(frozen=True)
class Clause:
    text: str  # normalised (lower case, single spaces)
    stems: frozenset[str]
    not_there: bool  # says the context lacks something
    negated: bool
    hedged: bool  # a word of doubt: probably, maybe, might be...


@dataclass(frozen=True)
class Quote:
    text: str
    in_needle: float | None  # the share of its words found in the needle, in order; None without a needle

    @property
    def grounded(self) -> bool | None:
        """In the needle, a word or so of slack in ten aside (models re-punctuate and drop a word when they quote);
        None when there is no needle to check against."""
        return None if self.in_needle is None else self.in_needle >= 0.85

    @property
    def foreign(self) -> bool:
        """Text of another source: a passage of four words or more of which less than a third is in the needle."""
        return self.in_needle is not None and self.in_needle < 1 / 3 and len(words(self.text)) >= 4


@dataclass(frozen=True)
class Sentence:
    text: str  # normalised
    clauses: tuple[Clause, ...]
    offered: frozenset[str] = frozenset()  # content next to an "or": alternatives offered ("47 or 49")


@dataclass
class Reading:
    """An answer, read: the sentences and clauses outside quotes, and the quotes."""

    sentences: list[Sentence]
    quotes: list[Quote]
    refuses: bool  # a refusal to answer at all ("I'm sorry, I can't help with that")
    stems: set[str] = field(default_factory=set)  # content outside quotes

    @property
    def clauses(self) -> list[Clause]:
        return [c for s in self.sentences for c in s.clauses]

    def opens_not_there(self, asked: frozenset[str]) -> bool:
        """The answer opens by saying the context lacks the answer: its first clause that says anything beyond the
        question's words ("Unfortunately," and "The text mentions a trout" do not) says so."""
        for clause in self.clauses:
            if clause.not_there:
                return True
            if clause.stems - asked:
                return False
        return False

    def hedged_near(self, key: set[str]) -> bool:
        """Doubt about any of ``key``: a word of doubt in a sentence that gives it ("brass, perhaps"), or an
        alternative offered next to it ("on a tree or a wall"); not an "or" elsewhere ("a dirge or lament")."""
        for s in self.sentences:
            if s.offered & key or (any(c.stems & key for c in s.clauses) and any(c.hedged for c in s.clauses)):
                return True
        return False

    @property
    def ungrounded_quotes(self) -> list[Quote]:
        return [q for q in self.quotes if q.grounded is False]

    def stance(self) -> str | None:
        """'yes' or 'no' when the answer opens with one (after "Based on the text," and the like)."""
        if not self.sentences:
            return None
        first = _LEADS.sub("", self.sentences[0].text)
        if YES.match(first):
            return "yes"
        if NO.match(first):
            return "no"
        return None


def clean(answer: str) -> str:
    """Markdown emphasis, list bullets and headings removed; white space kept."""
    return _MARKUP.sub("", answer)


def _norm(text: str) -> str:
    """Lower case, ASCII apostrophes, single spaces."""
    return " ".join(text.replace("\u2019", "'").replace("\u2018", "'").casefold().split())


def read(answer: str, needle: str | None) -> Reading:
    """Read an answer; quotes are checked against ``needle`` when there is one."""
    text = clean(answer)
    quotes: list[Quote] = []

    def take(match: re.Match[str]) -> str:
        quoted = next(g for g in match.groups() if g is not None)
        if len(words(quoted)) >= 3:  # a phrase, not a scare-quoted word
            quotes.append(Quote(quoted, None if needle is None else in_needle(quoted, needle)))
            return " "
        return quoted

    outside = _QUOTES.sub(take, text)
    needle_words = " " + " ".join(words(needle)) + " " if needle is not None else None
    sentences = []
    stems: set[str] = set()
    for sentence in _SENTENCES.split(outside):
        clauses = []
        for part in _CLAUSES.split(sentence):
            norm = _norm(part)
            if not norm:
                continue
            own = frozenset(content(norm))
            stems |= own
            hedged = _hedged(norm, needle_words)
            clauses.append(Clause(norm, own, bool(_NOT_THERE.search(norm)), negated(norm), hedged))
        if clauses:
            norm = _norm(sentence)
            sentences.append(Sentence(norm, tuple(clauses), _offered(words(norm), needle_words)))
    return Reading(sentences, quotes, bool(_WONT.search(_norm(text))), stems)


def _offered(tokens: list[str], needle_words: str | None) -> frozenset[str]:
    """The content words within `_NEAR` words of an "or" or "either" that the needle does not say the same way."""
    near: set[str] = set()
    for i, token in enumerate(tokens):
        if token not in _ALTERNATIVES:
            continue
        window = tokens[max(0, i - _NEAR) : i + _NEAR + 1]
        if needle_words is not None and " " + " ".join(tokens[max(0, i - 1) : i + 2]) + " " in needle_words:
            continue  # the needle's own "more or less"
        near |= {stem(w) for w in window if w not in _STOP and not w.endswith("n't")}
    return frozenset(near)


def _hedged(clause: str, needle_words: str | None) -> bool:
    """Whether a clause hedges: a hedge that the needle has too, with a word either side, is the needle's own
    wording ("the captain ate nine, more or less"), not the answer's doubt."""
    for match in _HEDGE.finditer(clause):
        before = words(clause[: match.start()])[-1:]
        after = words(clause[match.end() :])[:1]
        window = " " + " ".join([*before, *words(match.group()), *after]) + " "
        if needle_words is None or window not in needle_words:
            return True
    return False


def negated(text: str) -> bool:
    """Whether a text (an expected answer, say) holds a negation: not, never, nothing, n't..."""
    norm = _norm(text)
    return bool(set(words(norm)) & _NEGATIONS) or "n't" in norm


@lru_cache(maxsize=4096)
def says_not_there(text: str) -> bool:
    """Whether a text (an expected answer, say) itself states that something is absent."""
    return bool(_NOT_THERE.search(_norm(text)))


def in_needle(quote: str, needle: str) -> float:
    """The share of a quote's words that occur in the needle in order, an ellipsis standing for omitted words: the
    least share of any part between ellipses."""
    haystack = words(needle)
    shares = []
    for segment in _ELLIPSIS.split(quote):
        seg = words(segment)
        if seg:
            matcher = difflib.SequenceMatcher(None, haystack, seg, autojunk=False)
            shares.append(sum(block.size for block in matcher.get_matching_blocks()) / len(seg))
    return min(shares, default=1.0)
