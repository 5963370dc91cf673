"""`detect_format`: marker strings in real template snippets, most specific first, then the architecture."""

from __future__ import annotations

import pytest

from toolserve.errors import InvalidRequest
from toolserve.formats.registry import FORMATS, Detection, detect_format, explain_detection, get_format

QWEN3 = ("{%- if tools %}<|im_start|>system\n# Tools\n<tools>{{ tool | tojson }}</tools>\n"
         "<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>"
         "{%- endif %}<|im_start|>{{ message.role }}<think>\n\n</think>")
QWEN3_CODER = ("<|im_start|>system\n<tools><function><name>{{ tool.name }}</name></function></tools>\n"
               "<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n"
               "</parameter>\n</function>\n</tool_call>")
SMOLLM2 = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
           "'<|im_end|>' + '\n'}}{% endfor %}")
LLAMA31 = ("<|start_header_id|>system<|end_header_id|>\n\nEnvironment: ipython\nTools: brave_search, wolfram_alpha\n"
           "Given the following functions {{ tools }}<|python_tag|>{{ tool_call.function.name }}.call(")
LLAMA32_PYTHONIC = "{{ system }} [func_name1(params_name1=params_value1, params_name2=params_value2...), func_name2(params)]"
GEMMA3 = "{{ bos_token }}{% for message in messages %}<start_of_turn>{{ role }}\n{{ message['content'] | trim }}<end_of_turn>"
MISTRAL_V3 = "[AVAILABLE_TOOLS] {{ tools | tojson }}[/AVAILABLE_TOOLS][TOOL_CALLS] {{ tool_calls | tojson }}"
MISTRAL_V11 = "[AVAILABLE_TOOLS]{{ tools }}[/AVAILABLE_TOOLS][TOOL_CALLS]{{ name }}[ARGS]{{ arguments }}[THINK]"
DEEPSEEK_V3 = ("'<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>' + tool['function']['name'] "
               "+ '\\n' + '```json' + '\\n' + tool['function']['arguments'] + '\\n' + '```' + '<｜tool▁call▁end｜>'")
DEEPSEEK_V31 = ("'<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>' + tool['function']['name'] + '<｜tool▁sep｜>' + "
                "tool['function']['arguments'] + '<｜tool▁call▁end｜>'")
GLM45 = "<tool_call>{{ tc.name }}\n{% for k, v in args %}<arg_key>{{ k }}</arg_key>\n<arg_value>{{ v }}</arg_value>"
KIMI = "<|tool_calls_section_begin|><|tool_call_begin|>{{ id }}<|tool_call_argument_begin|>"
# llama.cpp models/templates/Kimi-K2-Thinking.jinja: <think> history, the same call markers
KIMI_THINKING = ("<|im_assistant|>{{role_name}}<|im_middle|>{%- set rc = message.get('reasoning_content', '') -%}"
                 "<think>{{rc}}</think>{{render_content(message)}}<|tool_calls_section_begin|>{%- for tool_call in "
                 "message['tool_calls'] -%}<|tool_call_begin|>{{ formatted_id }}<|tool_call_argument_begin|>")
MINIMAX = '<minimax:tool_call>\n<invoke name="tool-name-1">'
SEED = "<seed:think></seed:think><seed:tool_call>\n<function=example_function_name>"
GPT_OSS = "<|start|>assistant<|channel|>commentary to=functions.{{ name }} <|constrain|>json<|message|>"
GRANITE = "<|start_of_role|>available_tools<|end_of_role|>{{ tools }}<|tool_call|>"
COMMAND_R = "<|START_THINKING|><|END_THINKING|><|START_ACTION|>[{{ actions }}]<|END_ACTION|>"
FIREFUNCTION = "{{ functions }}{{ ' functools' + tool_calls | tojson }}"
PHI4 = "<|system|>{{ content }}<|tool|>{{ tools }}<|/tool|><|end|>"
LFM2 = "List of tools: <|tool_list_start|>{{ tools }}<|tool_list_end|><|tool_call_start|>"
LLAMA4 = "<|header_start|>assistant<|header_end|><|python_start|>{{ calls }}<|python_end|>"
FUNCTIONGEMMA = "<start_function_declaration>declaration:{{ name }}<end_function_declaration><start_function_call>"
GEMMA4 = '<|tool>declaration:{{ name }}<tool|><|tool_call>call:{{ name }}{ {{ k }}:<|"|>{{ v }}<|"|> }<tool_call|>'
# llama.cpp models/templates/DeepSeek-V3.2.jinja (V3.2 ships an encoding script; GGUFs carry this)
DEEPSEEK_V32 = ('{%- set dsml_token = "｜DSML｜" -%}{%- set thinking_start_token = "<think>" -%}\n'
                '<{{ dsml_token }}function_calls>\n<{{ dsml_token }}invoke name="{{ tool_call.function.name }}">')
