"""Tool discovery: every tool a session showed, so an arm's deny list names them all.

The tools an agent reports about itself (``agent.tools``) and the tools its model requests
offer (the ``tools`` of each LLM request body the proxy kept) are unioned with the
adapter's static list into the deny list (`caisson.run.plan.RecordOptions.discovered_tools`):
a tool that appears upstream is denied without an adapter change. Pure.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

from ledger import Record
from ledger.events import AgentTools, BlobStored

__all__ = ["discovered_tools", "request_tools"]


def request_tools(body: bytes) -> list[str]:
    """The tool names an LLM request body offers the model (sans-IO, never raises).

    Anthropic Messages (``tools[].name``), OpenAI Chat Completions
    (``tools[].function.name``) and Responses (``tools[].name``, or ``type`` for a built-in
    tool such as ``web_search``). A body that is not JSON, or has no tools, gives [].
    """
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError, UnicodeDecodeError):
        return []
    tools = doc.get("tools") if isinstance(doc, dict) else None
    names = []
    for tool in tools if isinstance(tools, list) else []:
        if not isinstance(tool, dict):
            continue
        function = tool.get("function")
        name = tool.get("name") or (function.get("name") if isinstance(function, dict) else None) or tool.get("type")
        if isinstance(name, str) and name:
            names.append(name)
    return names


def discovered_tools(records: Sequence[Record], blob: Callable[[str], bytes | None]) -> list[str]:
    """Every tool a session showed: the agent's own reports (``agent.tools``) and the tools
    offered by each request whose body the proxy kept (``http.request_body`` blobs: the
    chamber reaches only the allowed model hosts). Sorted, no duplicates.

    Args:
        records: one run's records.
        blob: reads a blob by sha256 (None when missing).
    """
    found: set[str] = set()
    for record in records:
        event = record.event
        if isinstance(event, AgentTools):
            found.update(event.tools)
        elif isinstance(event, BlobStored) and event.role == "http.request_body":
            data = blob(event.sha256)
            if data is not None:
                found.update(request_tools(data))
    return sorted(found)
