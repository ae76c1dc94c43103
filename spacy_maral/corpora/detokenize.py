"""Raw text from gold tokens: the text a user would have typed.

CoNLL files hold tokens, not text. Users call `nlp(text)` on raw sentences, so the
converter writes each sentence with the spacing of ordinary prose, and the raw-text
evaluation scores pipelines on that text:

- no space before closing punctuation (`. , ; : ! ? ) ] } %` and `...`) or before an
  English clitic (`'s`, `n't`, `'re`, `'ll`, `'ve`, `'d`, `'m`);
- no space after an opening bracket or an inverted Spanish mark (`( [ { ¿ ¡`);
- a space between all other tokens. Quotes (`"`) stay spaced on both sides: whether
  one opens or closes is not written in the tokens.

A token is never glued to a neighbour that is itself a whitespace token.
"""
from typing import List, Sequence, Tuple

CLOSING = frozenset({".", ",", ";", ":", "!", "?", ")", "]", "}", "%", "...", "…"})
OPENING = frozenset({"(", "[", "{", "¿", "¡"})
CLITICS = frozenset({"'s", "'S", "n't", "N'T", "'re", "'ll", "'ve", "'d", "'m", "’s", "n’t"})


def detokenized_spaces(words: Sequence[str]) -> List[bool]:
    """Whether each token is followed by a space in the raw text (the last never is).

    words (Sequence[str]): the tokens of one sentence.
    RETURNS (List[bool]): spaces for spaCy's Doc(words=..., spaces=...).
    """
    n = len(words)
    spaces = [True] * n
    if n:
        spaces[-1] = False
    for i in range(n - 1):
        left, right = words[i], words[i + 1]
        if not left.strip() or not right.strip():
            continue
        if left in OPENING or right in CLOSING or right in CLITICS:
            spaces[i] = False
    return spaces


def detokenize(words: Sequence[str]) -> Tuple[str, List[Tuple[int, int]]]:
    """The raw text of a token sequence and each token's character offsets in it.

    words (Sequence[str]): the tokens.
    RETURNS (Tuple[str, List[Tuple[int, int]]]): the text, and (start, end) per token.
    """
    spaces = detokenized_spaces(words)
    parts: List[str] = []
    offsets: List[Tuple[int, int]] = []
    pos = 0
    for word, space in zip(words, spaces):
        offsets.append((pos, pos + len(word)))
        parts.append(word + (" " if space else ""))
        pos += len(word) + (1 if space else 0)
    return "".join(parts), offsets
