"""A reasoning teacher behind vLLM's reasoning parser (issue 48): the reasoning arrives apart from
the answer (``reasoning_content``), and SRG's format check reads it as the combined text."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from icml25.llm import Completion
from icml25.safety_reasoning import FormatFilter, Query, ReasoningFormat, synthesize
from icml25.safety_reasoning.toy_teacher import TOY_FORMAT

REASONING = (
    "The request asks for a greeting; the guideline on helpfulness applies. Nothing harmful."
)
ANSWER = "Hello! How can I help you today?"
HELPFUL = Query("Say hello to me.", "helpful", id="q0")


@pytest.mark.parametrize("fmt", [ReasoningFormat(), TOY_FORMAT])
def test_separate_reasoning_parses_as_the_combined_text(fmt):
    combined = fmt.split_output(fmt.format_target(REASONING, ANSWER))
    parsed = fmt.split_output(ANSWER, reasoning=REASONING)
    assert parsed == combined == (REASONING, ANSWER, "ok")
    assert FormatFilter()(HELPFUL, parsed).accept
    # the answer alone (what the client used to keep) fails the format check
    assert not FormatFilter()(HELPFUL, fmt.split_output(ANSWER)).accept
    # a completion carries both
    assert fmt.split_completion(Completion(ANSWER, "stop", reasoning=REASONING)) == combined


def test_separate_reasoning_edge_cases():
    fmt = ReasoningFormat()
    # the reasoning never ended (vLLM then sends content null): truncated, as the raw text was
    p = fmt.split_output("", reasoning="I was thinking and ran out")
    assert p == ("I was thinking and ran out", "", "truncated")
    assert not FormatFilter()(HELPFUL, p).accept
    # no or empty reasoning from the server: the text parses alone (inline tags still work)
    inline = fmt.format_target(REASONING, ANSWER)
    assert fmt.split_output(inline, reasoning=None) == fmt.split_output(inline)
    assert fmt.split_output(inline, reasoning="  ") == fmt.split_output(inline)
    assert fmt.split_completion(Completion(inline)) == (REASONING, ANSWER, "ok")
    # reasoning in both places is malformed, as the combined text is
    assert fmt.split_output(inline, reasoning=REASONING).status == "duplicated"
    with pytest.raises(TypeError, match="reasoning must be a string or None"):
        fmt.split_output(ANSWER, reasoning=3)
    with pytest.raises(TypeError, match="text and reasoning"):
        fmt.split_completion("just a string")


class _ReasoningServer:
    """vLLM with ``--reasoning-parser``: reasoning in ``message.reasoning_content``."""

    def __init__(self) -> None:
        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def do_POST(self):  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                message = {"role": "assistant", "content": ANSWER, "reasoning_content": REASONING}
                choices = [
                    {"index": i, "message": message, "finish_reason": "stop"}
                    for i in range(body.get("n", 1))
                ]
                data = json.dumps({"choices": choices}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._httpd.shutdown()
        self._httpd.server_close()


def test_synthesize_accepts_a_reasoning_teacher_over_http():
    pytest.importorskip("httpx")
    from icml25.llm import OpenAIChat

    with _ReasoningServer() as server, OpenAIChat(server.url, "r1") as teacher:
        report = synthesize(teacher, [HELPFUL], k=2, progress=False)
    assert report.acceptance_rate == 1.0 and not report.per_filter_rejects
    assert report.examples[0].reasoning == REASONING and report.examples[0].answer == ANSWER
