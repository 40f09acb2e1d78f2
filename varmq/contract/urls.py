"""URLs in messages: the one redaction that takes their secrets out.

Every message of varmq and of its adapters that shows a store's URL (an error, a log line, a
store's ``location``) shows :func:`redact_url` of it. No I/O here.
"""

from __future__ import annotations

from urllib.parse import parse_qsl, quote, urlsplit

__all__ = ["HIDDEN", "redact_url"]

HIDDEN = "***"
"""What a secret is shown as."""


def redact_url(url: str) -> str:
    """``url`` with the password of its user info and every ``*password=`` query value hidden.

    ``redis://user:secret@host:6379/0?ssl_password=x`` becomes
    ``redis://user:***@host:6379/0?ssl_password=***``; a plain path is given back as it is. A
    URL that does not parse is hidden whole after its scheme, since where its secrets are
    cannot be told.
    """
    if "://" not in url:
        return url
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        scheme, sep, _ = url.partition("://")
        return f"{scheme}{sep}{HIDDEN}"
    netloc = parts.netloc
    if parts.password is not None:
        host = parts.hostname or ""
        if ":" in host:
            host = f"[{host}]"  # an IPv6 address
        if port is not None:
            host = f"{host}:{port}"
        netloc = f"{parts.username or ''}:{HIDDEN}@{host}"
    query = parts.query
    if "password" in query.lower():
        pairs = parse_qsl(query, keep_blank_values=True)
        query = "&".join(
            f"{quote(key)}={HIDDEN if key.lower().endswith('password') else quote(value)}"
            for key, value in pairs
        )
    # Put together by hand: urlunsplit drops the empty host of unix:///path.
    shown = f"{parts.scheme}://{netloc}{parts.path}"
    return shown + (f"?{query}" if query else "") + (f"#{parts.fragment}" if parts.fragment else "")
