"""The built-in output detectors: e-mail addresses, phone numbers and payment card numbers.

What counts as a phone number: 7 to 15 digits written the way people write phone numbers, namely
  - international: "+" and a country code, then groups split by single spaces, dots or dashes, or in
    parentheses: +1 (555) 123-4567, +44 20 7946 0958, +15551234567;
  - North American: (555) 123-4567, 555-123-4567, 555.123.4567, 555 123 4567, and the local 555-1234;
  - European trunk-prefixed: 020 7946 0958, 030 123 4567, 06 12 34 56 78.
The number must stand alone: no letter, digit, "+", ".", "-" or currency sign just before it, and no letter,
digit or further digit group just after it. So years (2024), ranges (1999-2001), dates (2024-01-15),
prices ($1,299.99, 1.234.567), versions, addresses (192.168.1.1) and bare digit strings without a "+"
(5551234567, order numbers) are left alone.
"""

from cirrus.guardrails.rules import Detector

# Every detector reads at most this many characters from where a match starts.
REACH = 64

EMAIL_CHARS = r"[\w.%+@-]"
PHONE_CHARS = r"[\d .()+-]"
CARD_CHARS = r"[\d -]"


def luhn_valid(digits: str) -> bool:
    total = 0
    for index, digit in enumerate(int(char) for char in reversed(digits)):
        doubled = digit * 2 if index % 2 else digit
        total += doubled - 9 if doubled > 9 else doubled
    return total % 10 == 0


def _digits(text: str) -> str:
    return "".join(char for char in text if char.isdigit())


def _is_card(text: str) -> bool:
    return luhn_valid(_digits(text))


def _is_phone(text: str) -> bool:
    return 7 <= len(_digits(text)) <= 15


def _anything(_: str) -> bool:
    return True


EMAIL = Detector(
    # The whole run of address characters is at most 62 long, so a match is decided within REACH; a longer
    # run loses only its first characters to the redaction's left.
    rf"(?={EMAIL_CHARS}{{6,62}}(?!{EMAIL_CHARS}))"
    r"[\w.%+-]+@[\w-]+(?:\.[\w-]+)*\.[^\W\d_]{2,}(?![\w-]|\.[\w-])",
    "[email redacted]",
    EMAIL_CHARS,
    REACH,
    lookahead=2,
    accept=_anything,
)

PHONE = Detector(
    r"(?<![\w+.$€£¥-])"
    r"(?:\+\d{1,3}(?:[ .-]?(?:\(\d{1,4}\)|\d{1,4})){2,6}"
    r"|\(\d{3}\) ?\d{3}[ .-]\d{4}"
    r"|\d{3}([ .-])\d{3}\1\d{4}"
    r"|\d{3}-\d{4}"
    r"|0\d{1,4}[ -]\d{3,4}[ -]?\d{3,4}"
    r"|0\d(?:[ .]\d{2}){4})"
    r"(?!\w|[ .-]?[\d(])",
    "[phone redacted]",
    PHONE_CHARS,
    REACH,
    lookahead=2,
    accept=_is_phone,
)

CARD = Detector(
    # 13 to 19 digits, single spaces or dashes between them; only the whole run of digits, and only when its
    # Luhn check passes.
    r"(?<![\w-])\d(?:[ -]?\d){12,18}(?!\w|[ -]\d)",
    "[card redacted]",
    CARD_CHARS,
    REACH,
    lookahead=2,
    accept=_is_card,
)

# In the order they win when two match at the same place.
DETECTORS: dict[str, Detector] = {"card": CARD, "email": EMAIL, "phone": PHONE}
