"""An instant model server on 127.0.0.1 that speaks the real Ollama and OpenAI wire
protocols (chat and embeddings) and answers every task at once.

It is what `memory-pipelines bench cost` points the pipeline at: a run against it makes
exactly the model calls a real model would get, without model time, and the server counts
them. It is not a model: answers are deterministic and derived from the request (a summary
names the chunk it read, fact extraction returns the first line the person wrote: never
an agent's brief or a harness notice, as the prompts ask of a model), so tests can check
what was sent too. `fail` scripts faults per request: an HTTP status, a delay longer than
the client's timeout, a closed connection, or an answer that is not the JSON asked for.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Request:
    path: str
    payload: dict
    purpose: str
    system: str
    user: str


@dataclass
class Fault:
    status: int | None = None
    delay_s: float = 0.0
    close: bool = False
    garbage: bool = False


def _purpose(system: str) -> str:
    system = " ".join(system.split())  # the prompts' line breaks fall anywhere
    if "take long-term memory" in system:
        return "distill"
    if "rolling summary" in system:
        return "summarize"
    if "filter conversation segments" in system:
        return "judge_segments"
    if "overturn or supersede" in system:
        return "find_overturned"
    if "relevant to the request" in system:
        return "select_relevant"
    if "short narrative" in system:
        return "summarize_facts"
    if "Distill durable knowledge" in system:
        return "synthesize_knowledge"
    if "Condense the summaries" in system:
        return "summarize_node"
    return "unknown"


# a line the person wrote: `[12] User: …` (distill) or `User: …`; a user turn an agent or the
# harness wrote reads `User (written by an agent, not the person): …` and binds no one
_PERSON_LINE = re.compile(r"^(?:\[(\d+)\] )?User: (.*)$", re.MULTILINE)


def _summary(request: Request) -> dict:
    """A summary naming the chunk it read, the previous one's entries kept; a decision only
    from a chunk with a line the person wrote (as the prompts ask of a model)."""
    digest = hashlib.sha256(request.user.encode()).hexdigest()[:8]
    previous = json.loads(request.system.rsplit("Previous summary: ", 1)[1])
    decided = [f"Do: keep chunk {digest}"] if _PERSON_LINE.search(request.user) else []
    return {
        "key_decisions": [*previous.get("key_decisions", []), *decided],
        "past_discussions": [*previous.get("past_discussions", []), f"chunk {digest}"],
        "current_discussion": f"chunk {digest} of {len(request.user)} characters",
        "keys": [digest],
        "language": "en",
    }


def default_answer(request: Request, number: int) -> dict:
    if request.purpose == "summarize":
        return _summary(request)
    if request.purpose == "distill":
        # the chunk's first line the person wrote as a fact; no entries or relations
        first = re.search(r"^\[(\d+)\] User: (.*)$", request.user, re.MULTILINE)
        facts = [] if first is None else [{"category": "notes", "key": f"note_{first.group(1)}",
                                           "value": first.group(2)[:80], "source": "conversation",
                                           "seq": int(first.group(1))}]
        return {"summary": _summary(request), "facts": facts, "entries": [], "relations": []}
    if request.purpose == "judge_segments":
        ids = re.findall(r"^### segment (\S+)$", request.user, re.MULTILINE)
        return {"segments": [{"id": i, "noise": False, "reason": None, "confidence": 0.9} for i in ids]}
    if request.purpose == "find_overturned":
        return {"overturned": []}
    if request.purpose == "select_relevant":
        return {"relevant": [1]}
    if request.purpose == "summarize_facts":
        return {"summary": f"{request.user.count(chr(10)) + 1} facts known."}
    if request.purpose == "synthesize_knowledge":
        return {"entries": [], "relations": []}
    if request.purpose == "summarize_node":
        first = request.user.split("\n", 1)[0]
        return {"summary": f"{request.user.count(chr(10)) + 1} parts, from: {first[:60]}"}
    return {}


@dataclass
class InstantModelServer:
    answer: Callable[[Request, int], dict | str] = default_answer
    fail: Callable[[Request, int], Fault | None] = lambda request, number: None
    requests: list[Request] = field(default_factory=list)
    dimension: int = 16

    def vector(self, text: str) -> list[float]:
        """A deterministic embedding: a few buckets set by the text's words."""
        vector = [0.0] * self.dimension
        for word in re.findall(r"\w+", text.lower()):
            vector[int(hashlib.sha256(word.encode()).hexdigest(), 16) % self.dimension] += 1.0
        return vector if any(vector) else [1.0] + [0.0] * (self.dimension - 1)

    def __post_init__(self) -> None:
        server = self
        self._lock = threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # headers and body go out as two writes: with Nagle's algorithm on, the body waits
            # for the client's delayed ACK, 40 ms a call on Linux
            disable_nagle_algorithm = True

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                # the models lists a client asks for to see that the server is up (not recorded)
                if self.path == "/api/tags":
                    self._send(200, {"models": [{"name": "instant", "model": "instant"}]})
                elif self.path.endswith("/models"):
                    self._send(200, {"object": "list", "data": [{"id": "instant", "object": "model"}]})
                else:
                    self._send(404, {"error": f"no route {self.path}"})

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                payload = json.loads(body)
                if self.path in ("/api/embed", "/v1/embeddings"):
                    self._embed(payload)
                    return
                messages = payload.get("messages", [])
                system = next((m["content"] for m in messages if m["role"] == "system"), "")
                user = next((m["content"] for m in messages if m["role"] == "user"), "")
                request = Request(self.path, payload, _purpose(system), system, user)
                with server._lock:
                    server.requests.append(request)
                    number = len(server.requests)
                fault = server.fail(request, number)
                if fault and fault.delay_s:
                    time.sleep(fault.delay_s)
                if fault and fault.close:
                    self.close_connection = True
                    self.connection.close()
                    return
                if fault and fault.status:
                    self._send(fault.status, {"error": f"injected {fault.status}"})
                    return
                answer = server.answer(request, number)
                # a prompt's tokens, as a real server counts them: every message it was sent
                prompt_tokens = sum(len(m.get("content") or "") for m in messages) // 4
                # an answer given as text is sent as it is (a code fence, a reply that is not JSON)
                content = "this is not json {" if fault and fault.garbage else (
                    answer if isinstance(answer, str) else json.dumps(answer))
                if self.path == "/api/chat":
                    self._send(200, {"model": payload["model"], "message": {"role": "assistant", "content": content},
                                     "done": True, "prompt_eval_count": prompt_tokens, "eval_count": len(content) // 4})
                elif self.path.endswith("/chat/completions"):
                    self._send(200, {"id": f"c{number}", "object": "chat.completion", "model": payload["model"],
                                     "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                                                  "finish_reason": "stop"}],
                                     "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": len(content) // 4}})
                else:
                    self._send(404, {"error": f"no route {self.path}"})

            def _embed(self, payload: dict) -> None:
                texts = payload["input"] if isinstance(payload["input"], list) else [payload["input"]]
                request = Request(self.path, payload, "embed", "", "\n".join(texts))
                with server._lock:
                    server.requests.append(request)
                    number = len(server.requests)
                fault = server.fail(request, number)
                if fault and fault.status:
                    self._send(fault.status, {"error": f"injected {fault.status}"})
                    return
                vectors = [server.vector(t) for t in texts]
                if fault and fault.garbage:
                    vectors = vectors[:-1]  # one vector short
                if self.path == "/api/embed":
                    self._send(200, {"model": payload["model"], "embeddings": vectors})
                else:
                    self._send(200, {"object": "list", "model": payload["model"], "data": [
                        {"object": "embedding", "index": i, "embedding": v} for i, v in reversed(list(enumerate(vectors)))]})

            def _send(self, status: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def by_purpose(self, purpose: str) -> list[Request]:
        return [r for r in self.requests if r.purpose == purpose]

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
