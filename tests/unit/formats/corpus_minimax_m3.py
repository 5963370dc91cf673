"""Conformance corpus for the minimax_m3 family (MiniMax M3: the `]<]minimax[>[` namespace token
before every tag, parameters as elements named after them, `<mm:think>` reasoning).

See corpus_rows.py for the row shape.
"""

from __future__ import annotations

from .corpus_rows import Row

FORMAT_ID = "minimax_m3"
VLLM = "vLLM tests/tool_parsers/test_minimax_m3_tool_parser.py"
VLLM_R = "vLLM tests/reasoning/test_minimax_m3_reasoning_parser.py"
LLAMA_CPP = "llama.cpp tests (MiniMax M3 template: ns_token before each tag, <mm:think> generation prompt)"
FORK_TEMPLATE = "ik_llama.cpp models/templates/MiniMax-M3.jinja (M2's call block, M3's thinking tags)"
OWN = "toolserve's own row"

NS = "]<]minimax[>["


def el(name: str, inner: str) -> str:
    return f"{NS}<{name}>{inner}{NS}</{name}>"


def invoke(name: str, *params: str) -> str:
    return f'{NS}<invoke name="{name}">' + "".join(params) + f"{NS}</invoke>"


def block(*invokes: str) -> str:
    return f"{NS}<tool_call>\n" + "\n".join(invokes) + f"\n{NS}</tool_call>"


PARIS = ("get_weather", {"city": "Paris"})
TIME = ("get_time", {})
W_PARIS = invoke("get_weather", el("city", "Paris"))
# vLLM's nested order, in toolserve's `record` tool: scalars typed by the schema, an object as
# nested elements, an array as <item> elements, a name written twice as a list (vLLM's schema
# types zip as an integer; here the schema does not type it, and 018956 is no JSON number: text)
NESTED = invoke("record", el("i", "42"), el("b", "true"), el("s", "Please leave at front desk."),
                el("o", el("city", "Singapore") + el("zip", "018956")),
                el("a", el("item", el("sku", "book-001") + el("qty", "2")) + el("item", el("sku", "pen-007") + el("qty", "5"))))
NESTED_CALL = ("record", {"i": 42, "b": True, "s": "Please leave at front desk.",
                          "o": {"city": "Singapore", "zip": "018956"},
                          "a": [{"sku": "book-001", "qty": 2}, {"sku": "pen-007", "qty": 5}]})

ROWS = [
    Row("no_call", "plain response", content="plain response", source=VLLM),
    Row("text_then_nested_call", "I will create it.\n" + block(NESTED), content="I will create it.", calls=(NESTED_CALL,),
        source=VLLM),
    Row("two_invokes", block(invoke("record", el("s", "a"), el("i", "1")), invoke("record", el("s", "b"), el("i", "2"))),
        calls=(("record", {"s": "a", "i": 1}), ("record", {"s": "b", "i": 2})), source=VLLM),
    Row("repeated_name_is_a_list", block(invoke("record", el("s", "x"), el("o", el("tag", "a") + el("tag", "b")))),
        calls=(("record", {"s": "x", "o": {"tag": ["a", "b"]}}),), source=VLLM),
    Row("no_parameters", block(invoke("get_time")), calls=(TIME,), source=LLAMA_CPP),
    Row("string_kept_as_written", block(invoke("get_weather", el("city", "São Paulo <3 \"q\"\nline2"))),
        calls=(("get_weather", {"city": 'São Paulo <3 "q"\nline2'}),), source=OWN),
    Row("untyped_scalar_read_as_json", block(invoke("get_weather", el("city", "Paris"), el("days", "3"))),
        calls=(("get_weather", {"city": "Paris", "days": 3}),), source=VLLM),
    Row("text_after_block", block(W_PARIS) + "\nOn it.", content="On it.", calls=(PARIS,), source=OWN),
    Row("end_of_turn_dropped", block(W_PARIS) + "[e~[", calls=(PARIS,), source=LLAMA_CPP),
    Row("partial_opener_at_end_is_text", f"plain {NS}<tool_ca", content=f"plain {NS}<tool_ca", source=VLLM),
    Row("unknown_tool_is_text", block(invoke("nope", el("x", "1"))), content=block(invoke("nope", el("x", "1"))),
        source=OWN),
    # vLLM returns a second invoke cut by the end of the output as content; the call had started
    # (its name was read), so toolserve keeps it, with the parameters that closed (none here)
    Row("cut_second_invoke", f"plain {NS}<tool_call>\n" + invoke("record", el("i", "1")) + f'\n{NS}<invoke name="record">'
        f"{NS}<i>2", content="plain", calls=(("record", {"i": 1}), ("record", {})), source=VLLM),
    Row("cut_after_a_parameter", f"{NS}<tool_call>\n" + f'{NS}<invoke name="get_weather">' + el("city", "Paris")
        + f"{NS}<unit>c", calls=(PARIS,), source=OWN),
    # a close tag where an element should open: vLLM emits the text after its opener; toolserve
    # has no call to keep and returns the block as text
    Row("close_tag_first_is_text", f"{NS}<tool_call>\n{NS}</user_id> after error",
        content=f"{NS}<tool_call>\n{NS}</user_id> after error", source=VLLM),
    # reasoning: the template opens <mm:think> at the end of the prompt
    Row("reasoning_opened_by_template", "plan</mm:think>answer", reasoning="plan", content="answer",
        thinking_open=True, source=VLLM_R),
    Row("explicit_reasoning_block", "<mm:think>plan</mm:think>answer", reasoning="plan", content="answer", source=VLLM_R),
    Row("leading_close_dropped", "</mm:think>answer", content="answer", source=VLLM_R),
    Row("open_reasoning_block", "<mm:think>still thinking", reasoning="still thinking", source=VLLM_R),
    Row("reasoning_then_call", "Need the weather.\n</mm:think>\n\n" + block(W_PARIS), reasoning="Need the weather.",
        calls=(PARIS,), thinking_open=True, source=LLAMA_CPP),
    Row("call_inside_open_reasoning", "Need the weather. " + block(W_PARIS), reasoning="Need the weather.",
        calls=(PARIS,), thinking_open=True, source=OWN),
    # the forks' template asks for M2's block: read with M2's parameter syntax
    Row("m2_block_from_fork_template", "ok</mm:think>\n<minimax:tool_call>\n<invoke name=\"get_weather\">\n"
        '<parameter name="city">Paris</parameter>\n</invoke>\n</minimax:tool_call>', reasoning="ok", calls=(PARIS,),
        thinking_open=True, source=FORK_TEMPLATE),
]
