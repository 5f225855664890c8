"""The run page's reading, without a browser: pages, witness filter, marks, process tree."""

from __future__ import annotations

from pathlib import Path

from caisson.view._run import open_run, page, process_tree
from tests.caisson.view.runs import LEAK_SEQ, leaky_run, tamper


def test_pages_follow_each_other_without_gap_or_overlap(tmp_path: Path, keys):
    run = leaky_run(tmp_path / "run", keys[0], keys[1], filler=450)
    seqs, start = [], 0
    while start is not None:
        rows, start, error = page(run, start=start, limit=200)
        assert error is None
        seqs += [r.seq for r in rows]
    assert seqs == list(range(464))


def test_witness_filter_and_marks(tmp_path: Path, keys):
    run = leaky_run(tmp_path / "run", keys[0], keys[1])
    view = open_run(run, keys[1])
    assert view.status == "ok" and view.excluded == ["/work/sandbox/answers/key.md"]
    assert view.answer == "The answer is 42."
    rows, nxt, _ = page(run, source="proxy", excluded=view.excluded)
    assert [r.kind for r in rows] == ["http.exchange", "llm.call"] and nxt is None
    assert "requested claude-x, served claude-x-1" in rows[1].summary
    assert '"input_tokens":12' in rows[1].summary  # usage as sent
    rows, _, _ = page(run, excluded=view.excluded)
    marks = {r.seq: r.mark for r in rows if r.mark}
    assert marks == {LEAK_SEQ: "excluded", 9: "refused"}


def test_process_tree_nests_children_under_parents(tmp_path: Path, keys):
    run = leaky_run(tmp_path / "run", keys[0], keys[1])
    tree, error = process_tree(run)
    assert error is None
    assert [(depth, row.summary.split(" exec ")[1]) for depth, row in tree] == [
        (0, "/bin/sh sh -c cat answers/key.md"), (1, "/bin/cat cat answers/key.md")]


def test_a_tampered_ledger_stops_the_page_with_the_reason(tmp_path: Path, keys):
    run = leaky_run(tmp_path / "run", keys[0], keys[1], filler=50)
    tamper(run)
    view = open_run(run, keys[1])
    assert view.status == "tampered"
    rows, nxt, error = page(run)
    assert rows == [] and nxt is None and "checksum" in error


def test_a_flow_line_shows_each_direction_when_counted():
    from caisson.view._run import summarize
    from ledger import Record
    from ledger.events import NetFlow

    def line(flow: NetFlow) -> str:
        return summarize(Record(seq=1, wall_ns=0, mono_ns=0, source="pcap", event=flow), [])[0]

    old = NetFlow(proto="udp", src="10.0.0.2", sport=4000, dst="1.1.1.1", dport=53, packets=2, bytes=130)
    assert line(old) == "udp 10.0.0.2:4000 -> 1.1.1.1:53 2 packets 130 B"
    counted = NetFlow(proto="udp", src="10.0.0.2", sport=4000, dst="1.1.1.1", dport=53, packets=2, bytes=130,
                      initiator_packets=1, initiator_bytes=57, responder_packets=1, responder_bytes=73)
    assert line(counted) == "udp 10.0.0.2:4000 -> 1.1.1.1:53 2 packets 130 B: 1 packets 57 B out, 1 packets 73 B back"


def test_a_tunnel_line_says_where_what_it_carried_and_why_it_was_refused():
    from caisson.view._run import summarize
    from ledger import Record
    from ledger.events import ProxyTunnel

    def line(tunnel: ProxyTunnel) -> tuple[str, str]:
        return summarize(Record(seq=1, wall_ns=0, mono_ns=0, source="proxy", event=tunnel), [])

    refused = ProxyTunnel(via="connect", host="127.0.0.1", port=8765, denied="caisson egress policy: host 127.0.0.1"
                          " is not in the allow list")
    assert line(refused) == ("CONNECT 127.0.0.1:8765, 0 exchanges, 0 B out, 0 B back unread denied by caisson egress"
                             " policy: host 127.0.0.1 is not in the allow list", "denied")
    relayed = ProxyTunnel(via="connect", host="127.0.0.1", port=8765, protocol="tcp", client_bytes=22, server_bytes=31)
    assert line(relayed) == ("CONNECT 127.0.0.1:8765 carrying tcp, 0 exchanges, 22 B out, 31 B back unread", "")
