"""`caisson study judge DIR`: an LLM judge re-reads every scored cell's stored answer, through
the proxy witness, into its own signed ledger beside the study. An alarm, never a score.

In order (docs/studies.md, "The judge"):

1. The study directory must verify closed (`verify_study`); the judge is resolved from the
   arguments, else from the ``[judge]`` table of the study file the study ledger sealed.
2. Every counting cell is verified and replayed with the current detectors
   (`caisson.replay.replay_records`); each one with a deterministic score gets judged:
   its question and key from the scenario blob the cell recorded with, its answer from its
   ``answer`` blob (else ``stdout``), as replay grades them.
3. A judge ledger ``DIR/judge/<NNN>/`` (signed with the operator key, source ``judge``)
   gets ``judge.started`` (the study ledger's final head: the state judged), then the proxy
   witness (`collectors.proxy.run_proxy_witness`, mitmdump on 127.0.0.1, the endpoint's
   host and port its only allowed ones) records each call: body blobs, ``http.exchange`` and
   ``llm.call`` with the requested and served model. After each call, a ``judge.verdict``
   (`caisson.study.judging` reads the reply) and, when it disagrees with the score, a
   ``judge.alarm`` of kind ``disagreement``.
4. Once the proxy is stopped, one ``judge.alarm`` ``model_substituted`` per (requested,
   served) pair the witness saw differ (`caisson.detectors.model.same_model`), then
   ``judge.ended`` and the final seal. Every alarm is printed as well.
5. The closed judge ledger is announced in a study ledger segment of its own
   (``judge.recorded``, `caisson.study.studyledger.announce`), so that removing it
   afterwards fails `caisson verify DIR`.
"""

from __future__ import annotations

import ipaddress
import os
import ssl
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

import msgspec
import trio

from caisson._signals import run_terminable
from caisson.detectors import same_model
from caisson.errors import UsageError
from caisson.home import fingerprint_key
from caisson.replay import replay_records
from caisson.run import new_run_id
from caisson.scenario import Question, parse_scenario
from caisson.study._dispatch import SCRIPTED_KEY  # also the key a judge on loopback gets when none is set
from caisson.study.judging import (
    API_PATHS,
    PROMPT,
    REQUEST_HEADER,
    Api,
    disagrees,
    judge_prompt,
    parse_verdict,
    reply_text,
    request_body,
)
from caisson.study.studyfile import parse_study
from caisson.study.studyledger import (announce, enrolled_keys, read_study, run_trust, sealed_state, segments,
                                      study_lock)
from caisson.study.verify import JUDGE_DIR, judge_dirs, verify_study
from ledger import BlobStore, LedgerWriter, Record, SigningKey, Submission, locate, verify_and_read
from ledger.events import (
    BlobStored,
    CellEnded,
    HttpExchange,
    JudgeAlarm,
    JudgeEnded,
    JudgeRecorded,
    JudgeStarted,
    JudgeVerdict,
    LlmCall,
    StudyPlanned,
)

__all__ = ["JudgeResult", "JudgeSpec", "SOURCE", "resolve_judge", "run_judge"]

SOURCE = "judge"
_CREDENTIALS = {"anthropic": "ANTHROPIC_API_KEY", "openai": "OPENAI_API_KEY"}
_WITNESS_WAIT_S = 10.0  # how long a verdict waits for the witness's llm.call of its call, seconds


class JudgeSpec(msgspec.Struct, frozen=True, kw_only=True):
    """Which judge to ask: base URL, model, API shape and the variable holding its key."""

    endpoint: str
    model: str
    api: Api
    credential: str


class JudgeResult(msgspec.Struct, frozen=True, kw_only=True):
    """What a judge run wrote (counts as in its ``judge.ended``)."""

    judge_dir: str
    run_id: str
    judged: int = 0
    passed: int = 0
    failed: int = 0
    unparseable: int = 0
    errors: int = 0
    disagreements: int = 0
    served_models: tuple[str, ...] = ()
    substituted: tuple[str, ...] = ()

    @property
    def alarms(self) -> bool:
        """Anything to look at: a disagreement, a substitution, or a reply not read as a verdict."""
        return bool(self.disagreements or self.substituted or self.unparseable or self.errors)


class _Item(msgspec.Struct, frozen=True, kw_only=True):
    cell_id: str
    run_id: str
    question: Question
    score: float
    answer: str
    answer_sha256: str


def _blob(run_dir: Path, records: list[Record], role: str) -> tuple[bytes, str] | None:
    sha = next((r.event.sha256 for r in reversed(records) if isinstance(r.event, BlobStored)
                and r.event.role == role), None)
    if sha is None:
        return None
    _, blobs = locate(run_dir)
    return blobs.get(sha), sha


