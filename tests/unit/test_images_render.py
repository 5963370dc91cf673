"""Images in prompts: templates place them, the engine's reuse points respect them (pure parts)."""

from __future__ import annotations

import re

import pytest

from toolserve.engine.base import MediaSpan, media_key
from toolserve.engine.slots import Turns, boundary, chunk_cuts, position
from toolserve.formats.template import MEDIA_MARKER, ChatTemplate, bundled_template_source

# The shape of Qwen2-VL's template: content parts, an image part written as its placeholder.
QWEN2VL_LIKE = """{%- for m in messages -%}
<|im_start|>{{ m.role }}
{% if m.content is string %}{{ m.content }}{% else %}{% for p in m.content %}{% if p.type == 'image' %}<|vision_start|><|image_pad|><|vision_end|>{% else %}{{ p.text }}{% endif %}{% endfor %}{% endif %}<|im_end|>
{% endfor -%}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif -%}"""

# SmolVLM / Idefics3 style: "<image>" for each image part, "User:" turns
SMOLVLM_LIKE = """<|im_start|>{% for m in messages %}{{ m.role | capitalize }}:{% if m.content is string %} {{ m.content }}{% else %}{% for p in m.content %}{% if p.type == 'image' %}<image>{% else %} {{ p.text }}{% endif %}{% endfor %}{% endif %}<end_of_utterance>
{% endfor %}{% if add_generation_prompt %}Assistant:{% endif %}"""


@pytest.mark.parametrize(("source", "placeholder"), [(QWEN2VL_LIKE, "<|vision_start|><|image_pad|><|vision_end|>"), (SMOLVLM_LIKE, "<image>")])
def test_template_places_images_itself(source: str, placeholder: str) -> None:
    t = ChatTemplate(source)
    assert t.caps.image_placeholder == placeholder
    out = t.render([{"role": "user", "content": f"look{MEDIA_MARKER} and {MEDIA_MARKER}compare"}])
    assert out.count(MEDIA_MARKER) == 2 and placeholder not in out
    # in order, with whatever spacing the template puts around its parts
    assert re.search(rf"look{re.escape(MEDIA_MARKER)}\s+and\s+{re.escape(MEDIA_MARKER)}\s*compare", out)


def test_text_only_conversations_render_as_before() -> None:
    t = ChatTemplate(QWEN2VL_LIKE)
    assert t.render([{"role": "user", "content": "hi"}]) == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


def test_template_without_image_support_keeps_the_marker_inline() -> None:
    t = ChatTemplate(bundled_template_source("chatml"))
    assert t.caps.image_placeholder is None
    out = t.render([{"role": "user", "content": f"what is {MEDIA_MARKER}?"}])
    assert f"what is {MEDIA_MARKER}?" in out


def span(start: int, n_tokens: int, n_pos: int | None = None) -> MediaSpan:
    return MediaSpan(start, n_tokens, n_tokens if n_pos is None else n_pos, media_key("ab" * 32))


@pytest.mark.parametrize(
    ("limit", "media", "expect"),
    [
        (1100, [], 1024),  # whole chunks only
        (511, [], 0),
        (140, [span(100, 50)], 100),  # inside the image: back to its start
        (150, [span(100, 50)], 150),  # right at its end
        (170, [span(100, 50)], 150),  # the image's end beats the chunk before it
        (700, [span(100, 50)], 662),  # after the image, chunks count from its end
        (300, [span(10, 300)], 10),
        (230, [span(10, 100), span(120, 100)], 220),
        (800, [span(10, 100), span(120, 100)], 732),
    ],
)
def test_reuse_boundaries(limit: int, media: list[MediaSpan], expect: int) -> None:
    prompt = [7] * 1200
    for m in media:
        prompt[m.start : m.end] = [m.key] * m.n_tokens
    cuts = chunk_cuts(prompt, Turns(frozenset()), media)
    b = boundary(limit, cuts)
    assert b == expect
    assert b <= limit and not any(m.start < b < m.end for m in media)


def test_positions_with_mrope_images() -> None:
    media = [span(10, 100, 12), span(200, 50, 8)]
    assert position(5, media) == 5
    assert position(110, media) == 22  # 10 text + 12 positions for 100 image tokens
    assert position(250, media) == 250 - 88 - 42


def test_media_key_is_negative_and_stable() -> None:
    assert media_key("f" * 64) < 0 and media_key("0" * 64) == -1
    assert media_key("12345678" + "0" * 56) == media_key("12345678" + "f" * 56)
