"""Finding markers in text that arrives piece by piece."""


def held_back(text: str, *markers: str) -> int:
    """How many characters at the end of `text` could be the start of one of `markers`.

    A streaming parser keeps that many characters until the next piece says whether a marker begins there.
    """
    longest = 0
    for marker in markers:
        for size in range(min(len(marker) - 1, len(text)), longest, -1):
            if text.endswith(marker[:size]):
                longest = size
                break
    return longest
