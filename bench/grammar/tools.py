"""Fifty tool schemas with a valid example each, and the Hermes call text and schema over them."""

from __future__ import annotations

import json
from typing import Any

# ----------------------------------------------------------------------------------------------
# tools: 50 JSON schemas with varied parameters, each with a valid example


def _tool_templates() -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(parameters schema, valid arguments) pairs; tools cycle through them."""
    rich = {
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "what to look for"},
            "limit": {"type": "integer", "minimum": 1, "maximum": 100},
            "order": {"type": "string", "enum": ["asc", "desc", "relevance"]},
            "filters": {
                "type": "object",
                "properties": {
                    "since": {"type": "string"},
                    "tags": {"type": "array", "items": {"type": "string"}},
                    "verified": {"type": "boolean"},
                },
                "required": ["since"],
                "additionalProperties": False,
            },
            "fields": {"type": "array", "items": {"type": "string", "enum": ["id", "title", "body", "score"]}},
        },
        "required": ["query", "limit", "filters"],
        "additionalProperties": False,
    }
    rich_ok = {
        "query": "grammar engines",
        "limit": 10,
        "order": "desc",
        "filters": {"since": "2026-01-01", "tags": ["llm", "json"], "verified": True},
        "fields": ["id", "title"],
    }
    weather = {
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            "days": {"type": "integer"},
        },
        "required": ["city"],
        "additionalProperties": False,
    }
    weather_ok = {"city": "Paris", "unit": "celsius", "days": 3}
    email = {
        "type": "object",
        "properties": {
            "to": {"type": "array", "items": {"type": "string"}},
            "subject": {"type": "string"},
            "body": {"type": "string"},
            "priority": {"type": "integer", "enum": [1, 2, 3]},
            "attachments": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"name": {"type": "string"}, "size": {"type": "integer"}},
                    "required": ["name"],
                    "additionalProperties": False,
                },
            },
        },
        "required": ["to", "subject", "body"],
        "additionalProperties": False,
    }
    email_ok = {"to": ["a@b.c"], "subject": "Hi", "body": "See you at 5.", "attachments": [{"name": "x.pdf", "size": 1200}]}
    money = {
        "type": "object",
        "properties": {
            "amount": {"type": "number"},
            "currency": {"type": "string", "enum": ["EUR", "USD", "GBP", "JPY"]},
            "account": {
                "type": "object",
                "properties": {"iban": {"type": "string"}, "holder": {"type": "string"}},
                "required": ["iban", "holder"],
                "additionalProperties": False,
            },
            "note": {"type": ["string", "null"]},
        },
        "required": ["amount", "currency", "account"],
        "additionalProperties": False,
    }
    money_ok = {"amount": 12.5, "currency": "EUR", "account": {"iban": "FR76", "holder": "Ann"}, "note": None}
    empty = {"type": "object", "properties": {}, "additionalProperties": False}
    empty_ok: dict[str, Any] = {}
    return [(rich, rich_ok), (weather, weather_ok), (email, email_ok), (money, money_ok), (empty, empty_ok)]


def tools(n: int) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    kinds = ["search_documents", "get_weather", "send_email", "transfer_money", "list_items"]
    out = []
    for i in range(n):
        schema, ok = _tool_templates()[i % 5]
        out.append((f"{kinds[i % 5]}_{i}", schema, ok))
    return out


def call_schema(ts: list[tuple[str, dict[str, Any], dict[str, Any]]]) -> dict[str, Any]:
    branches = [
        {
            "type": "object",
            "properties": {"name": {"const": name}, "arguments": schema},
            "required": ["name", "arguments"],
            "additionalProperties": False,
        }
        for name, schema, _ in ts
    ]
    return branches[0] if len(branches) == 1 else {"anyOf": branches}


def call_text(name: str, args: dict[str, Any]) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": args}) + "</tool_call>"
