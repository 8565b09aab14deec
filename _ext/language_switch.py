"""Sphinx extension: on every page, a link to the same page in the book's other edition.

The configuration value ``language_switch`` (``_config.yml``, ``sphinx.config``) says where the other
edition is and how its pages are named (:class:`autograder.publish.translated_book.LanguageSwitch`); the
translated build's configuration, written by ``tools/translations.py build``, holds the switch back.
The link is relative (``../../zh_CN/chapters/zh_CN/01_attention/01_attention.html``), so the two
builds can be published side by side, the other edition in the folder ``root`` of this one's root. It
sits in the article's header, before the theme's buttons (``templates/language-switch.html``, styled
by ``static/language-switch.css``), and the page's head names the other edition as its ``alternate``.
"""

from dataclasses import dataclass
from pathlib import Path

from autograder.publish.translated_book import LanguageSwitch

HERE = Path(__file__).parent
TEMPLATE = "language-switch.html"
STYLE = "language-switch.css"


@dataclass(frozen=True)
class SwitchLink:
    """What the template shows: the link's target, its text and the other edition's language."""

    href: str
    label: str
    hreflang: str


def _add_template_and_style(app, config) -> None:
    config.templates_path.append(str(HERE / "templates"))
    config.html_static_path.append(str(HERE / "static"))


def _switch(app) -> LanguageSwitch:
    return LanguageSwitch.from_config(app.config.language_switch, "sphinx.config.language_switch")


def _check_switch(app) -> None:
    """A wrong ``language_switch`` fails the build at its start, with a message that names it."""
    if app.config.language_switch:
        _switch(app)


def _add_link(app, pagename: str, templatename: str, context: dict, doctree) -> None:
    if not app.config.language_switch:
        return
    switch = _switch(app)
    link = SwitchLink(href=switch.href(pagename, app.builder.get_target_uri(switch.counterpart(pagename))),
                      label=switch.label, hreflang=switch.language.replace("_", "-"))
    context["language_switch"] = link
    header = context.get("theme_article_header_end") or []
    if isinstance(header, str):
        header = [item.strip() for item in header.split(",") if item.strip()]
    context["theme_article_header_end"] = [TEMPLATE, *header]
    context["metatags"] = context.get("metatags", "") + (
        f'\n<link rel="alternate" hreflang="{link.hreflang}" href="{link.href}" />')


def setup(app):
    app.add_config_value("language_switch", {}, "html", types=[dict])
    app.connect("config-inited", _add_template_and_style)
    app.add_css_file(STYLE)
    app.connect("builder-inited", _check_switch)
    app.connect("html-page-context", _add_link, priority=400)  # before the theme reads its header's templates
    return {"parallel_read_safe": True, "parallel_write_safe": True}
