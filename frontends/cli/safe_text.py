"""Stored text made safe to print on a terminal (P20).

A message in the log can hold anything a person, an imported file, a model or a tool
wrote, escape sequences included: `ESC ] 0 ; title BEL` sets the terminal's title,
`ESC [ 2 J` clears the screen, `ESC ] 8 ; ; url ESC \\` plants a hyperlink. `printable`
keeps the text readable and takes its power away: newlines and tabs stay; every other
C0 control and DEL becomes its visible Unicode picture (ESC is ␛, BEL ␇, DEL ␡), a lone
carriage return (which would overwrite the line) becomes ␍, and the C1 controls
U+0080 … U+009F (8-bit CSI and OSC among them) become U+FFFD (�). A Windows line end
`\\r\\n` is printed as a plain newline.

Every stand-in is one character wide, so a line's length on screen does not change. The
log keeps the exact bytes; only what is printed is changed (`zoom`, `view`, `date`, `ask`'s
reply and tool lines, the terminal chat, and every `everchat: …` line).
"""

from __future__ import annotations

__all__ = ["printable"]

_KEEP = {"\n", "\t"}
_TABLE = {code: 0x2400 + code for code in range(0x20) if chr(code) not in _KEEP}
_TABLE[0x7F] = 0x2421  # ␡
_TABLE.update({code: 0xFFFD for code in range(0x80, 0xA0)})


def printable(text: str) -> str:
    """`text` with its terminal controls replaced by visible stand-ins (see the module)."""
    if "\r\n" in text:
        text = text.replace("\r\n", "\n")
    return text.translate(_TABLE)