def _study_blob(study_dir: Path, sha: str) -> bytes | None:
    for seg in segments(study_dir):
        store = BlobStore(seg / "blobs")
        if store.path_for(sha).is_file():
            return store.get(sha)
    return None


def resolve_judge(study_dir: Path, trusted, *, endpoint: str | None = None, model: str | None = None,
                  api: str | None = None, credential: str | None = None) -> JudgeSpec:
    """The judge to ask: the arguments, else the sealed study file's ``[judge]`` table.

    Raises:
        UsageError: only one of endpoint and model given, neither and no ``[judge]`` table,
            an endpoint that is not an http(s) URL, an unknown api.
    """
    if (endpoint is None) != (model is None):
        raise UsageError("give both --endpoint and --model (or neither: the study file's [judge] table)")
    if endpoint is None:
        planned = next((r.event for r in read_study(study_dir, trusted) if isinstance(r.event, StudyPlanned)), None)
        data = _study_blob(study_dir, planned.study_sha256) if planned is not None else None
        table = parse_study(data, f"{study_dir} (sealed study file)").judge if data is not None else None
        if table is None:
            raise UsageError(f"{study_dir}: no judge: give --endpoint URL --model M, or a [judge] table in the"
                             " study file")
        endpoint, model, api, credential = table.endpoint, table.model, api or table.api, credential or table.credential
    url = urlsplit(endpoint)
    if url.scheme not in ("http", "https") or not url.hostname:
        raise UsageError(f"--endpoint {endpoint!r}: expected an http(s) URL, e.g. https://api.anthropic.com")
    api = api or ("openai" if url.hostname == "api.openai.com" else "anthropic")
    if api not in API_PATHS:
        raise UsageError(f"--api {api!r}: expected anthropic or openai")
    return JudgeSpec(endpoint=endpoint, model=model, api=api, credential=credential or _CREDENTIALS[api])


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def _egress(endpoint: str) -> dict[str, object]:
    """The proxy's policy for the judge: the endpoint's host and port its one allow entry;
    a loopback endpoint (a scripted model on this host) named as the upstream rewrite of
    itself, the one way the proxy reaches the host's own addresses."""
    url = urlsplit(endpoint)
    host = url.hostname or ""
    port = url.port or (443 if url.scheme == "https" else 80)
    authority = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return {"allow_hosts": [authority],
            "upstream": {host: f"{url.scheme}://{authority}"} if _loopback(host) else {}}


def _items(study_dir: Path, trusted) -> tuple[StudyPlanned, list[_Item]]:
    """The study's plan and every counting cell with a deterministic score, replayed now."""
    records = read_study(study_dir, trusted)
    planned = next(r.event for r in records if isinstance(r.event, StudyPlanned))
    enrolled = enrolled_keys(planned.host_keys)  # --executor ray: each run is signed by its host's key
    counting = {e.cell_id: e for r in records if isinstance(e := r.event, CellEnded) and e.counting and e.run_id}
    items = []
    for c in planned.cells:
        ended = counting.get(c.cell_id)
        if ended is None:
            continue
        run_dir = study_dir / ended.run_dir
        report, cell_records = verify_and_read(run_dir, run_trust(run_dir, trusted, enrolled))
        replay = replay_records(run_dir, report, cell_records)
        scenario = _blob(run_dir, cell_records, "scenario")
        answer = _blob(run_dir, cell_records, "answer") or _blob(run_dir, cell_records, "stdout")
        if replay.score is None or replay.question_id is None or scenario is None:
            continue  # void, unverified or unscored: nothing to raise an alarm about
        question = parse_scenario(scenario[0], f"{run_dir}:scenario").question(replay.question_id)
        if question is None:
            continue
        text, sha = (answer[0].decode("utf-8", "replace"), answer[1]) if answer else ("", "")
        items.append(_Item(cell_id=c.cell_id, run_id=ended.run_id, question=question, score=replay.score,
                           answer=text, answer_sha256=sha))
    return planned, items


class _Tap:
    """What the proxy witness recorded, seen as it is appended: each judge call's ``llm.call``."""

    def __init__(self) -> None:
        self._last: str | None = None
        self.calls: dict[str, tuple[int, LlmCall]] = {}
        self.seen: dict[str, trio.Event] = {}

    def saw(self, seq: int, event: object) -> None:
        if isinstance(event, HttpExchange):
            self._last = next((v for k, v in event.request_headers if k.lower() == REQUEST_HEADER), None)
        elif isinstance(event, LlmCall) and self._last is not None:
            self.calls[self._last] = (seq, event)
            self.seen.setdefault(self._last, trio.Event()).set()
            self._last = None

    async def wait(self, request_id: str) -> tuple[int, LlmCall] | None:
        with trio.move_on_after(_WITNESS_WAIT_S):
            await self.seen.setdefault(request_id, trio.Event()).wait()
        return self.calls.get(request_id)


