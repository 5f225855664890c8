"""Secrets, in one place: how caisson recognises them and how they are named in the ledger.

Secrets never reach the ledger (docs/architecture.md, "ledger"): a credential is replaced by a
keyed fingerprint before any event is built. Recognition, from the name or from the value:

- environment variables whose name matches `CREDENTIAL_PATTERNS` (plus a scenario's own),
  and any value that looks like a key (`SECRET_VALUE`): `is_credential`, `looks_secret`,
  `redact_env`;
- command lines (argv), element by element (`redact_argv`): URL userinfo, values of credential
  headers (``-H 'Authorization: Bearer ...'``), of ``--*key*=``/``--*token*=``/``--*secret*=``/
  ``--password=`` options (or the element after such an option), of credential variables
  assigned (``API_KEY=...``), and tokens shaped like known keys (`KEY_SHAPE`);
- HTTP header names in `SECRET_HEADERS` and query parameter names in `SECRET_QUERY_PARAMS`
  (RFC 9110 section 11.6.2 Authorization, RFC 6265 Cookie/Set-Cookie, and the providers'
  own key headers): `Redactor`, which also scrubs the values it has seen from bodies.

The fingerprint key is derived from the operator's signing key (`derive_fingerprint_key`),
so a fingerprint tells two runs used the same secret without letting anyone test guesses
offline.
"""

from __future__ import annotations

import bisect
import fnmatch
import functools
import hashlib
import hmac
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Final
from urllib.parse import quote, unquote

__all__ = [
    "CREDENTIAL_PATTERNS",
    "MIN_SCRUB_CHARS",
    "SECRET_HEADERS",
    "SECRET_QUERY_PARAMS",
    "SECRET_VALUE",
    "KEY_SHAPE",
    "Redactor",
    "derive_fingerprint_key",
    "fingerprint_secret",
    "is_credential",
    "keyed_fingerprint",
    "looks_secret",
    "redact_argv",
    "redact_env",
    "redact_exec",
]

_FINGERPRINT_KEY_TAG = b"caisson secret fingerprint key\x00"


def fingerprint_secret(value: str, key: bytes) -> str:
    """A keyed fingerprint of a secret (HMAC-SHA256, first 16 hex), e.g. ``fp:1a2b...``.

    The key is per operator, so a fingerprint tells two runs used the same secret
    without letting anyone test guesses offline. Lone surrogates (undecodable bytes kept
    by ``surrogateescape``) are fingerprinted as the bytes they stand for.
    """
    return "fp:" + hmac.new(key, value.encode("utf-8", "surrogateescape"), hashlib.sha256).hexdigest()[:16]


def keyed_fingerprint(key: bytes) -> Callable[[str], str]:
    """value -> `fingerprint_secret` (value, key): the hook a `Redactor` takes."""
    return functools.partial(_fingerprint_with, key)


def _fingerprint_with(key: bytes, value: str) -> str:
    return fingerprint_secret(value, key)


def derive_fingerprint_key(signing_key_pem: bytes) -> bytes:
    """The fingerprint key (32 bytes): SHA-256 over a fixed tag and the signing key's PEM."""
    return hashlib.sha256(_FINGERPRINT_KEY_TAG + signing_key_pem).digest()


CREDENTIAL_PATTERNS = (
    "API_KEY", "APIKEY", "TOKEN", "SECRET", "PASSWORD", "*_KEY", "*_PASS", "*_PASSWD", "*CREDENTIALS*",
    "*_API_KEY", "*_APIKEY", "*_TOKEN", "*_SECRET", "*_SECRET_*", "*_PASSWORD", "*_ACCESS_KEY*",
    "AWS_*", "AZURE_*", "ARM_CLIENT_*", "GOOGLE_APPLICATION_CREDENTIALS", "GOOGLE_CLOUD_*", "GCP_*",
    "GCLOUD_*", "CLOUDSDK_*", "GITHUB_TOKEN", "GH_TOKEN", "NPM_TOKEN", "HF_TOKEN", "SSH_AUTH_SOCK",
)
"""Glob patterns of variables that carry credentials, matched against the upper-cased name."""

SECRET_VALUE = re.compile(
    r"^(sk-|sk_|rk_|ghp_|gho_|ghs_|github_pat_|xox[abpr]-|AKIA|ASIA|AIza|glpat-|hf_|npm_)|://[^/@\s]+:[^/@\s]+@|"
    r"^Bearer\s",
)
"""Values that look like keys or carry credentials in a URL (``user:pass@``), whatever
the variable is called: recorded only as fingerprints."""


