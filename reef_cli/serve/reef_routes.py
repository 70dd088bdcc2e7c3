"""reef's own routes on the gateway: `POST /reef/report` (the same rules and refusals as `reef report`),
`GET /reef/releases`, `GET /reef/status`, and `GET /healthz` (the only one without auth)."""

from __future__ import annotations

import asyncio
import json
import time

from ..errors import InvalidInput
from .answers import Response
from .http_server import Request
from .relay import json_response


class ReefRoutes:
    """The Gateway's reef routes (a mixin: they read the gateway's recorder, config and counters)."""

    async def _report(self, request: Request) -> Response:
        try:
            obj = json.loads(await request.read() or b"null")
        except ValueError as exc:
            raise InvalidInput(f"the report body is not valid JSON ({exc})") from None
        if not isinstance(obj, dict):
            raise InvalidInput("a report is a JSON object: {\"score\": 1, \"feedback\": \"...\", \"receipts\": [...]}")
        unknown = sorted(set(obj) - {"score", "feedback", "receipts", "receipt", "id"})
        if unknown:
            raise InvalidInput(f"unknown report field(s): {', '.join(unknown)} (expected score, feedback, receipts, id)")
        receipts = obj.get("receipts")
        if receipts is None and obj.get("receipt") is not None:
            receipts = [obj["receipt"]]
        if not isinstance(receipts, list) or not receipts or not all(isinstance(r, str) for r in receipts):
            raise InvalidInput("a report needs 'receipts': a non-empty list of receipt ids (x-reef-agent-record-id)")
        if "score" not in obj:
            raise InvalidInput("a report needs 'score': a finite number, e.g. 0 (bad) .. 1 (good)")
        feedback = obj.get("feedback")
        if feedback is not None and not isinstance(feedback, (str, dict)):
            raise InvalidInput("'feedback' must be text or a JSON object (keys like lesson, do, dont)")
        record_id = obj.get("id")
        if record_id is not None and not isinstance(record_id, str):
            raise InvalidInput("'id' (the idempotency id) must be a string")
        state = self.recorder.scenario(request.headers.get("x-reef-scenario"))
        from ..reports import report

        shim = _ReportStore(state.store.project, state.store.scenario, state.ledger)
        loop = asyncio.get_running_loop()
        rec = await loop.run_in_executor(self.executor, lambda: report(
            shim, obj["score"], feedback=feedback, receipts=receipts, record_id=record_id))
        return json_response(rec.to_json())

    async def _releases(self, request: Request) -> Response:
        state = self.recorder.scenario(request.headers.get("x-reef-scenario") or request.query.get("scenario"))
        releases = state.store.releases()
        return json_response({"scenario": state.store.scenario, "head": releases[-1].release_id if releases else None,
                               "releases": [r.to_json() for r in releases]})

    async def _status(self, request: Request) -> Response:
        scenarios = {}
        for name, state in sorted(self.recorder.scenarios.items()):
            rel = state.release()
            scenarios[name] = {"release_id": rel.release_id, "content_id": rel.content_id, "step": rel.step,
                               "ledger_failed": state.ledger.sync_failure or state.damaged}
        from .. import __version__

        return json_response({
            "version": __version__, "url": self.url, "upstream": self.upstream.shown(),
            "upstream_api": "sglang" if self.config.upstream_api == "sglang" else self.upstream.api, "inject": self.config.inject,
            "store_content": self.config.store_content, "pass_client_key": self.config.pass_client_key,
            "auth": self.tokens is not None, "default_scenario": self.config.scenario, "scenarios": scenarios,
            "in_flight": max(0, len(self.in_flight) - 1), "recorded": self.recorder.recorded,
            "failed": self.recorder.failed, "uptime_s": round(time.time() - self.started, 3),
            "appends": {"inline": self.recorder.committer.inline, "batches": self.recorder.committer.batches},
            "loop": _loop_name(),
            "low_latency": self.cpu_hold.status() if self.cpu_hold is not None else {"held": False, "why": "not asked"}})

    async def _healthz(self, _request: Request) -> Response:
        failed = self._failed_ledgers()
        if failed:  # nothing more can be recorded until the gateway is restarted: not healthy
            return json_response({"ok": False, "error": failed[0]}, 503)
        return json_response({"ok": True})

    def _failed_ledgers(self) -> list[str]:
        return [f"scenario '{name}': {state.refusal()}; its calls are refused until then"
                for name, state in sorted(self.recorder.scenarios.items()) if state.refusal() is not None]


class _ReportStore:
    """What `reports.report` needs of a store, over the gateway's shared ledger."""

    def __init__(self, project, scenario: str, ledger):
        self.project, self.scenario, self._ledger = project, scenario, ledger

    def ledger(self):
        return self._ledger


def _loop_name() -> str:
    return "uvloop" if type(asyncio.get_running_loop()).__module__.startswith("uvloop") else "asyncio"