async def _write(writer: LedgerWriter, receive: trio.MemoryReceiveChannel[Submission], tap: _Tap) -> None:
    async with receive:
        async for sub in receive:
            tap.saw(writer.append(sub.event, source=sub.source, wall_ns=sub.wall_ns, mono_ns=sub.mono_ns), sub.event)


def _append(writer: LedgerWriter, event) -> int:
    return writer.append(event, source=SOURCE, wall_ns=time.time_ns(), mono_ns=time.monotonic_ns())


def _post(client, url: str, body: bytes, headers: dict[str, str]) -> tuple[int | None, bytes, str | None]:
    import httpx

    try:
        r = client.post(url, content=body, headers=headers)
    except httpx.HTTPError as exc:
        return None, b"", f"{type(exc).__name__}: {exc}"
    return r.status_code, r.content, None


async def _session(writer: LedgerWriter, blobs: BlobStore, items: list[_Item], spec: JudgeSpec, key: bytes,
                   say: Callable[[str], None], timeout_s: float, counts: dict[str, int]) -> _Tap:
    import httpx

    host = urlsplit(spec.endpoint).hostname or ""
    secret = os.environ.get(spec.credential) or (SCRIPTED_KEY if _loopback(host) else None)
    if secret is None:
        raise UsageError(f"the judge's endpoint is {spec.endpoint}, but {spec.credential} is not set")
    headers = ({"x-api-key": secret, "anthropic-version": "2023-06-01"} if spec.api == "anthropic"
               else {"authorization": f"Bearer {secret}"})
    url = spec.endpoint.rstrip("/") + API_PATHS[spec.api]
    tap = _Tap()
    send, receive = trio.open_memory_channel[Submission](1024)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_write, writer, receive, tap)
        with tempfile.TemporaryDirectory(prefix="caisson-judge-") as tmp:
            from collectors.proxy import run_proxy_witness

            proxy_scope = trio.CancelScope()

            async def proxy(task_status=trio.TASK_STATUS_IGNORED) -> None:
                with proxy_scope:
                    await run_proxy_witness(send.clone(), blobs=blobs, fingerprint_key=key, confdir=Path(tmp),
                                            task_status=task_status, **_egress(spec.endpoint))

            try:
                info = await nursery.start(proxy)
            finally:
                send.close()
            context = ssl.create_default_context(cafile=str(info.ca_cert_path))
            with httpx.Client(proxy=f"http://127.0.0.1:{info.port}", verify=context, trust_env=False,
                              timeout=timeout_s) as client:
                for n, item in enumerate(items, 1):
                    await _judge_one(writer, client, tap, item, n, spec, url, headers, say, counts)
            proxy_scope.cancel()
    return tap


async def _judge_one(writer: LedgerWriter, client, tap: _Tap, item: _Item, n: int, spec: JudgeSpec, url: str,
                     headers: dict[str, str], say: Callable[[str], None], counts: dict[str, int]) -> None:
    request_id = f"{n}:{item.cell_id}"
    body = request_body(spec.api, spec.model, judge_prompt(item.question, item.answer))
    status, content, error = await trio.to_thread.run_sync(
        _post, client, url, body, {**headers, "content-type": "application/json", REQUEST_HEADER: request_id})
    witnessed = await tap.wait(request_id)
    if error is None and status != 200:
        error = f"HTTP {status}: {content[:200].decode('utf-8', 'replace')}"
    text = reply_text(spec.api, content) if error is None else None
    if error is None and text is None:
        error = "the reply is not the API's shape"
    verdict, line = parse_verdict(text)
    served = witnessed[1].served_model if witnessed else None
    seq = _append(writer, JudgeVerdict(
        cell_id=item.cell_id, question_id=item.question.id, run_id=item.run_id, request_id=request_id,
        score=item.score, verdict=verdict, reply_line=line, answer_sha256=item.answer_sha256,
        answer_excerpt=item.answer[:300], requested_model=spec.model, served_model=served, error=error))
    counts[verdict] += 1
    where = f"{item.cell_id} ({item.question.id}): score {item.score:.2f}"
    served_note = "" if served is None or same_model(spec.model, served) else f" [served by {served}]"
    if verdict == "error":
        say(f"ERROR        {where}: no verdict: {error}")
    elif verdict == "unparseable":
        say(f"UNPARSEABLE  {where}: the reply's first line is {line!r}, neither PASS nor FAIL{served_note}")
    elif disagrees(verdict, item.score):
        counts["disagreements"] += 1
        message = (f"judge {verdict.upper()}, deterministic score {item.score:.2f}: an alarm about the key or the"
                   " matcher, never a change of score")
        _append(writer, JudgeAlarm(alarm="disagreement", cell_id=item.cell_id, question_id=item.question.id,
                                   message=message, evidence=[seq]))
        say(f"ALARM        {where}: {message}{served_note}")
    else:
        say(f"AGREE        {where}: judge {verdict.upper()}{served_note}")