def is_credential(name: str, extra_patterns: tuple[str, ...] | list[str] = ()) -> bool:
    """True when ``name`` matches a credential pattern (built-in or scenario-declared),
    whatever its case."""
    return _credential_names(tuple(extra_patterns)).match(name.upper()) is not None


@functools.lru_cache(maxsize=64)
def _credential_names(extra_patterns: tuple[str, ...]) -> re.Pattern[str]:
    """One regular expression for every pattern (`fnmatch.translate`): the exec hot path."""
    return re.compile("|".join(fnmatch.translate(p.upper()) for p in (*CREDENTIAL_PATTERNS, *extra_patterns)))


def looks_secret(value: str) -> bool:
    """True when a value looks like a key or holds credentials in a URL (see `SECRET_VALUE`)."""
    return bool(SECRET_VALUE.search(value))


def redact_env(env: Mapping[str, str], *, key: bytes, patterns: tuple[str, ...] | list[str] = ()) -> dict[str, str]:
    """The environment as the ledger may keep it: credential variables, and values that
    look like keys, replaced by keyed fingerprints."""
    return {name: fingerprint_secret(value, key) if is_credential(name, patterns) or looks_secret(value) else value
            for name, value in env.items()}


SECRET_HEADERS: Final = frozenset({
    "authorization", "proxy-authorization", "x-api-key", "api-key", "cookie", "set-cookie",
    "x-goog-api-key", "x-auth-token", "x-amz-security-token", "proxy-authenticate-info",
})
"""Header names (lowercase) whose values are fingerprinted."""
SECRET_QUERY_PARAMS: Final = frozenset({
    "key", "api_key", "api-key", "apikey", "token", "access_token", "auth", "secret",
    "password", "client_secret", "sig", "signature",
})
"""Query parameter names (lowercase) whose values are fingerprinted."""
MIN_SCRUB_CHARS: Final = 8
"""Secret values shorter than this are fingerprinted in headers but not searched for in
bodies (a short cookie value like ``1`` would corrupt unrelated bytes)."""


class Redactor:
    """Replace secrets with keyed fingerprints, and remember them to scrub bodies.

    Args:
        fingerprint: value -> keyed fingerprint, e.g. ``"fp:1a2b..."``.

    Attributes:
        replaced: how many secret values were replaced so far (headers, query, bodies).
    """

    def __init__(self, fingerprint: Callable[[str], str]):
        self._fingerprint = fingerprint
        self._known: dict[bytes, bytes] = {}  # secret bytes (raw and percent-encoded) -> fp
        self._order: list[bytes] = []  # longest first, so a secret inside another goes last
        self.replaced = 0

    def _fp(self, value: str) -> str:
        fp = self._fingerprint(value)
        self.replaced += 1
        if len(value) >= MIN_SCRUB_CHARS:
            for form in {value, quote(value, safe=""), unquote(value)}:
                key = form.encode("utf-8", "surrogateescape")
                if key not in self._known:
                    self._known[key] = fp.encode()
                    self._order = sorted(self._known, key=len, reverse=True)
        return fp

    def header(self, name: str, value: str) -> str:
        """The header value to record (unchanged unless ``name`` is a credential)."""
        lname = name.lower()
        if lname not in SECRET_HEADERS or not value:
            return value
        if lname in ("authorization", "proxy-authorization"):
            scheme, sep, cred = value.strip().partition(" ")
            return f"{scheme} {self._fp(cred.strip())}" if sep and cred.strip() else self._fp(value)
        if lname == "cookie":
            return "; ".join(self._pair(p.strip()) for p in value.split(";") if p.strip())
        if lname == "set-cookie":
            first, sep, attrs = value.partition(";")
            return self._pair(first.strip()) + sep + attrs
        return self._fp(value)

    def _pair(self, pair: str) -> str:
        name, sep, val = pair.partition("=")
        return f"{name}={self._fp(val)}" if sep and val else (pair if sep else self._fp(pair))

    def headers(self, headers: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
        """Redacted ``(name, value)`` pairs, in order."""
        return [(k, self.header(k, v)) for k, v in headers]

    def path(self, path: str) -> str:
        """The request target with credential query parameter values fingerprinted."""
        base, sep, query = path.partition("?")
        if not sep:
            return path
        frag_sep, fragment = "", ""
        if "#" in query:
            query, fragment = query.split("#", 1)
            frag_sep = "#"
        parts = []
        for item in query.split("&"):
            name, eq, val = item.partition("=")
            if eq and val and unquote(name).lower() in SECRET_QUERY_PARAMS:
                item = f"{name}={self._fp(unquote(val))}"
            parts.append(item)
        return base + "?" + "&".join(parts) + frag_sep + fragment

    def scrub(self, data: bytes) -> bytes:
        """``data`` with every remembered secret (>= `MIN_SCRUB_CHARS`) fingerprinted."""
        for secret in self._order:
            if secret in data:
                self.replaced += data.count(secret)
                data = data.replace(secret, self._known[secret])
        return data


KEY_SHAPE = re.compile(
    r"(?<![A-Za-z0-9_-])(?:"
    r"(?:sk-|sk_|rk_|ghp_|gho_|ghs_|ghu_|ghr_|github_pat_|xox[abpr]-|glpat-|hf_|npm_)(?P<body>[A-Za-z0-9_-]{16,})"
    r"|(?:AKIA|ASIA)[0-9A-Z]{16}|AIza[0-9A-Za-z_-]{35})"
)
"""Tokens shaped like the providers' keys anywhere in a string (OpenAI/Anthropic ``sk-``,
Stripe ``sk_``/``rk_``, GitHub ``ghp_``..., Slack ``xox?-``, GitLab ``glpat-``, Hugging Face
``hf_``, npm ``npm_``, AWS access key ids, Google API keys): `redact_argv`. A body of
lowercase letters and underscores alone reads as a name (``npm_config_user_agent``) and is
kept."""

_FINGERPRINT = re.compile(r"fp:[0-9a-f]{16}(?:\s+fp:[0-9a-f]{16})*\Z")  # redacted already
_URL_USERINFO = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.-]*://[^/@\s:\"']*:)(?P<secret>[^/@\s\"']+)(?=@)")
_HEADER = re.compile(r"(?<![\w-])(?P<head>(?i:proxy-authorization|authorization|x-api-key|api-key|x-goog-api-key"
                     r"|x-auth-token|x-amz-security-token|cookie)\s*:\s*)(?P<secret>[^\"'\r\n]*[^\"'\s])")
