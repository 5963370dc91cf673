"""Conformance corpus for the seed_oss family (Seed-OSS: `<seed:tool_call><function=n><parameter=k>v</parameter>
</function></seed:tool_call>`, reasoning in `<seed:think>`, budget notes in `<seed:cot_budget_reflect>`).

Rows are written here from what the peers' parser suites accept (facts, not their code), in
toolserve's tools (formats_fixtures.TOOLS). See corpus_rows.py for the row shape.
"""

from __future__ import annotations

from .corpus_rows import Row

FORMAT_ID = "seed_oss"
VLLM = "vLLM tests/tool_parsers/test_seed_oss_tool_parser.py"
VLLM_R = "vLLM tests/reasoning/test_seedoss_reasoning_parser.py"
LLAMA_CPP = "llama.cpp tests/test-chat.cpp (ByteDance-Seed-OSS)"
OWN = "toolserve's own row"


def call(name: str, **params: str) -> str:
    body = "".join(f"<parameter={k}>{v}</parameter>\n" for k, v in params.items())
    return f"<seed:tool_call>\n<function={name}>\n{body}</function>\n</seed:tool_call>"


BARCELONA = ("get_weather", {"city": "Barcelona, Spain"})
BARCELONA_C = ("get_weather", {"city": "Barcelona, Spain", "unit": "c"})
REFLECT_512 = ("The user's current thinking budget is 512.</seed:cot_budget_reflect>\nLet me analyze the question. "
               "The user wants the weather in Barcelona, Spain.\n<seed:cot_budget_reflect>I have used 131 tokens, and "
               "there are 381 tokens remaining for use.</seed:cot_budget_reflect>\n The unit can be omitted.")
PLANNED = ("\nGot it. The user asked for the weather in Barcelona, Spain. The format is "
           + call("get_weather", city="Barcelona, Spain", unit="c") + ". Let me go with that.")

ROWS = [
    Row("no_call", "This is a test response without any tool calls",
        content="This is a test response without any tool calls", source=VLLM),
    Row("budget_0_call", call("get_weather", city="Barcelona, Spain"), calls=(BARCELONA,), source=VLLM),
    Row("multiple_parameters", call("get_weather", city="Barcelona, Spain", unit="c"), calls=(BARCELONA_C,),
        source=LLAMA_CPP),
    Row("array_parameter", call("record", s="x", a="[1, 2, 3]"), calls=(("record", {"s": "x", "a": [1, 2, 3]}),),
        source=LLAMA_CPP),
    Row("typed_parameters", call("record", s="x", i="42", b="true", o='{"k": 1}'),
        calls=(("record", {"s": "x", "i": 42, "b": True, "o": {"k": 1}}),), source=OWN),
    Row("parameterless", call("get_time"), calls=(("get_time", {}),), source=OWN),
    Row("two_blocks", call("get_weather", city="Barcelona, Spain") + call("get_weather", city="Paris"),
        calls=(BARCELONA, ("get_weather", {"city": "Paris"})), source=OWN),
    Row("reasoning_then_call", "<seed:think>I need the weather in Barcelona</seed:think>"
        + call("get_weather", city="Barcelona, Spain"), reasoning="I need the weather in Barcelona", calls=(BARCELONA,),
        source=LLAMA_CPP),
    # the budget notes are part of the reasoning; vLLM's tool-parser suite (no reasoning parser)
    # returns all of it as content
    Row("budget_512_reflections_then_call", f"<seed:think>{REFLECT_512}</seed:think>\n"
        + call("get_weather", city="Barcelona, Spain"), reasoning=REFLECT_512, calls=(BARCELONA,), source=VLLM),
    Row("budget_0_reflections_then_call", "<seed:think>\n</seed:cot_budget_reflect>\n</seed:cot_budget_reflect>\nThe "
        "current thinking budget is 0, so I will directly start answering the question.\n</seed:think>\n"
        + call("get_weather", city="Barcelona, Spain"),
        reasoning="</seed:cot_budget_reflect>\n</seed:cot_budget_reflect>\nThe current thinking budget is 0, so I will "
                  "directly start answering the question.", calls=(BARCELONA,), source=VLLM),
    # Seed-OSS writes the call syntax out while it plans (unlimited budget): a call is made only
    # after </seed:think>; inside the reasoning it is reasoning text (vLLM, llama.cpp)
    Row("call_spelled_out_in_reasoning", f"<seed:think>{PLANNED}</seed:think>"
        + call("get_weather", city="Barcelona, Spain", unit="c"),
        reasoning=PLANNED.strip(), calls=(BARCELONA_C,), source=VLLM),
    Row("budget_reflection_after_reasoning_is_content", "<seed:think>Token usage: 45/1000\nKeep going.</seed:think>"
        "<seed:cot_budget_reflect>Token usage: 45/1000</seed:cot_budget_reflect>I need to calculate this step by step.",
        reasoning="Token usage: 45/1000\nKeep going.",
        content="<seed:cot_budget_reflect>Token usage: 45/1000</seed:cot_budget_reflect>I need to calculate this step by "
                "step.", source=LLAMA_CPP),
    Row("cut_inside_string_parameter", "<seed:tool_call>\n<function=get_weather>\n<parameter=city>Barcelona",
        calls=(("get_weather", {"city": "Barcelona"}),), source=LLAMA_CPP),
    # a value that is no string is left out when the output ends before its close (llama.cpp
    # streams the partial text)
    Row("cut_inside_array_parameter", "<seed:tool_call>\n<function=record>\n<parameter=s>x</parameter>\n"
        "<parameter=a>[1,\n", calls=(("record", {"s": "x"}),), source=LLAMA_CPP),
    Row("unknown_tool_is_text", call("nope", x="1"), content=call("nope", x="1"), source=OWN),
    Row("eos_dropped", "<seed:think>r</seed:think>answer<seed:eos>", reasoning="r", content="answer", source=OWN),
    # -- reasoning
    Row("think_then_answer", "<seed:think>I'm thinking about the answer</seed:think>Hello, world!",
        reasoning="I'm thinking about the answer", content="Hello, world!", source=LLAMA_CPP),
    Row("think_then_newline_answer", "<seed:think>I'm thinking about the answer</seed:think>\nHello, world!",
        reasoning="I'm thinking about the answer", content="Hello, world!", source=LLAMA_CPP),
    Row("reasoning_unfinished", "<seed:think>I was thinking", reasoning="I was thinking", source=LLAMA_CPP),
    # vLLM's reasoning parser reads output with no <seed:think> as reasoning; toolserve does so when the
    # prompt ended inside <seed:think> (the template opened it), and otherwise reads it as content
    Row("opened_by_template", "This is a reasoning section</seed:think>This is the rest",
        reasoning="This is a reasoning section", content="This is the rest", thinking_open=True, source=VLLM_R),
    Row("opened_by_template_no_close", "This is content", reasoning="This is content", thinking_open=True,
        source=VLLM_R),
    Row("opened_by_template_multiline", "This\nThat</seed:think>This is the rest\nThat", reasoning="This\nThat",
        content="This is the rest\nThat", thinking_open=True, source=VLLM_R),
    Row("opened_by_template_only_close", "This is a reasoning section</seed:think>",
        reasoning="This is a reasoning section", thinking_open=True, source=VLLM_R),
    Row("no_tokens_without_open_prompt_is_content", "This is just content without any reasoning tokens",
        content="This is just content without any reasoning tokens", source=VLLM_R),
]
