"""Chat templates: the bundled models' templates render hand-checked prompts; the sandbox holds."""

from __future__ import annotations

import pytest

from toolserve.errors import BrokenTemplate, TemplateError
from toolserve.formats.template import ChatTemplate, bundled_template_source, choose_template
from toolserve.models.files import bundled_model

CONVERSATION = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Hi"},
    {"role": "assistant", "content": "Hello."},
    {"role": "user", "content": "Bye"},
]


@pytest.fixture(scope="module")
def smollm2_template() -> ChatTemplate:
    from llama_cpp import Llama

    llm = Llama(str(bundled_model()), vocab_only=True, verbose=False)
    source, label = choose_template(llm.metadata.get("tokenizer.chat_template"), "llama")
    assert label == "gguf"
    return ChatTemplate(source, bos_token="<|im_start|>", eos_token="<|im_end|>")


def test_smollm2_system_user_assistant(smollm2_template: ChatTemplate) -> None:
    assert smollm2_template.render(CONVERSATION) == (
        "<|im_start|>system\nYou are terse.<|im_end|>\n"
        "<|im_start|>user\nHi<|im_end|>\n"
        "<|im_start|>assistant\nHello.<|im_end|>\n"
        "<|im_start|>user\nBye<|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def test_smollm2_default_system_prompt(smollm2_template: ChatTemplate) -> None:
    assert smollm2_template.render([{"role": "user", "content": "Hi"}], add_generation_prompt=False) == (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
        "<|im_start|>user\nHi<|im_end|>\n"
    )


def gemma() -> ChatTemplate:
    source, label = choose_template(None, "gemma3")
    assert label == "bundled:gemma3"
    return ChatTemplate(source, bos_token="<bos>", eos_token="<eos>")


def test_gemma3_folds_system_into_first_user_turn() -> None:
    assert gemma().render(CONVERSATION) == (
        "<bos><start_of_turn>user\nYou are terse.\n\nHi<end_of_turn>\n"
        "<start_of_turn>model\nHello.<end_of_turn>\n"
        "<start_of_turn>user\nBye<end_of_turn>\n"
        "<start_of_turn>model\n"
    )


def test_gemma3_merges_consecutive_user_turns() -> None:
    t = gemma()
    assert t.caps.strict_alternation
    out = t.render([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}], add_generation_prompt=False)
    assert out == "<bos><start_of_turn>user\na\n\nb<end_of_turn>\n"


def test_developer_turns_are_the_system_turn_where_the_template_has_no_developer() -> None:
    """Codex CLI sends its instructions as `developer` (OpenAI: the system turn); Gemma 3's
    template raises on any role it does not know, so they fold in as a system message would."""
    t = gemma()
    assert not t.caps.supports_developer
    out = t.render([{"role": "system", "content": "S"}, {"role": "developer", "content": "D"}, {"role": "user", "content": "Hi"}])
    assert out == "<bos><start_of_turn>user\nS\n\nD\n\nHi<end_of_turn>\n<start_of_turn>model\n"
    knows = ChatTemplate("{% for m in messages %}[{{ m['role'] }}]{{ m['content'] }}{% endfor %}")
    assert knows.caps.supports_developer
    assert knows.render([{"role": "developer", "content": "D"}, {"role": "user", "content": "u"}]) == "[developer]D[user]u"


def test_unknown_architecture_falls_back_to_chatml() -> None:
    source, label = choose_template(None, "mamba")
    assert label == "bundled:chatml"
    assert ChatTemplate(source).render([{"role": "user", "content": "Hi"}]) == (
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    )


def test_template_without_system_role_gets_it_folded() -> None:
    src = (
        "{% for m in messages %}{% if m['role'] == 'system' %}{{ raise_exception('no system') }}{% endif %}"
        "[{{ m['role'] }}]{{ m['content'] }}{% endfor %}"
    )
    t = ChatTemplate(src)
    assert not t.caps.supports_system
    assert t.render(CONVERSATION[:2]) == "[user]You are terse.\n\nHi"


def test_helpers_and_kwargs() -> None:
    src = "{{ {'city': 'Zürich'} | tojson }}|{{ strftime_now('%Y') | length }}|{{ enable_thinking }}|{{ bos_token }}"
    t = ChatTemplate(src, bos_token="<s>")
    assert t.render([{"role": "user", "content": "x"}], extra={"enable_thinking": False}) == '{"city": "Zürich"}|4|False|<s>'


def test_raise_exception_is_a_client_error() -> None:
    t = ChatTemplate("{% if messages[-1]['role'] != 'user' %}{{ raise_exception('last must be user') }}{% endif %}ok")
    with pytest.raises(TemplateError, match="last must be user") as exc:
        t.render([{"role": "assistant", "content": "x"}])
    assert exc.value.status == 400


@pytest.mark.parametrize(
    "src",
    [
        "{{ ''.__class__.__mro__[1].__subclasses__() }}",
        "{{ messages.__class__.__init__.__globals__ }}",
        "{{ cycler.__init__.__globals__.os.popen('id').read() }}",
    ],
)
def test_sandbox_refuses_python_internals(src: str) -> None:
    t = ChatTemplate(src)
    with pytest.raises(BrokenTemplate) as exc:
        t.render([{"role": "user", "content": "x"}])
    assert exc.value.status == 500


def test_mutation_is_refused() -> None:
    t = ChatTemplate("{% set x = messages.append(1) %}{{ messages | length }}")
    with pytest.raises(BrokenTemplate):
        t.render([{"role": "user", "content": "x"}])


def test_syntax_error_is_broken_template() -> None:
    with pytest.raises(BrokenTemplate, match="does not compile"):
        ChatTemplate("{% for m in messages %}")


def test_bundled_templates_exist() -> None:
    for name in ("gemma3", "chatml"):
        assert "messages" in bundled_template_source(name)