_OPTION_NAME = r"--?[A-Za-z0-9_.-]*(?i:key|token|secret|password|passwd)[A-Za-z0-9_.-]*"
_OPTION = re.compile(rf"(?<![\w-])(?P<head>{_OPTION_NAME}=)(?P<secret>[^\s\"']+)")
_OPTION_SPACED = re.compile(rf"(?<![\w-])(?P<head>{_OPTION_NAME}\s+[\"']?)(?P<secret>[^-\s\"'][^\s\"']*)")
_OPTION_ALONE = re.compile(rf"{_OPTION_NAME}\Z")
_ASSIGNMENT = re.compile(r"(?<![\w$-])(?P<name>[A-Za-z_][A-Za-z0-9_]*)=(?P<secret>[^\s\"';&|)`]+)")
_NAME_LIKE = re.compile(r"[a-z_]+")
_AUTH_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9_-]* +(?=\S)")


def _fingerprinted(value: str, key: bytes) -> str:
    """``value`` as the ledger keeps it: its fingerprint (fingerprints alone stay as they are)."""
    return value if _FINGERPRINT.match(value) else fingerprint_secret(value, key)


def redact_argv(argv: Iterable[str], *, key: bytes, patterns: tuple[str, ...] | list[str] = ()) -> list[str]:
    """A command line as the ledger may keep it: the same elements, secrets in them fingerprinted.

    Each secret is replaced in place by its keyed fingerprint (`fingerprint_secret`, as
    `redact_env` does), so the command keeps its shape (as many elements, the program and
    its options still readable) for the detectors. Recognised, inside any element (a
    ``sh -c`` script included):

    - the password of a URL's userinfo, ``scheme://user:PASSWORD@host`` (RFC 3986 section 3.2.1);
    - the credential of a header line ``Authorization: Bearer CRED`` (the scheme kept, RFC
      9110 section 11.6.2) and the whole value of the other headers of `SECRET_HEADERS`;
    - the value of an option whose name holds ``key``, ``token``, ``secret``, ``password``
      or ``passwd`` (``--api-key=V``, ``--token=V``, ``--password V`` inside a script), and
      the element after such an option standing alone (``["--password", "V"]``);
    - the value of a credential variable assigned (``OPENAI_API_KEY=V``; `is_credential`,
      with ``patterns``);
    - tokens shaped like known keys (`KEY_SHAPE`).

    Idempotent: a fingerprint is never fingerprinted again.

    Args:
        argv: the command line, as exec'd.
        key: the fingerprint key (`derive_fingerprint_key`).
        patterns: extra credential variable names (a scenario's), as `is_credential` takes them.

    Returns:
        A new list of as many strings as ``argv``.
    """
    out = list(argv)
    for i in _hinted(out):
        out[i] = _redact_element(out[i], key, tuple(patterns))
        if _OPTION_ALONE.match(out[i]) and i + 1 < len(out) and out[i + 1] and not out[i + 1].startswith("-"):
            out[i + 1] = _fingerprinted(out[i + 1], key)
    return out