def run_judge(study_dir: Path, key: SigningKey, spec: JudgeSpec, *, say: Callable[[str], None] = print,
              timeout_s: float = 120.0) -> JudgeResult:
    """Judge every scored cell of a closed study into a new judge ledger (module docstring).

    Args:
        study_dir: the study directory.
        key: the operator's signing key (signs the judge ledger; its public half verifies the study).
        spec: the judge (`resolve_judge`).
        say: where each verdict and alarm line is printed.
        timeout_s: per judge call, seconds.

    Returns:
        The counts the judge ledger's ``judge.ended`` holds.

    Raises:
        UsageError: the study does not verify closed; another process writes it
            (`caisson.study.studyledger.study_lock`); no key for a remote judge.
        collectors.proxy.ProxyStartError: mitmdump did not start.
    """
    study_dir = Path(study_dir)
    with study_lock(study_dir, "judge"):  # one writer of the study at a time (segment numbers)
        return _run_judge(study_dir, key, spec, say=say, timeout_s=timeout_s)


def _run_judge(study_dir: Path, key: SigningKey, spec: JudgeSpec, *, say: Callable[[str], None],
               timeout_s: float) -> JudgeResult:
    verified = verify_study(study_dir, key.verify_key)
    if verified.status != "ok":
        why = "; ".join(verified.problems) or "it is not closed (running or crashed)"
        raise UsageError(f"{study_dir}: the study does not verify ({verified.status}: {why}); nothing is judged")
    planned, items = _items(study_dir, key.verify_key)
    last = sealed_state(segments(study_dir)[-1], key.verify_key)
    existing = judge_dirs(study_dir)
    judge_dir = study_dir / JUDGE_DIR / f"{int(existing[-1].name) + 1 if existing else 0:03d}"
    judge_dir.mkdir(parents=True)
    run_id = f"judge-{new_run_id()}"
    blobs = BlobStore(judge_dir / "blobs")
    counts = dict.fromkeys(("pass", "fail", "unparseable", "error", "disagreements"), 0)
    try:
        with LedgerWriter(judge_dir / "ledger", run_id=run_id, key=key, blobs=blobs) as writer:
            _append(writer, JudgeStarted(study=planned.study, study_run_id=last.run_id or "", study_head=last.head,
                                         endpoint=spec.endpoint, api=spec.api, requested_model=spec.model,
                                         prompt=PROMPT, cells=len(items)))
            say(f"judging {len(items)} scored cells of {planned.study} with {spec.model} at {spec.endpoint}"
                f" ({spec.api}), through the proxy witness, into {judge_dir}")
            tap = run_terminable(_session, writer, blobs, items, spec, fingerprint_key(key), say, timeout_s, counts)
            pairs: dict[tuple[str, str], list[int]] = {}
            for seq, call in tap.calls.values():
                if call.requested_model and call.served_model and not same_model(call.requested_model,
                                                                                  call.served_model):
                    pairs.setdefault((call.requested_model, call.served_model), []).append(seq)
            for (requested, served), seqs in sorted(pairs.items()):
                message = f"asked for {requested}, served by {served} ({len(seqs)} call(s))"
                _append(writer, JudgeAlarm(alarm="model_substituted", message=message, evidence=seqs))
                say(f"SUBSTITUTED  the judge was {message}")
            served_models = sorted({c.served_model for _, c in tap.calls.values() if c.served_model})
            _append(writer, JudgeEnded(judged=len(items), passed=counts["pass"], failed=counts["fail"],
                                       unparseable=counts["unparseable"], errors=counts["error"],
                                       disagreements=counts["disagreements"], served_models=served_models))
    finally:  # closed, even by an error: announced in the study ledger, so its removal is seen
        if (judge_dir / "ledger").is_file() and sealed_state(judge_dir, key.verify_key).status == "ok":
            announce(study_dir, key, judge_dir, JudgeRecorded, run_id=f"study-{new_run_id()}")
    return JudgeResult(judge_dir=str(judge_dir), run_id=run_id, judged=len(items), passed=counts["pass"],
                       failed=counts["fail"], unparseable=counts["unparseable"], errors=counts["error"],
                       disagreements=counts["disagreements"], served_models=tuple(served_models),
                       substituted=tuple(sorted({s for _, s in pairs})))
