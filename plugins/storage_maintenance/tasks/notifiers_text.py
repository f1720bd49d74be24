"""The text/plain part of an alert e-mail, and the e-mail itself (multipart/alternative: text, then HTML).

The text part is made from the HTML body the alert renderers write (:mod:`.notifiers`), so both parts always carry
the same facts and the same fix: headings become underlined lines, each table row a ``Name: value`` line, list
items ``- ...`` lines, a link its text with the address beside it (or the address alone), and the commands of a
fix (``<pre>``) stay one per line, indented, exactly as they are to be typed. Mail clients that show text only
(and filters, pagers, ``mail`` on a terminal) read that part; the others show the HTML.
"""
from __future__ import annotations

import email.utils
import html.parser
from email.message import EmailMessage

_BLOCKS = {"p", "table", "ul", "ol", "pre", "h1", "h2", "h3", "h4", "div"}
_UNDERLINE = {"h1": "=", "h2": "=", "h3": "-", "h4": "-"}


class _TextRenderer(html.parser.HTMLParser):
    """Plain text of the alerts' HTML (the small subset :mod:`.notifiers` writes; see the module docstring)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.lines: list[str] = []
        self.current = ""
        self.pre = 0
        self.heading: str | None = None
        self.href: str | None = None
        self.link_text = ""
        self.cells: list[str] = []

    def _flush(self) -> None:
        text = " ".join(self.current.split())
        if text:
            self.lines.append(text)
        self.current = ""

    def _blank(self) -> None:
        if self.lines and self.lines[-1] != "":
            self.lines.append("")

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _BLOCKS:
            self._flush()
            self._blank()
        if tag in _UNDERLINE:
            self.heading = tag
        elif tag == "pre":
            self.pre += 1
        elif tag == "tr":
            self._flush()
            self.cells = []
        elif tag in ("th", "td"):
            self.current = ""
        elif tag == "li":
            self._flush()
            self.current = "- "
        elif tag == "br":
            self._flush()
        elif tag == "a":
            self.href, self.link_text = dict(attrs).get("href"), ""

    def handle_endtag(self, tag: str) -> None:
        if tag == "pre":
            self.pre -= 1
            self.lines += ["    " + line for line in self.current.strip("\n").split("\n") if line.strip()]
            self.current = ""
            self._blank()
        elif tag in _UNDERLINE:
            title = " ".join(self.current.split())
            self.current = ""
            if title:
                self.lines += [title, _UNDERLINE[tag] * min(len(title), 78)]
            self.heading = None
        elif tag in ("th", "td"):
            self.cells.append(" ".join(self.current.split()))
            self.current = ""
        elif tag == "tr":
            if self.cells:
                self.lines.append(": ".join(self.cells[:1]) + (": " + "  ".join(self.cells[1:])
                                                                 if len(self.cells) > 1 else ""))
            self.cells = []
        elif tag == "li":
            self._flush()
        elif tag == "a":
            text = " ".join(self.link_text.split())
            if self.href and text != self.href:
                self.current += f" <{self.href}>"
            self.href = None
        elif tag in _BLOCKS:
            self._flush()
            self._blank()

    def handle_data(self, data: str) -> None:
        self.current += data
        if self.href is not None:
            self.link_text += data

    def text(self) -> str:
        self._flush()
        while self.lines and self.lines[-1] == "":
            self.lines.pop()
        return "\n".join(self.lines) + "\n"


def html_to_text(body: str) -> str:
    """The plain text of an alert's HTML body (see the module docstring)."""
    renderer = _TextRenderer()
    renderer.feed(body)
    renderer.close()
    return renderer.text()


def alert_message(subject: str, html_body: str, sender: str, to: list[str]) -> EmailMessage:
    """The alert e-mail: multipart/alternative with the text part first and the HTML part last (the part a
    client prefers comes last, RFC 2046 5.1.4)."""
    message = EmailMessage()
    message["Subject"] = subject
    message["From"] = sender
    message["To"] = ", ".join(to)
    message["Date"] = email.utils.formatdate(localtime=True)
    message["Message-ID"] = email.utils.make_msgid(domain=sender.rpartition("@")[2] or None)
    message.set_content(html_to_text(html_body), subtype="plain", charset="utf-8")
    message.add_alternative(html_body, subtype="html", charset="utf-8")
    return message