_HINTS = (":", "=", "key", "token", "secret", "passw", "sk-", "sk_", "rk_", "ghp_", "gho_", "ghs_", "ghu_", "ghr_",
          "github_pat_", "xox", "glpat-", "hf_", "npm_", "akia", "asia", "aiza")
"""Lowercase strings that every recogniser of `redact_argv` needs in an element to match."""


def _hinted(argv: list[str]) -> list[int]:
    """Indexes of the elements holding a hint, found with one C-speed ``find`` per hint over
    the whole command line (an ``xargs`` exec has thousands of elements, nearly all paths)."""
    joined = "\0".join(argv).lower()
    starts, at = [], 0
    for arg in argv:
        starts.append(at)
        at += len(arg) + 1
    found: set[int] = set()
    for hint in _HINTS:
        at = joined.find(hint)
        while at >= 0:
            index = bisect.bisect_right(starts, at) - 1
            found.add(index)
            at = joined.find(hint, starts[index] + len(argv[index]) + 1)  # the next element on
    return sorted(found)


_MAX_PASSES = 8


def _redact_element(text: str, key: bytes, patterns: tuple[str, ...]) -> str:
    """`_redact_text` until nothing changes: a fingerprint put next to other text can make a
    new match (``https://sk-...=@`` becomes ``https://fp:...=@``, a userinfo), so the
    element is redacted again until it is stable, which makes `redact_argv` idempotent."""
    for _ in range(_MAX_PASSES):
        redacted = _redact_text(text, key, patterns)
        if redacted == text:
            break
        text = redacted
    return text


def _redact_text(text: str, key: bytes, patterns: tuple[str, ...]) -> str:
    def secret(m: re.Match[str]) -> str:
        return m["head"] + _fingerprinted(m["secret"], key)

    def header(m: re.Match[str]) -> str:
        value = m["secret"]
        scheme = _AUTH_SCHEME.match(value) if "authorization" in m["head"].lower() else None
        cut = scheme.end() if scheme else 0
        return m["head"] + value[:cut] + _fingerprinted(value[cut:], key)

    def assignment(m: re.Match[str]) -> str:
        if not is_credential(m["name"], patterns):
            return m[0]
        return f"{m['name']}={_fingerprinted(m['secret'], key)}"

    def shaped(m: re.Match[str]) -> str:
        return m[0] if m["body"] and _NAME_LIKE.fullmatch(m["body"]) else fingerprint_secret(m[0], key)

    def userinfo(m: re.Match[str]) -> str:  # a fingerprinted user (a token as user name) stays
        return m[0] if _FINGERPRINT.match(m["head"].rpartition("/")[2] + m["secret"]) else secret(m)

    text = _URL_USERINFO.sub(userinfo, text)
    text = _HEADER.sub(header, text)
    text = _OPTION.sub(secret, text)
    text = _OPTION_SPACED.sub(secret, text)
    text = _ASSIGNMENT.sub(assignment, text)
    return KEY_SHAPE.sub(shaped, text)


def redact_exec(argv: Iterable[str], env: Mapping[str, str] | None, *, key: bytes,
                patterns: tuple[str, ...] | list[str] = ()) -> tuple[list[str], dict[str, str] | None]:
    """An exec's command line and environment as the ledger may keep them: `redact_argv`
    and `redact_env` with the same key and patterns. The one call every syscall witness
    makes before it builds a ``process.exec``.

    Returns:
        ``(argv, env)``: as many argv elements as given; env None when ``env`` is None.
    """
    argv = redact_argv(argv, key=key, patterns=patterns)
    return argv, (None if env is None else redact_env(env, key=key, patterns=patterns))
