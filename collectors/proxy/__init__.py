"""The proxy witness: mitmdump with our addon (`collectors.proxy.addon`, its own process),
its frames turned into ``http.exchange``, ``llm.call`` and blob events (sans-IO), and the
trio task that runs it (`run_proxy_witness`).

The sans-IO layers are imported with the package; the trio task and the client resolver
(procfs, trio) on first access, so a replay that rebuilds calls from kept bodies does not
import trio (`ledger.lazy`)."""

from typing import TYPE_CHECKING

from collectors.proxy._bodies import BodyDecoder
from collectors.proxy._exchange import ClientOwner, ExchangeAssembler, Output
from collectors.proxy._frames import NEED_DATA, Frame, FrameDecoder, FrameError, encode_frame
from collectors.proxy._rederive import rederive_llm_call
from ledger.lazy import lazy_face

if TYPE_CHECKING:
    from collectors.proxy._clients import ClientResolver
    from collectors.proxy._task import (
        ADDON_PATH,
        CA_CERT_FILE,
        ProxyInfo,
        ProxyStartError,
        ensure_ca,
        mitmdump_command,
        run_proxy_witness,
    )

__all__ = [
    "ADDON_PATH",
    "CA_CERT_FILE",
    "NEED_DATA",
    "BodyDecoder",
    "ClientOwner",
    "ClientResolver",
    "ExchangeAssembler",
    "Frame",
    "FrameDecoder",
    "FrameError",
    "Output",
    "ProxyInfo",
    "ProxyStartError",
    "encode_frame",
    "ensure_ca",
    "mitmdump_command",
    "rederive_llm_call",
    "run_proxy_witness",
]

__getattr__, __dir__ = lazy_face(__name__, {
    "_clients": ("ClientResolver",),
    "_task": ("ADDON_PATH", "CA_CERT_FILE", "ProxyInfo", "ProxyStartError", "ensure_ca", "mitmdump_command",
              "run_proxy_witness"),
}, globals())
