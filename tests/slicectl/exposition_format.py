"""A strict reader of the Prometheus text exposition format, version 0.0.4, for slicectl metrics'
tests: it refuses what the format does not allow (Prometheus's own parser and prometheus_client's
accept more), and returns what it read.

    families, samples = parse(text)
    families: {name: {"type": ..., "help": ...}}
    samples:  {(name, ((label, value), ...)): float}   labels sorted, values unescaped

Raises FormatError saying which line is wrong and why.
"""
import math
import re

METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
# Go's strconv.ParseFloat forms that the format allows: decimal, exponent, NaN, +Inf, -Inf.
VALUE = re.compile(r"[+-]?(?:\d+\.?\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?)|NaN|[+-]Inf")
TYPES = ("counter", "gauge", "histogram", "summary", "untyped")
SUFFIXES = {"histogram": ("_bucket", "_sum", "_count"), "summary": ("_sum", "_count")}


class FormatError(Exception):
    pass


def unescape(text, allowed, where):
    """Resolves the escapes `allowed` (a dict of the character after the backslash to what it
    stands for); any other backslash is an error."""
    out, i = [], 0
    while i < len(text):
        c = text[i]
        if c == "\\":
            if i + 1 >= len(text) or text[i + 1] not in allowed:
                raise FormatError(f"{where}: a backslash that escapes nothing the format knows")
            out.append(allowed[text[i + 1]])
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def parse_labels(text, where):
    """Reads `{a="x",b="y"}` at the start of text; returns (labels dict, rest of the text)."""
    labels, i = {}, 1
    while True:
        if text.startswith("}", i):
            return labels, text[i + 1:]
        m = LABEL_NAME.match(text, i)
        if not m:
            raise FormatError(f"{where}: a label name is expected at {text[i:]!r}")
        name = m.group()
        if name.startswith("__"):
            raise FormatError(f"{where}: label {name} is reserved")
        i = m.end()
        if not text.startswith('="', i):
            raise FormatError(f'{where}: ="..." is expected after label {name}')
        i += 2
        start = i
        while i < len(text) and text[i] != '"':
            if text[i] == "\n":
                raise FormatError(f"{where}: an unescaped line feed in a label value")
            i += 2 if text[i] == "\\" else 1
        if i >= len(text):
            raise FormatError(f"{where}: label {name}'s value is not closed")
        if name in labels:
            raise FormatError(f"{where}: label {name} twice")
        labels[name] = unescape(text[start:i], {"\\": "\\", '"': '"', "n": "\n"}, where)
        i += 1
        if text.startswith(",", i) and not text.startswith(",}", i):
            i += 1
        elif not text.startswith("}", i):
            raise FormatError(f"{where}: ',' or '}}' is expected after label {name}")


def family_of(sample_name, families):
    if sample_name in families:
        return sample_name
    for name, f in families.items():
        for suffix in SUFFIXES.get(f["type"], ()):
            if sample_name == name + suffix:
                return name
    return None


def parse(text):
    if text and not text.endswith("\n"):
        raise FormatError("the last line does not end with a line feed")
    families, samples = {}, {}
    current = None  # the family whose samples come now: each family's lines come together
    done = set()  # families whose samples are over
    for number, line in enumerate(text.split("\n")[:-1] if text else [], 1):
        where = f"line {number} ({line!r})"
        if line.startswith("#"):
            parts = line.split(" ", 3)
            if len(parts) >= 3 and parts[0] == "#" and parts[1] in ("HELP", "TYPE"):
                kind, name = parts[1], parts[2]
                if not METRIC_NAME.fullmatch(name):
                    raise FormatError(f"{where}: {name!r} is not a metric name")
                f = families.setdefault(name, {"type": None, "help": None, "samples": 0})
                if name in done or (current != name and f["samples"]):
                    raise FormatError(f"{where}: {kind} after the family's samples")
                if current is not None and current != name:
                    done.add(current)
                current = name
                if kind == "HELP":
                    if f["help"] is not None:
                        raise FormatError(f"{where}: a second HELP for {name}")
                    f["help"] = unescape(parts[3] if len(parts) > 3 else "", {"\\": "\\", "n": "\n"}, where)
                else:
                    if f["type"] is not None:
                        raise FormatError(f"{where}: a second TYPE for {name}")
                    if len(parts) != 4 or parts[3] not in TYPES:
                        raise FormatError(f"{where}: the type must be one of {TYPES}")
                    f["type"] = parts[3]
            continue  # any other comment is allowed
        if not line.strip():
            continue
        m = METRIC_NAME.match(line)
        if not m:
            raise FormatError(f"{where}: a sample must start with a metric name")
        name, rest = m.group(), line[m.end():]
        labels = {}
        if rest.startswith("{"):
            labels, rest = parse_labels(rest, where)
        fields = rest.split(" ")
        if len(fields) not in (2, 3) or fields[0] != "":
            raise FormatError(f"{where}: one space, the value and an optional timestamp must follow")
        if not VALUE.fullmatch(fields[1]):
            raise FormatError(f"{where}: {fields[1]!r} is not a value")
        if len(fields) == 3 and not re.fullmatch(r"-?\d+", fields[2]):
            raise FormatError(f"{where}: {fields[2]!r} is not a timestamp")
        family = family_of(name, families)
        if family is None or families[family]["type"] is None or families[family]["help"] is None:
            raise FormatError(f"{where}: no # HELP and # TYPE before it for its family")
        if family != current or family in done:
            raise FormatError(f"{where}: not together with the other lines of {family}")
        families[family]["samples"] += 1
        key = (name, tuple(sorted(labels.items())))
        if key in samples:
            raise FormatError(f"{where}: the same series twice")
        samples[key] = float(fields[1]) if fields[1] not in ("+Inf", "-Inf") else math.copysign(math.inf, -1 if fields[1][0] == "-" else 1)
    for name, f in families.items():
        if f["type"] is None or f["help"] is None:
            raise FormatError(f"family {name} lacks its # {'TYPE' if f['type'] is None else 'HELP'} line")
    return ({name: {"type": f["type"], "help": f["help"]} for name, f in families.items()}, samples)
