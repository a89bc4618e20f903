"""Secrets out of anything shown: URL credentials (``user:password@``) and secret query parameters.

Every URL kbseek shows (settings, ``/ready``, error bodies, log lines, answer notes) goes through
:func:`mask_url`, or :func:`redact` for free text that may hold URLs (an exception's message).
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, urlencode

MASK = "***"
# a URL's authority with userinfo: scheme://userinfo@host; greedy up to the authority's last '@', so that a
# password with an unescaped '@' in it is masked whole
_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/?#\s'\"]*)@")
_SECRET_PARAM = re.compile(r"(?i)^(.*[_-])?(key|token|secret|password|passwd|pwd|sig|signature|auth)$")
_QUERY = re.compile(r"(?P<url>\b[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"?#]*)\?(?P<query>[^\s'\"#]*)")


def _mask_userinfo(match: re.Match[str]) -> str:
    user, colon, _ = match["userinfo"].partition(":")
    # user:password keeps the user (it names the account); a lone userinfo may be a token, so all of it goes
    return f"{match['scheme']}{user}:{MASK}@" if colon else f"{match['scheme']}{MASK}@"


def _mask_query(match: re.Match[str]) -> str:
    pairs = parse_qsl(match["query"], keep_blank_values=True)
    if not any(_SECRET_PARAM.match(name) for name, _ in pairs):
        return match[0]
    masked = [(name, MASK if _SECRET_PARAM.match(name) else value) for name, value in pairs]
    return f"{match['url']}?{urlencode(masked, safe='*')}"


def redact(text: str) -> str:
    """``text`` with the credentials of every URL in it masked.

    >>> redact("embedding server http://user:secret@host:8080/v1 failed")
    'embedding server http://user:***@host:8080/v1 failed'
    >>> redact("postgresql+psycopg://kb@db/kb and https://h/v1?api_key=s3&model=m")
    'postgresql+psycopg://***@db/kb and https://h/v1?api_key=***&model=m'
    >>> redact("http://u:p@ss@host/x"), redact("no URL here: user@example.com")
    ('http://u:***@host/x', 'no URL here: user@example.com')
    """
    return _QUERY.sub(_mask_query, _USERINFO.sub(_mask_userinfo, text))


def mask_url(url: str) -> str:
    """One URL with its credentials masked (the same rule as :func:`redact`).

    >>> mask_url("sqlite:////tmp/kb/kbseek.db"), mask_url("http://u:p@h/v1")
    ('sqlite:////tmp/kb/kbseek.db', 'http://u:***@h/v1')
    """
    return redact(url)
