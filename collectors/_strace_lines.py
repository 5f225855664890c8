"""The line grammar of strace's output, for the options `collectors.strace.strace_argv` sets.

Stateless: one line of text in, one parsed line (or None) out. Every line of
``strace -f -ttt -yy`` written to a file starts with the pid and the wall time in seconds
since the Unix epoch with microseconds, then one of::

    openat(AT_FDCWD</w>, "x", O_RDONLY) = 3</w/x>        a complete call
    openat(AT_FDCWD</w>, "x", O_RDONLY <unfinished ...>    a call another line interrupted
    <... openat resumed>) = 3</w/x>                        ... and its end
    execve("/bin/sh", [...], 0x7ff /* 2 vars */ <pid changed to 17 ...>
    --- SIGCHLD {si_signo=SIGCHLD, ...} ---                a signal delivery
    +++ exited with 3 +++ / +++ killed by SIGKILL (core dumped) +++
    +++ superseded by execve in pid 18 +++

Strings are C-escaped by strace (``\\n``, ``\\t``, ``\\"``, ``\\\\``, ``\\xHH``, octal
``\\NNN``); the bytes they spell are decoded as UTF-8 with ``backslashreplace``, so a byte
that is not UTF-8 reads as the four characters ``\\xff`` (ambiguous with a name that really
holds a backslash, but nothing is lost and the result is always encodable).
"""

from __future__ import annotations

import re
from typing import NamedTuple

__all__ = [
    "Call",
    "Exited",
    "Superseded",
    "SignalDelivery",
    "Result",
    "parse_line",
    "split_call",
    "decode_string",
    "decode_escaped",
    "parse_fd",
    "parse_sockaddr",
    "AT_FDCWD",
]

AT_FDCWD = -100
"""The kernel's value of AT_FDCWD, returned by `parse_fd` for the ``AT_FDCWD`` token."""

_HEAD = re.compile(r"(\d+) +(\d+)\.(\d{1,9}) (.*)\Z", re.S)
_CALL = re.compile(r"([a-z_][a-z0-9_]*)\((.*)\Z", re.S)
_RESUMED = re.compile(r"<\.\.\. ([a-z_][a-z0-9_]*) resumed>(.*)\Z", re.S)
_PID_CHANGED = re.compile(r"(.*?) ?<pid changed to (\d+) \.\.\.>\Z", re.S)
_EXITED = re.compile(r"\+\+\+ exited with (-?\d+) \+\+\+\Z")
_KILLED = re.compile(r"\+\+\+ killed by (SIG[A-Z0-9+-]+|\d+)( \(core dumped\))? \+\+\+\Z")
_SUPERSEDED = re.compile(r"\+\+\+ superseded by execve in pid (\d+) \+\+\+\Z")
_SIGNAL = re.compile(r"--- (SIG[A-Z0-9+-]+|stopped by SIG[A-Z0-9+-]+|\S+) .*---\Z", re.S)
_RESULT = re.compile(r"(\?|0x[0-9a-fA-F]+|-?\d+)(<.*>)?(.*)\Z", re.S)
_ERRNO = re.compile(r" (E[A-Z0-9_]+)(?: \(.*\))?\Z", re.S)
_ERRNO_NUM = re.compile(r" \((errno \d+)\)\Z")
_INJECTED = " (INJECTED)"
_UNFINISHED = " <unfinished ...>"
_SOCKET_NOTE = re.compile(r"[A-Za-z0-9_-]+:\[")
# split_call's states: the characters that can change each (all others are skipped at C speed)
_QUOTED_REST = re.compile(r'[^"\\]*(?:\\.[^"\\]*)*"', re.S)  # after the opening quote
_IN_PATH = re.compile(r"[\\<>]")
_IN_ARGS = re.compile(r'["<()\[\]{},]')
_EQUALS = re.compile(r"\s*=\s*")
_CLOSER = {"(": ")", "[": "]", "{": "}"}


