"""VirtualHome's text commands (HIPIF Fig. 9's action list): parsed into simulator actions, and gold program lines
parsed for the expert. Pure string work, no simulator."""

from __future__ import annotations

import re

_ONE_ARG: dict[str, str] = {  # text verb -> simulator action (longest verbs are matched first)
    "walk to": "WALK",
    "run to": "RUN",
    "find": "FIND",
    "grab": "GRAB",
    "open": "OPEN",
    "close": "CLOSE",
    "switch on": "SWITCHON",
    "switch off": "SWITCHOFF",
    "drink": "DRINK",
    "sit on": "SIT",
    "lie on": "LIE",
    "look at": "LOOKAT",
    "watch": "WATCH",
    "wipe": "WIPE",
    "type on": "TYPE",
    "take off": "PUTOFF",
    "put on": "PUTON",
    "put back": "PUTOBJBACK",
    "wash": "WASH",
    "rinse": "RINSE",
    "scrub": "SCRUB",
    "cut": "CUT",
    "eat": "EAT",
    "plug in": "PLUGIN",
    "plug out": "PLUGOUT",
    "turn to": "TURNTO",
    "touch": "TOUCH",
    "read": "READ",
    "point at": "POINTAT",
    "push": "PUSH",
    "pull": "PULL",
    "move": "MOVE",
    "squeeze": "SQUEEZE",
    "drop": "DROP",
    "release": "RELEASE",
    "greet": "GREET",
}
_NO_ARG = {"stand up": "STANDUP", "sleep": "SLEEP", "wake up": "WAKEUP"}
_TWO_ARG = [  # (pattern, simulator action); "put X on Y" is checked after the one-argument "put on X"
    (re.compile(r"^put (.+) on (.+)$"), "PUTBACK"),
    (re.compile(r"^put (.+) (?:in|into|inside) (.+)$"), "PUTIN"),
    (re.compile(r"^pour (.+) (?:into|in) (.+)$"), "POUR"),
]
TEXT_OF = {sim: verb for verb, sim in _ONE_ARG.items()} | {sim: verb for verb, sim in _NO_ARG.items()}
TEXT_OF |= {"LOOKAT_SHORT": "look at", "LOOKAT_LONG": "look at", "LOOKAT_MEDIUM": "look at"}
TWO_TEXT = {"PUTBACK": "put {} on {}", "PUTIN": "put {} in {}", "POUR": "pour {} into {}"}
NAV = {"WALK", "RUN", "FIND"}
_OBJECT = re.compile(r"^(?:the )?(.+?)(?:\s*\((\d+)\)|\.(\d+))?$")
_GOLD_LINE = re.compile(r"^\[(\w+)\]((?:\s*<[^>]+>\s*\([\d.]+\))*)")
_GOLD_ARG = re.compile(r"<([^>]+)>\s*\(([\d.]+)\)")


def parse_command(command: str) -> tuple[str, list[tuple[str, int | None]]] | None:
    """``put soap on washing machine`` -> ("PUTBACK", [("soap", None), ("washing_machine", None)])."""
    if command in _NO_ARG:
        return _NO_ARG[command], []
    for verb in sorted(_ONE_ARG, key=len, reverse=True):
        if command.startswith(verb + " ") and (verb != "put on" or " on " not in command[len(verb) :]):
            obj = _parse_object(command[len(verb) + 1 :])
            return (_ONE_ARG[verb], [obj]) if obj else None
    for pattern, act in _TWO_ARG:
        m = pattern.match(command)
        if m:
            a, b = _parse_object(m.group(1)), _parse_object(m.group(2))
            return (act, [a, b]) if a and b else None
    return None


def _parse_object(text: str) -> tuple[str, int | None] | None:
    m = _OBJECT.match(text.strip())
    if not m or not m.group(1).strip():
        return None
    node_id = m.group(2) or m.group(3)
    return m.group(1).strip().replace(" ", "_"), int(node_id) if node_id else None


def parse_gold(line: str) -> tuple[str, list[tuple[str, int]]] | None:
    """``[PUTBACK] <soap> (1.1002) <washing_machine> (1.1001)`` -> ("PUTBACK", [("soap", 1002), ...])."""
    m = _GOLD_LINE.match(line.strip())
    if not m:
        return None
    args = [(name, int(ident.split(".")[-1])) for name, ident in _GOLD_ARG.findall(m.group(2))]
    return m.group(1), args
