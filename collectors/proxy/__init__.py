"""The proxy witness: mitmdump with our addon (`collectors.proxy.addon`, its own process),
its frames turned into ``http.exchange``, ``llm.call`` and blob events (sans-IO), and the
trio task that runs it (`run_proxy_witness`)."""

from collectors.proxy._clients import ClientResolver
from collectors.proxy._exchange import ClientOwner
from collectors.proxy._rederive import rederive_llm_call
from collectors.proxy._task import (
    ADDON_PATH,
    CA_CERT_FILE,
    NEED_DATA,
    BodyDecoder,
    ExchangeAssembler,
    Frame,
    FrameDecoder,
    FrameError,
    Output,
    ProxyInfo,
    ProxyStartError,
    encode_frame,
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