# llama.cpp models/templates/deepseek-ai-DeepSeek-V4.jinja
DEEPSEEK_V4 = ("{%- set dsml_token = '｜DSML｜' -%}{{- '\\n\\n<' + dsml_token + 'tool_calls>\\n' -}}"
               "{{- '<' + dsml_token + 'invoke name=\"' + func['name'] + '\">\\n' -}}<tool_result>")
# MiniMax M3: the namespace token as llama.cpp's test-chat template sets it, and the forks' override
# (models/templates/MiniMax-M3.jinja in ik_llama.cpp) that keeps M2's call block with M3's thinking tags
MINIMAX_M3 = ("{%- set ns_token = ']<]minimax[>[' -%}{%- set toolcall_begin_token = ns_token ~ '<tool_call>' -%}"
              "{%- if add_generation_prompt -%}{{- '<mm:think>' -}}{%- endif -%}")
MINIMAX_M3_FORK = ("{%- set toolcall_begin_token   = '<minimax:tool_call>'         -%}\n"
                   "{%- set think_begin_token      = '<mm:think>'                  -%}")
FUNCTION_TAG = "<function={{ tool_call.function.name }}>{{ tool_call.function.arguments }}</function>"
# InternLM 2.5's template is plain ChatML (the architecture decides); lmdeploy's tool-aware one
# writes the action markers
INTERNLM2 = ("{{ bos_token }}{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
             "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}")
INTERNLM2_TOOLS = "{{ content }}<|action_start|><|plugin|>\n{{ tool_call | tojson }}<|action_end|><|im_end|>"
# Jamba's template: `<|bom|>` role `<|eom|>` turns, tools in `<tool_definitions>`, calls in `<tool_calls>`
JAMBA = ("{{- bom_str + handle_role(role) }} <|bom|><|system|> <tool_definitions>{{ tools }}</tool_definitions><|eom|>"
         "<tool_calls>{{ message.tool_calls | tojson }}</tool_calls>")
# Hunyuan A13B's template: turns closed by `<|extra_4|>` / `<|extra_0|>` / `<|eos|>`, calls in `<tool_calls>`
HUNYUAN = ("{% if message['role'] == 'system' %}<|startoftext|>{{ content }}<|extra_4|>{% elif message['role'] == "
           "'user' %}{{ content }}<|extra_0|>{% endif %}<tool_calls>{{ tool_calls | tojson }}</tool_calls><|eos|>")
# xLAM-2 (Llama and Qwen based): the default system prompt names the team; calls are a JSON array
XLAM_LLAMA = ('{%- set system_message = "You are a helpful assistant. You are developed by Salesforce xLAM team." %}'
              "<|start_header_id|>system<|end_header_id|>\n\n{{ system_message }}<|eot_id|>")
XLAM_QWEN = ('<|im_start|>system\nYou are developed by Salesforce xLAM team.<|im_end|>{{ "<tool_call>" }}')
# Apertus: calls between `<|tools_prefix|>` / `<|tools_suffix|>`, thoughts between the inner markers
APERTUS = ("<|assistant_start|>{%- if block.type == 'thoughts' %}<|inner_prefix|>{{ block.text }}<|inner_suffix|>"
           "{%- elif block.type == 'tool_calls' %}<|tools_prefix|>{{ calls | tojson }}<|tools_suffix|>{%- endif %}")
# GigaChat 3 (llama.cpp models/templates/GigaChat3-10B-A1.8B.jinja): roles end in `<|role_sep|>`,
# the call is a `function call` message
GIGACHAT3 = ("{%- set add_tokens = namespace(role_sep=\"<|role_sep|>\\n\", message_sep=\"<|message_sep|>\\n\\n\") -%}"
             "{{- render_role_message({'role': 'function call', 'content': '{\"name\": \"' ~ call['name'] ~ '\"}'}) -}}")