class Call(NamedTuple):
    """A syscall line, or one part of a call split by other lines.

    Attributes:
        pid: the thread id strace printed (a host tid when strace runs on the host).
        wall_ns: the line's time, ns since the Unix epoch (microsecond precision).
        name: the syscall as the kernel spells it (``openat``).
        body: ``state == "complete"``: everything after ``name(`` (``args) = result``);
            ``"unfinished"`` and ``"pid_changed"``: the arguments printed so far;
            ``"resumed"``: the rest after ``resumed>``.
        state: ``complete``, ``unfinished``, ``resumed`` or ``pid_changed``.
        new_pid: for ``pid_changed``, the pid the thread took over by its execve.
    """

    pid: int
    wall_ns: int
    name: str
    body: str
    state: str
    new_pid: int | None = None


class Exited(NamedTuple):
    """``+++ exited with N +++`` (``code``) or ``+++ killed by SIG +++`` (``signal``)."""

    pid: int
    wall_ns: int
    code: int | None
    signal: str | None
    core_dumped: bool = False


class Superseded(NamedTuple):
    """``+++ superseded by execve in pid OLD +++``: thread ``old_pid`` exec'd as ``pid``."""

    pid: int
    wall_ns: int
    old_pid: int


class SignalDelivery(NamedTuple):
    """``--- SIGCHLD {...} ---``: a signal delivered to ``pid`` (or a stop)."""

    pid: int
    wall_ns: int
    signal: str


class Result(NamedTuple):
    """A call's return as strace printed it.

    Attributes:
        value: the return value; None when strace printed ``?`` (no return: the call was
            interrupted, never returned, or its thread died in it).
        errno: ``ENOENT``-style name; ``ERESTARTSYS``-style names for interrupted calls;
            ``"errno N"`` for a number strace could not name; None on success.
        decoration: the ``-yy`` text after a returned fd (``/etc/passwd``), raw.
        injected: strace itself failed the call (``-e inject=...:error=E``: it printed
            ``(INJECTED)``): the call never ran in the kernel.
    """

    value: int | None
    errno: str | None = None
    decoration: str | None = None
    injected: bool = False


Parsed = Call | Exited | Superseded | SignalDelivery


def parse_line(line: str) -> tuple[int | None, Parsed | None]:
    """Parse one line of strace output (without its newline).

    Args:
        line: the line, decoded from bytes with ``backslashreplace``.

    Returns:
        ``(wall_ns, parsed)``: ``wall_ns`` is the line's time (ns since the Unix epoch)
        when its pid-and-time prefix parsed, else None; ``parsed`` is None when the rest
        is not a form this grammar knows. Never raises.
    """
    head = _HEAD.match(line)
    if head is None:
        return None, None
    pid = int(head[1])
    wall_ns = int(head[2]) * 1_000_000_000 + int(head[3].ljust(9, "0"))
    rest = head[4]
    if rest.startswith("+++ "):
        if m := _EXITED.match(rest):
            return wall_ns, Exited(pid, wall_ns, int(m[1]), None)
        if m := _KILLED.match(rest):
            return wall_ns, Exited(pid, wall_ns, None, m[1], bool(m[2]))
        if m := _SUPERSEDED.match(rest):
            return wall_ns, Superseded(pid, wall_ns, int(m[1]))
        return wall_ns, None
    if rest.startswith("--- "):
        m = _SIGNAL.match(rest)
        return wall_ns, (SignalDelivery(pid, wall_ns, m[1]) if m else None)
    if m := _RESUMED.match(rest):
        return wall_ns, Call(pid, wall_ns, m[1], m[2], "resumed")
    m = _CALL.match(rest)
    if m is None:
        return wall_ns, None
    name, body = m[1], m[2]
    if body.endswith(_UNFINISHED):
        return wall_ns, Call(pid, wall_ns, name, body[: -len(_UNFINISHED)].rstrip(" "), "unfinished")
    if body.endswith("...>") and (c := _PID_CHANGED.match(body)):
        return wall_ns, Call(pid, wall_ns, name, c[1], "pid_changed", int(c[2]))
    return wall_ns, Call(pid, wall_ns, name, body, "complete")


