"""Command lines and the shell scripts that hold them (Megatron-LM's ``examples/*.sh``, a ``torchrun`` line, NeMo
``key=value`` overrides) as an ordered list of (option, value) pairs.

Only what a reader can resolve without running the script: comments and line continuations are dropped,
``NAME=value`` assignments (and ``NAME=(...)`` arrays) are substituted where ``$NAME``, ``${NAME}``,
``${NAME:-default}`` or ``${NAME[@]}`` appear, and a value still holding a ``$`` is left as it is (the format
reader reports it as unresolved). Nothing is executed."""

from __future__ import annotations

import re
import shlex

from app.imports.safe import ImportProblem, check_size

__all__ = ["options", "tokens"]

_ASSIGN = re.compile(r"^(?:export\s+)?([A-Za-z_]\w*)=(.*)$")
_OVERRIDE = re.compile(r"(^|\s)[+~]?[A-Za-z_]\w*\.[\w.]+=")  # a NeMo / Hydra override: model.micro_batch_size=1
_VAR = re.compile(r"\$\{([A-Za-z_]\w*)(?:\[@\])?(?::?-([^}]*))?\}|\$([A-Za-z_]\w*)")


def _logical_lines(text: str) -> list[str]:
    out: list[str] = []
    buf = ""
    for raw in text.splitlines():
        line = raw.rstrip()
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        out.append(buf + line)
        buf = ""
    if buf:
        out.append(buf)
    return out


def _strip_comment(line: str) -> str:
    try:
        lexer = shlex.shlex(line, posix=True, punctuation_chars=False)
        lexer.whitespace_split = True
        lexer.commenters = "#"
        return " ".join(shlex.quote(t) if " " in t else t for t in lexer)
    except ValueError:
        return line.split(" #", 1)[0]


def tokens(name: str, text: str) -> list[str]:
    """The words of every command in ``text`` after substituting the script's own variables."""
    check_size(name, text)
    variables: dict[str, str] = {}
    words: list[str] = []
    array: tuple[str, list[str]] | None = None

    def subst(s: str) -> str:
        for _ in range(5):
            new = _VAR.sub(lambda m: variables.get(m.group(1) or m.group(3) or "", m.group(2) if m.group(2)
                                                   is not None else m.group(0)), s)
            if new == s:
                break
            s = new
        return s

    for line in _logical_lines(text):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if array is not None:
            body = _strip_comment(stripped)
            if body.startswith(")") or body.endswith(")"):
                array[1].append(subst(body.rstrip(")").lstrip(")")))
                variables[array[0]] = " ".join(array[1])
                array = None
                continue
            array[1].append(subst(body))
            continue
        m = _ASSIGN.match(stripped)
        if m:
            var, value = m.group(1), m.group(2).strip()
            if value.startswith("(") and not value.rstrip().endswith(")"):
                array = (var, [subst(_strip_comment(value[1:]))])
                continue
            if value.startswith("("):
                value = value[1:-1]
            value = _strip_comment(value)
            try:
                parts = shlex.split(value)
            except ValueError:
                parts = [value]
            variables[var] = subst(" ".join(parts))
            continue
        if stripped.split()[0] in ("if", "fi", "then", "else", "elif", "for", "do", "done", "mkdir", "echo", "cd",
                                   "set", "source", ".", "exit", "while", "case", "esac"):
            continue
        words.append(subst(_strip_comment(stripped)))
    if not any(" --" in f" {w}" or _OVERRIDE.search(w) for w in words):  # only assignments: a sourced config
        words = [v for v in variables.values() if " --" in f" {v}"]
    out: list[str] = []
    for w in words:
        try:
            out += shlex.split(w)
        except ValueError as exc:
            raise ImportProblem(name, "", f"cannot split the command line: {exc}") from None
    final: list[str] = []
    for t in out:  # an array item quoted with its value ("--fp8-format hybrid")
        final += t.split() if t.startswith("--") and " " in t else [t]
    return final


def options(words: list[str]) -> list[tuple[str, str | None]]:
    """``--opt value``, ``--opt=value``, ``--flag`` and ``key=value`` (NeMo / Hydra) as (name, value) pairs; the
    name without leading dashes; other words (the program, the script) as (word, None) with a leading ``@``."""
    out: list[tuple[str, str | None]] = []
    i = 0
    while i < len(words):
        w = words[i]
        if w.startswith("--") and w.endswith(")"):
            pass  # a case pattern (--flag) in the script's own option parsing
        elif w.startswith("--") and len(w) > 2:
            name, eq, value = w[2:].partition("=")
            if eq:
                out.append((name, value))
            elif i + 1 < len(words) and not words[i + 1].startswith("--") and "=" not in words[i + 1] \
                    and not words[i + 1].endswith(".py"):
                out.append((name, words[i + 1]))
                i += 1
            else:
                out.append((name, None))
        elif re.match(r"^[+~]?[A-Za-z_][\w.]*=", w):
            name, _, value = w.lstrip("+~").partition("=")
            out.append((name, value))
        elif not w.endswith(")"):  # a case pattern is not an argument
            out.append(("@" + w, None))
        i += 1
    return out
