"""Helpers shared by the witnesses' trio tasks."""

from __future__ import annotations

import trio

from ledger import Submission

FINAL_SEND_TIMEOUT_S = 1.0
"""How long a cancelled witness may wait to hand its last event (stopped, gap) over."""


async def send_last(send_channel: trio.MemorySendChannel[Submission], item: Submission,
                    timeout_s: float = FINAL_SEND_TIMEOUT_S) -> None:
    """Send a final event even while cancelled: shielded, bounded, receiver may be gone."""
    with trio.move_on_after(timeout_s, shield=True):
        try:
            await send_channel.send(item)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