def split_call(body: str) -> tuple[list[str], Result] | None:
    """Split ``args) = result`` into top-level argument tokens and the result.

    Quotes, ``()[]{}`` and ``-yy`` decorations (``3</a,b>``, ``<TCP:[1.2.3.4:5->6.7.8.9:80]>``,
    ``</dev/null<char 1:3>>``) nest; a comma inside them does not split.

    Returns:
        ``(args, result)``, or None when the text is not balanced or has no result.
    """
    args: list[str] = []
    stack: list[str] = []
    start = i = 0
    while True:  # jump to the next character that matters where we are (the hot path)
        top = stack[-1] if stack else ""
        m = (_IN_PATH if top == "<" else _IN_ARGS).search(body, i)
        if m is None:
            return None
        i = m.start()
        c = body[i]
        if c == '"' and top != "<":  # a whole string at once, its escapes included
            m = _QUOTED_REST.match(body, i + 1)
            if m is None:
                return None
            i = m.end()
            continue
        if c == "<" and i and body[i - 1].isalnum():
            if _SOCKET_NOTE.match(body, i + 1):  # <TCP:[1.2.3.4:5->6.7.8.9:80]>
                j = body.find("]>", i + 1)
                if j < 0:
                    return None
                i = j + 2
                continue
            stack.append("<")
        elif top == "<":  # a path: strace escapes its own '<', '>' and '\\'
            if c == "\\":
                i += 1
            elif c == ">":
                stack.pop()
        elif c in "([{":
            stack.append(c)
        elif c in ")]}":
            if not stack:
                if c != ")":
                    return None
                if body[start:i].strip() or args:
                    args.append(body[start:i].strip())
                m = _EQUALS.match(body, i + 1)
                if m is None:
                    return None
                result = parse_result(body[m.end():])
                return (args, result) if result is not None else None
            if _CLOSER[stack.pop()] != c:
                return None
        elif c == "," and not stack:
            args.append(body[start:i].strip())
            start = i + 1
        i += 1


def parse_result(text: str) -> Result | None:
    """Parse what follows ``= ``: ``3</x>``, ``-1 ENOENT (...)``, ``? ERESTARTSYS (...)``, ``?``,
    ``-1 EPERM (...) (INJECTED)`` (a call strace failed itself)."""
    m = _RESULT.match(text)
    if m is None:
        return None
    raw, decoration, rest = m[1], m[2], m[3]
    value = None if raw == "?" else int(raw, 16) if raw.startswith("0x") else int(raw)
    errno = None
    injected = rest.endswith(_INJECTED)
    if injected:
        rest = rest[: -len(_INJECTED)]
    if e := _ERRNO.match(rest):
        errno = e[1]
    elif e := _ERRNO_NUM.match(rest):
        errno = e[1]
    return Result(value, errno, decoration[1:-1] if decoration else None, injected)


_SIMPLE = {"n": 10, "t": 9, "r": 13, "v": 11, "f": 12, "a": 7, "b": 8, "e": 27}


def decode_escaped(text: str) -> str:
    """Undo strace's C escapes in ``text`` (no quotes) and decode the bytes as UTF-8.

    Invalid UTF-8 is kept as ``\\xNN`` text (``backslashreplace``).
    """
    if "\\" not in text:
        return text
    out = bytearray()
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c != "\\" or i + 1 == n:
            out += c.encode("utf-8", "backslashreplace")
            i += 1
            continue
        d = text[i + 1]
        if d in "01234567":
            j = i + 1
            while j < n and j < i + 4 and text[j] in "01234567":
                j += 1
            out.append(int(text[i + 1 : j], 8) & 0xFF)
            i = j
        elif d == "x" and re.match(r"[0-9a-fA-F]{2}", text[i + 2 : i + 4]):
            out.append(int(text[i + 2 : i + 4], 16))
            i += 4
        else:
            out.append(_SIMPLE[d]) if d in _SIMPLE else out.extend(d.encode("utf-8", "backslashreplace"))
            i += 2
    return out.decode("utf-8", "backslashreplace")