CASES = [
    (QWEN3, None, "hermes"), (QWEN3_CODER, None, "qwen3_coder"), (SMOLLM2, "llama", "hermes"),
    (LLAMA31, "llama", "llama3_json"), (LLAMA32_PYTHONIC, "llama", "pythonic"), (GEMMA3, "gemma3", "gemma3_tool_code"),
    (MISTRAL_V3, "llama", "mistral"), (MISTRAL_V11, "llama", "mistral_v11"), (DEEPSEEK_V3, "deepseek2", "deepseek_v3"),
    (DEEPSEEK_V31, "deepseek2", "deepseek_v31"), (GLM45, "glm4moe", "glm45"), (KIMI, "deepseek2", "kimi_k2"),
    (MINIMAX, None, "minimax_m2"), (SEED, None, "seed_oss"), (GPT_OSS, "gpt-oss", "gpt_oss"), (GRANITE, None, "granite"),
    (COMMAND_R, None, "command_r"), (FIREFUNCTION, None, "firefunction"), (PHI4, "phi3", "phi4_mini"),
    (LFM2, "lfm2", "lfm2"), (LLAMA4, "llama4", "llama4_pythonic"), (FUNCTIONGEMMA, "gemma3", "functiongemma"),
    (GEMMA4, "gemma4", "gemma4"), (FUNCTION_TAG, "llama", "function_tag"),
    (INTERNLM2, "internlm2", "internlm2"), (INTERNLM2_TOOLS, None, "internlm2"), (JAMBA, "jamba", "jamba"),
    (HUNYUAN, "hunyuan-moe", "hunyuan"), (XLAM_LLAMA, "llama", "xlam"), (XLAM_QWEN, "qwen2", "xlam"),
    (APERTUS, "apertus", "apertus"), (GIGACHAT3, "deepseek2", "gigachat3"),
    (KIMI_THINKING, "deepseek2", "kimi_k2"), (MINIMAX_M3, None, "minimax_m3"), (MINIMAX_M3_FORK, None, "minimax_m3"), (DEEPSEEK_V32, "deepseek2", "deepseek_v32"), (DEEPSEEK_V4, "deepseek4", "deepseek_v4"),
]


@pytest.mark.parametrize(("template", "arch", "expected"), CASES, ids=[c[2] + "-" + str(i) for i, c in enumerate(CASES)])
def test_detect_from_template(template: str, arch: str | None, expected: str) -> None:
    assert detect_format(template, arch) == expected


@pytest.mark.parametrize(("arch", "expected"), [
    ("gemma3", "gemma3_tool_code"), ("llama", "llama3_json"), ("qwen3", "hermes"), ("gpt-oss", "gpt_oss"),
    ("unknown-arch", "generic_json"), (None, "generic_json"),
])
def test_architecture_fallback(arch: str | None, expected: str) -> None:
    assert detect_format(None, arch) == expected
    assert detect_format("{{ messages[0].content }}", arch) == expected


def test_every_detected_id_exists() -> None:
    for template, arch, _ in CASES:
        assert detect_format(template, arch) in FORMATS


def test_get_format() -> None:
    assert get_format("hermes").FORMAT_ID == "hermes"
    with pytest.raises(InvalidRequest, match="unknown tool format"):
        get_format("nope")


@pytest.mark.parametrize("fmt_id", sorted(FORMATS))
def test_format_ids_match_registry(fmt_id: str) -> None:
    fmt = FORMATS[fmt_id]
    assert fmt_id == fmt.FORMAT_ID
    assert fmt.TOOL_RESULT_ROLE in ("tool", "user", "ipython")
    assert fmt.REASONING is None or len(fmt.REASONING) == 2


@pytest.mark.parametrize(("template", "arch", "expected"), CASES, ids=[c[2] + "-" + str(i) for i, c in enumerate(CASES)])
def test_explanation_names_the_rule_that_chose(template: str, arch: str | None, expected: str) -> None:
    found = explain_detection(template, arch)
    assert found.format_id == detect_format(template, arch) == expected
    assert found.rule in ("template", "template+architecture")
    assert found.markers and all(m in template for m in found.markers)
    assert all(repr(m) in found.why for m in found.markers)


def test_explanation_of_architecture_and_fallback() -> None:
    assert explain_detection(None, "jamba") == Detection(
        "jamba", "architecture", "no known marker in the chat template; the architecture 'jamba' maps to it")
    found = explain_detection("{{ messages }}", None)
    assert (found.format_id, found.rule, found.markers) == ("generic_json", "fallback", ())
