"""Responses <-> chat translation, the pure parts (the clients' view is in test_responses.py)."""
from __future__ import annotations

import pytest

from passthru.doors.translate import to_chat, to_response
from passthru.errors import ApiError


def test_items_tools_and_settings_become_a_chat_request():
    chat = to_chat({
        "model": "groq/m",
        "instructions": "Policy.",
        "input": [
            {"role": "developer", "content": "Be exact."},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"},
                                                            {"type": "input_image", "image_url": "https://x/y.png"}]},
            {"role": "assistant", "content": [{"type": "output_text", "text": "Looking."}]},
            {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
            {"type": "function_call", "call_id": "c2", "name": "g", "arguments": "{\"a\":1}"},
            {"type": "reasoning", "id": "rs_1", "summary": []},
            {"type": "function_call_output", "call_id": "c1", "output": "one"},
            {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "two"}]},
        ],
        "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}, "strict": True}],
        "tool_choice": {"type": "function", "name": "f"},
        "reasoning": {"effort": "high"},
        "text": {"format": {"type": "json_schema", "name": "out", "schema": {"type": "object"}, "strict": True}},
        "max_output_tokens": 50,
        "store": True,
        "parallel_tool_calls": False,
    })
    assert chat["messages"] == [
        {"role": "system", "content": "Policy."},
        {"role": "system", "content": "Be exact."},
        {"role": "user", "content": [{"type": "text", "text": "hi"},
                                     {"type": "image_url", "image_url": {"url": "https://x/y.png", "detail": "auto"}}]},
        {"role": "assistant", "content": "Looking.", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}},
            {"id": "c2", "type": "function", "function": {"name": "g", "arguments": "{\"a\":1}"}},
        ]},
        {"role": "tool", "tool_call_id": "c1", "content": "one"},
        {"role": "tool", "tool_call_id": "c2", "content": "two"},
    ]
    assert chat["tools"] == [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}, "strict": True}}]
    assert chat["tool_choice"] == {"type": "function", "function": {"name": "f"}}
    assert (chat["reasoning_effort"], chat["max_tokens"], chat["parallel_tool_calls"]) == ("high", 50, False)
    assert chat["response_format"] == {"type": "json_schema", "json_schema": {"name": "out", "schema": {"type": "object"}, "strict": True}}
    assert "store" not in chat and "stream" not in chat


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"input": "x", "previous_response_id": "resp_1"}, "previous_response_id"),
        ({"input": "x", "tools": [{"type": "web_search"}]}, "tools[0]"),
        ({"input": [{"type": "input_file", "file_id": "f"}]}, "input[0]"),
        ({"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]}, "input[0].content"),
    ],
)
def test_what_chat_cannot_say_is_a_400_naming_the_param(body, param):
    with pytest.raises(ApiError) as refused:
        to_chat({"model": "groq/m", **body})
    assert (refused.value.status, refused.value.param) == (400, param)
    assert "/v1/chat/completions" in refused.value.message


def test_a_cut_reply_is_incomplete_with_its_usage():
    reply = to_response(
        {"created": 5, "choices": [{"message": {"role": "assistant", "content": "par"}, "finish_reason": "length"}],
         "usage": {"prompt_tokens": 9, "completion_tokens": 3, "total_tokens": 12,
                   "prompt_tokens_details": {"cached_tokens": 4}, "completion_tokens_details": {"reasoning_tokens": 1}}},
        {"model": "groq/m", "max_output_tokens": 3},
    )
    assert (reply["status"], reply["incomplete_details"], reply["created_at"], reply["model"]) == (
        "incomplete", {"reason": "max_output_tokens"}, 5, "groq/m"
    )
    assert reply["output"][0]["content"][0]["text"] == "par"
    assert reply["usage"] == {"input_tokens": 9, "input_tokens_details": {"cached_tokens": 4}, "output_tokens": 3,
                              "output_tokens_details": {"reasoning_tokens": 1}, "total_tokens": 12}