def decode_string(token: str) -> tuple[str, bool] | None:
    """Decode a quoted strace string token: ``"a\\tb"`` or ``"abc"...`` (cut by ``-s``).

    Returns:
        ``(text, truncated)``, or None when the token is not a quoted string.
    """
    truncated = token.endswith('"...')
    if truncated:
        token = token[:-3]
    if len(token) < 2 or token[0] != '"' or token[-1] != '"':
        return None
    return decode_escaped(token[1:-1]), truncated


def parse_fd(token: str) -> tuple[int | None, str | None]:
    """Parse an fd argument: ``3``, ``3</etc/x>``, ``AT_FDCWD</w>``, ``5<TCP:[...]>``.

    Returns:
        ``(fd, decoration)``: fd is `AT_FDCWD` for ``AT_FDCWD``, None when not an fd;
        decoration is the ``-yy`` text, unescaped, with any trailing device note
        (``<char 1:3>``) removed; None without one.
    """
    m = re.match(r"(-?\d+|AT_FDCWD)(?:<(.*)>)?(?:\(deleted\))?\Z", token, re.S)  # 3</memfd:x>(deleted)
    if m is None:
        return None, None
    fd = AT_FDCWD if m[1] == "AT_FDCWD" else int(m[1])
    return fd, (strip_decoration(m[2]) if m[2] is not None else None)


def strip_decoration(text: str) -> str:
    """Unescape a ``-yy`` path decoration and drop a trailing ``<char 1:3>`` note.

    In a decorated path strace escapes ``<`` and ``>`` (as ``\\74``, ``\\76``), so the first
    bare ``<`` starts a note about the file, never the path.
    """
    i, n = 0, len(text)
    while i < n:
        if text[i] == "\\":
            i += 2
            continue
        if text[i] == "<":
            text = text[:i]
            break
        i += 1
    return decode_escaped(text)


_INET = re.compile(
    r'sin6?_port=htons\((\d+)\).*?(?:inet_addr\("([^"]*)"\)|inet_pton\(AF_INET6?, "([^"]*)")', re.S)
_FAMILY = re.compile(r"\{sa_family=(AF_[A-Z0-9_]+|\d+)")
_SUN_PATH = re.compile(r'sun_path=(@?)("(?:[^"\\]|\\.)*"(?:\.\.\.)?)', re.S)


def parse_sockaddr(token: str) -> tuple[str, str, int | None] | None:
    """Parse a socket address argument: ``{sa_family=AF_INET, sin_port=htons(80), ...}``.

    Returns:
        ``(family, address, port)``: address is the IP text for AF_INET/AF_INET6, the
        ``sun_path`` for AF_UNIX (``@name`` for an abstract socket), else ``""``; port is
        None outside AF_INET/AF_INET6. None when the token is not a decoded address.
    """
    fam = _FAMILY.match(token)
    if fam is None:
        return None
    family = fam[1]
    if family in ("AF_INET", "AF_INET6"):
        m = _INET.search(token)
        if m is None:
            return family, "", None
        return family, m[2] if m[2] is not None else m[3], int(m[1])
    if family == "AF_UNIX":
        m = _SUN_PATH.search(token)
        if m is None:
            return family, "", None
        decoded = decode_string(m[2])
        path = (decoded[0] + ("..." if decoded[1] else "")) if decoded else m[2]
        return family, m[1] + path, None
    return family, "", None
