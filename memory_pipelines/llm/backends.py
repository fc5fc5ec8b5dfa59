"""`ModelBackend`: the tasks the pipeline asks of a model, and their implementations."""

from __future__ import annotations

import hashlib
import json
import logging
import re
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import httpx

from memory_pipelines.json_schemas import JsonSchema, describe
from memory_pipelines.llm.config import ModelConfig
from memory_pipelines.llm.http import RETRY_STATUS, HttpCallError, HttpReply, post_json
from memory_pipelines.llm.rendering import SUMMARY_TOOL_CHARS, estimate_tokens, render_chunk, render_for_judging, render_transcript
from memory_pipelines.llm.prompts import (
    DISTILL, FIND_OVERTURNED, JUDGE_SEGMENTS, SELECT_RELEVANT, SUMMARIZE, SUMMARIZE_FACTS, SUMMARIZE_NODE,
    SYNTHESIZE_KNOWLEDGE, Prompt, distill_schema, judging_schema, numbers_schema,
)
from memory_pipelines.records import Distillation, Message, NoiseVerdict, Segment, Summary, SummaryFormatError
from memory_pipelines.rules import extraction as rules_extraction
from memory_pipelines.rules import synthesis as rules_synthesis
from memory_pipelines.rules import noise as rules_noise
from memory_pipelines.rules import summary as rules_summary

log = logging.getLogger(__name__)

# Bump when the rules change: it is the rules back end's "prompt version".
RULES_VERSION = "rules-2026.11.2"  # .2: only the person binds the user; Do:/Don't: by polarity


@dataclass(frozen=True)
class ModelCall:
    """One model call, as recorded in `llm_calls`."""

    purpose: str
    backend: str
    model: str
    prompt_version: str
    input_tokens: int
    output_tokens: int
    tokens_estimated: bool
    latency_ms: float
    status: str  # ok | error | unparsable
    error: str | None = None
    attempts: int = 1
    cost_usd: float | None = None  # estimated from the price table; None: the model is not priced
    budget_reached: bool = False  # not made: the run's token budget was spent
    schema_retried: bool = False  # the first answer broke the prompt's schema and was asked again
    # names the call in llm_calls, and the rows it wrote name it (lineage)
    call_id: str = field(default_factory=lambda: uuid.uuid4().hex)

    def describe(self) -> str:
        """One line naming the call and its outcome, as failures are reported."""
        return f"{self.purpose} via {self.backend}/{self.model}: {self.status}: {self.error}"


BUDGET_REACHED = "token budget reached"


class ModelError(RuntimeError):
    """A model call failed or its answer could not be used; `call` says which and why."""

    def __init__(self, call: ModelCall):
        super().__init__(call.describe())
        self.call = call


_FENCE = re.compile(r"^\s*```(?:json)?\s*\n(.*?)\n?```\s*$", re.DOTALL)
PROBE_RETRY_STATUS = RETRY_STATUS - {500}  # while finding the answer format a 500 is a refusal
SCHEMA_RETRY = ("Your reply could not be used: {problem}. Reply again with one JSON object only, in the form asked "
                "for.")
_ANSWER_SCHEMAS: dict[str, JsonSchema] = {}  # prompt version -> its compiled answer schema
_ANSWER_FORMATS: dict[tuple[str, str, str], int] = {}  # (back end, server, model) -> the answer format it took


def decode_answer(prompt: Prompt, text: str, schema: Mapping[str, Any] | None = None) -> Any:
    """An answer's JSON (a code fence around it taken off: unconstrained models add one),
    checked against the prompt's schema (or the call's own, `schema`). Raises ValueError
    naming the first break, except within the prompt's item lists (an item, or the list
    itself), which are judged later, one by one, so a bad one costs neither the rest of the
    answer nor a second call."""
    fenced = _FENCE.match(text)
    data = json.loads(fenced.group(1) if fenced else text)
    if schema is not None:
        validator = JsonSchema(schema)
    elif (validator := _ANSWER_SCHEMAS.get(prompt.version)) is None:
        validator = _ANSWER_SCHEMAS[prompt.version] = JsonSchema(prompt.schema)
    for error in validator.errors(data):
        path = list(error.absolute_path)
        if path and path[0] in prompt.item_lists:
            continue
        raise ValueError(f"{'/'.join(map(str, path)) or 'the answer'}: {describe(error)[:300]}")
    return data


def _text_of(messages: Sequence[dict[str, str]]) -> str:
    return "\n".join(m["content"] for m in messages)


def _language_phrase(language: str) -> str:
    return "the conversation's own language" if language == "auto" else language


def _numbered(summary: Summary) -> list[tuple[int, str, str]]:
    """(number, field, entry) for key_decisions, past_discussions and current_discussion."""
    rows = [("key_decisions", e) for e in summary.key_decisions]
    rows += [("past_discussions", e) for e in summary.past_discussions]
    if summary.current_discussion:
        rows.append(("current_discussion", summary.current_discussion))
    return [(i + 1, field, entry) for i, (field, entry) in enumerate(rows)]


def _numbers(data: Any, field: str) -> set[int]:
    if not isinstance(data, dict) or not isinstance(data.get(field), list):
        raise SummaryFormatError(f"expected {{\"{field}\": [numbers]}}")
    return {int(n) for n in data[field] if isinstance(n, (int, float, str)) and str(n).strip().isdigit()}


def _summary_text(data: Any) -> str:
    """The text of a {"summary": "..."} answer."""
    if not isinstance(data, dict) or not isinstance(data.get("summary"), str) or not data["summary"].strip():
        raise SummaryFormatError('expected {"summary": "..."}')
    return data["summary"].strip()


class ModelBackend(ABC):
    """Everything the pipeline asks of a model. Each task returns its result and the
    `ModelCall` it cost, or raises `ModelError` carrying the failed call."""

    def __init__(self, config: ModelConfig, spent: Callable[[], int] | None = None):
        """`spent` returns the tokens this run has spent so far: with a token budget set,
        a call once it is reached fails before it is made, as a model failure would, so the
        run stops at the next chunk boundary and what is left waits for the next run."""
        self.config = config
        self._spent = spent

    def _check_budget(self, prompt: Prompt) -> None:
        budget = self.config.token_budget
        if budget and self._spent is not None and self._spent() >= budget:
            raise ModelError(ModelCall(prompt.purpose, self.name, self.model, self.prompt_version(prompt), 0, 0,
                                       True, 0.0, "error", f"{BUDGET_REACHED}: {budget} tokens per run", 0, 0.0,
                                       budget_reached=True))

    def _call(self, prompt: Prompt, input_tokens: int, output_tokens: int, estimated: bool, started: float,
              status: str, error: str | None = None, attempts: int = 1, schema_retried: bool = False) -> ModelCall:
        return ModelCall(prompt.purpose, self.name, self.model, self.prompt_version(prompt), input_tokens,
                         output_tokens, estimated, (time.perf_counter() - started) * 1000, status, error, attempts,
                         self.config.cost_usd(input_tokens, output_tokens), schema_retried=schema_retried)

    @property
    def name(self) -> str:
        return self.config.backend

    @property
    def model(self) -> str:
        return self.config.model

    @abstractmethod
    def prompt_version(self, prompt: Prompt) -> str: ...

    @abstractmethod
    def judge_sessions(self, sessions: Sequence[Sequence[Segment]]
                       ) -> tuple[list[list[NoiseVerdict | None]], ModelCall]:
        """Verdicts for several sessions' segments in one call, one list per session in
        order; None where the answer left a segment out."""

    def judge_segments(self, segments: Sequence[Segment]) -> tuple[list[NoiseVerdict | None], ModelCall]:
        verdicts, call = self.judge_sessions([segments])
        return verdicts[0], call

    @abstractmethod
    def find_overturned(self, previous: Summary, messages: Sequence[Message]) -> tuple[set[str], ModelCall]: ...

    @abstractmethod
    def summarize(self, previous: Summary, messages: Sequence[Message], language: str) -> tuple[Summary, ModelCall]: ...

    @abstractmethod
    def select_relevant(self, summary: Summary, request: str) -> tuple[Summary | None, ModelCall]: ...

    @abstractmethod
    def distill(self, previous: Summary, messages: Sequence[Message], language: str
                ) -> tuple[Distillation, ModelCall]:
        """A summarized chunk's memory in one call: `previous` updated with `messages`, and
        the facts, knowledge entries and relations they hold (validated later, item by item)."""

    @abstractmethod
    def summarize_facts(self, facts: Sequence[tuple[str, str, str]]) -> tuple[str, ModelCall]:
        """A per-user narrative from (category, key, value) facts."""

    @abstractmethod
    def synthesize_knowledge(self, messages: Sequence[Message], transcript: str,
                             summary: Summary | None) -> tuple[Any, ModelCall]:
        """Raw {"entries": [...], "relations": [...]} (validated by the caller)."""

    def close(self) -> None:
        """Release connections (HTTP back ends)."""


class RulesBackend(ModelBackend):
    """The deterministic offline back end: heuristics, no network (see memory_pipelines.rules)."""

    def prompt_version(self, prompt: Prompt) -> str:
        return hashlib.sha256(f"{RULES_VERSION}:{prompt.purpose}".encode()).hexdigest()[:12]

    def _run(self, prompt: Prompt, input_text: str, fn: Callable[[], Any]) -> tuple[Any, ModelCall]:
        self._check_budget(prompt)
        started = time.perf_counter()
        result = fn()
        output = json.dumps(result, default=lambda o: o.to_json() if hasattr(o, "to_json") else str(o))
        return result, self._call(prompt, estimate_tokens(input_text), estimate_tokens(output), True, started, "ok")

    def judge_sessions(self, sessions):
        text = "\n\n".join(render_for_judging(s.messages) for segments in sessions for s in segments)
        return self._run(JUDGE_SEGMENTS, text, lambda: [rules_noise.judge_segments(segments) for segments in sessions])

    def find_overturned(self, previous, messages):
        text = json.dumps(previous.to_json()) + render_transcript(messages)
        gone, call = self._run(FIND_OVERTURNED, text, lambda: sorted(rules_summary.overturned_entries(previous, messages)))
        return set(gone), call

    def summarize(self, previous, messages, language):
        text = json.dumps(previous.to_json()) + render_transcript(messages)
        return self._run(SUMMARIZE, text, lambda: rules_summary.summarize(previous, messages, language))

    def select_relevant(self, summary, request):
        return self._run(SELECT_RELEVANT, json.dumps(summary.to_json()) + request,
                         lambda: rules_summary.relevant_entries(summary, request))

    def distill(self, previous, messages, language):
        text = json.dumps(previous.to_json()) + render_chunk(messages)

        def distillation() -> Distillation:
            summary = rules_summary.summarize(previous, messages, language)
            facts = rules_extraction.extract_facts(messages)
            knowledge = rules_synthesis.synthesize(messages, summary, facts)
            return Distillation(summary, facts, knowledge["entries"], knowledge["relations"])

        return self._run(DISTILL, text, distillation)

    def summarize_facts(self, facts):
        return self._run(SUMMARIZE_FACTS, json.dumps(facts), lambda: rules_extraction.summarize_facts(facts))

    def synthesize_knowledge(self, messages, transcript, summary):
        return self._run(SYNTHESIZE_KNOWLEDGE, transcript, lambda: rules_synthesis.synthesize(messages, summary))


class PromptedBackend(ModelBackend):
    """A chat model over HTTP: the tasks become prompts with JSON answers."""

    def __init__(self, config: ModelConfig, spent: Callable[[], int] | None = None):
        super().__init__(config, spent)
        self._client = httpx.Client(timeout=config.timeout_s)

    def close(self) -> None:
        self._client.close()

    def prompt_version(self, prompt: Prompt) -> str:
        return prompt.version

    @abstractmethod
    def _formats(self, prompt: Prompt, schema: Mapping[str, Any]) -> list[Any]:
        """The ways to ask this server for an answer by `schema`, most exact first."""

    def _post_with_format(self, prompt: Prompt, schema: Mapping[str, Any], url: str,
                          payload: Callable[[Any], dict]) -> HttpReply:
        """POST with the most exact answer format this server takes. Until a format has been
        answered, a refusal moves on to the next one: a client error other than 429, or a 500
        (llama-cpp-python's answer to `json_schema`), which is then not retried. The format
        answered is kept for the process's life (a back end is built per run step)."""
        formats = self._formats(prompt, schema)
        headers = {"Authorization": f"Bearer {self.config.api_key}"} if self.config.api_key else None
        server = (self.name, self.config.base_url, self.model)
        settled = _ANSWER_FORMATS.get(server)
        refused = 0  # requests the server refused a format in
        for level in range(settled or 0, len(formats)):
            probing = settled is None and level < len(formats) - 1
            try:
                reply = post_json(self._client, url, payload(formats[level]), headers=headers,
                                  retries=self.config.retries, backoff_s=self.config.backoff_s,
                                  retry_status=PROBE_RETRY_STATUS if probing else RETRY_STATUS)
            except HttpCallError as exc:
                exc.attempts += refused
                if probing and exc.status is not None and not exc.retryable:
                    log.info("%s refused answer format %d (%s): trying the next", url, level, exc)
                    refused = exc.attempts
                    continue
                raise
            _ANSWER_FORMATS[server] = level
            return replace(reply, attempts=reply.attempts + refused)
        raise AssertionError("the last answer format is never probed")

    @abstractmethod
    def _chat(self, prompt: Prompt, messages: list[dict[str, str]],
              schema: Mapping[str, Any]) -> tuple[str, int | None, int | None, int]:
        """(answer text, input tokens, output tokens, attempts) from the server, the answer's
        schema sent along as the server takes it."""

    def _ask(self, prompt: Prompt, system: str, user: str, parse: Callable[[Any], Any],
             schema: Mapping[str, Any] | None = None) -> tuple[Any, ModelCall]:
        """One call; an answer that is not JSON, breaks the schema (the prompt's, or `schema`
        for this call) or cannot be parsed is asked again once, with what was wrong, before
        the call counts as unparsable."""
        self._check_budget(prompt)
        started = time.perf_counter()
        messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        spent_in = spent_out = 0
        estimated, attempts = False, 0
        problem = ""
        for retry in (False, True):
            try:
                text, tokens_in, tokens_out, made = self._chat(prompt, messages, schema or prompt.schema)
            except HttpCallError as exc:
                raise ModelError(self._call(prompt, spent_in + estimate_tokens(_text_of(messages)), spent_out, True,
                                            started, "error", str(exc), attempts + exc.attempts, retry)) from exc
            estimated |= tokens_in is None or tokens_out is None
            spent_in += tokens_in if tokens_in is not None else estimate_tokens(_text_of(messages))
            spent_out += tokens_out if tokens_out is not None else estimate_tokens(text)
            attempts += made
            try:
                result = parse(decode_answer(prompt, text, schema))
            except (ValueError, TypeError, SummaryFormatError) as exc:
                problem = f"{problem} then " if problem else ""
                problem += f"{exc}: {text[:200]!r}"
                messages += [{"role": "assistant", "content": text},
                             {"role": "user", "content": SCHEMA_RETRY.format(problem=exc)}]
                continue
            return result, self._call(prompt, spent_in, spent_out, estimated, started, "ok", attempts=attempts,
                                      schema_retried=retry)
        raise ModelError(self._call(prompt, spent_in, spent_out, estimated, started, "unparsable", problem, attempts,
                                    schema_retried=True))

    def judge_sessions(self, sessions):
        listing = "\n\n".join(
            f"## conversation {segments[0].session_id}\n\n" + "\n\n".join(
                f"### segment {s.segment_id}\n{render_for_judging(s.messages)}" for s in segments)
            for segments in sessions if segments)

        def verdict(item: Any) -> NoiseVerdict | None:
            if item is None:
                return None
            confidence = float(item.get("confidence", 0))
            if not 0 <= confidence <= 1:
                raise SummaryFormatError(f"confidence out of range: {confidence}")
            noisy = bool(item.get("noise"))
            return NoiseVerdict(noisy, confidence, (item.get("reason") or None) if noisy else None)

        def parse(data):
            if not isinstance(data, dict) or not isinstance(data.get("segments"), list):
                raise SummaryFormatError('expected {"segments": [...]}')
            by_id = {str(item.get("id")): item for item in data["segments"] if isinstance(item, dict)}
            return [[verdict(by_id.get(s.segment_id)) for s in segments] for segments in sessions]

        return self._ask(JUDGE_SEGMENTS, JUDGE_SEGMENTS.system, listing, parse,
                         judging_schema([s.segment_id for segments in sessions for s in segments]))

    def find_overturned(self, previous, messages):
        entries = [row for row in _numbered(previous) if row[1] != "current_discussion"]
        listing = "\n".join(f"{n}. [{field}] {entry}" for n, field, entry in entries)
        user = f"Previous summary entries:\n{listing}\n\nNew segments:\n{render_transcript(messages)}"
        by_number = {n: entry for n, _, entry in entries}
        return self._ask(FIND_OVERTURNED, FIND_OVERTURNED.system, user,
                         lambda data: {by_number[n] for n in _numbers(data, "overturned") if n in by_number},
                         numbers_schema(FIND_OVERTURNED, len(entries)))

    def summarize(self, previous, messages, language):
        system = SUMMARIZE.system.format(language=_language_phrase(language),
                                         previous=json.dumps(previous.to_json(), ensure_ascii=False))
        return self._ask(SUMMARIZE, system, render_transcript(messages, SUMMARY_TOOL_CHARS), Summary.from_json)

    def distill(self, previous, messages, language):
        system = DISTILL.system.format(language=_language_phrase(language),
                                       previous=json.dumps(previous.to_json(), ensure_ascii=False))
        return self._ask(DISTILL, system, render_chunk(messages), Distillation.from_json,
                         distill_schema([m.seq for m in messages]))

    def select_relevant(self, summary, request):
        entries = _numbered(summary)
        listing = "\n".join(f"{n}. [{field}] {entry}" for n, field, entry in entries)

        def parse(data):
            keep = _numbers(data, "relevant")
            chosen = [(field, entry) for n, field, entry in entries if n in keep]
            if not chosen:
                return None
            current = next((e for f, e in chosen if f == "current_discussion"), "")
            return Summary(tuple(e for f, e in chosen if f == "key_decisions"),
                           tuple(e for f, e in chosen if f == "past_discussions"), current,
                           summary.keys, summary.language)

        return self._ask(SELECT_RELEVANT, SELECT_RELEVANT.system,
                         f"Summary entries:\n{listing}\n\nRequest: {request}", parse,
                         numbers_schema(SELECT_RELEVANT, len(entries)))


    def summarize_facts(self, facts):
        listing = "\n".join(f"- [{c}] {k}: {v}" for c, k, v in facts)
        return self._ask(SUMMARIZE_FACTS, SUMMARIZE_FACTS.system, listing, _summary_text)

    def summarize_node(self, parts: Sequence[str]) -> tuple[str, ModelCall]:
        """A temporal tree node's summary from its children's, oldest first (the rules back
        end has no such call: its summaries are the extractive ones the tree is built with)."""
        listing = "\n".join(" ".join(p.split()) for p in parts)
        return self._ask(SUMMARIZE_NODE, SUMMARIZE_NODE.system, listing, _summary_text)


    def synthesize_knowledge(self, messages, transcript, summary):
        context = json.dumps(summary.to_json(), ensure_ascii=False) if summary else "{}"
        return self._ask(SYNTHESIZE_KNOWLEDGE, SYNTHESIZE_KNOWLEDGE.system,
                         f"Summary: {context}\n\nConversation:\n{transcript}", lambda data: data)


class OllamaBackend(PromptedBackend):
    """Ollama's `/api/chat` with the answer's schema as `format` (plain `json` for a server
    that refuses a schema)."""

    def _formats(self, prompt, schema):
        return [dict(schema), "json"]

    def _chat(self, prompt, messages, schema):
        reply = self._post_with_format(prompt, schema, f"{self.config.base_url}/api/chat", lambda answer_format: {
            "model": self.model, "stream": False, "format": answer_format,
            "options": {"temperature": 0, "num_predict": self.config.max_output_tokens}, "messages": messages})
        body = reply.body
        try:
            text = body["message"]["content"]
        except (KeyError, TypeError):
            raise HttpCallError(f"unexpected Ollama reply: {str(body)[:200]}", attempts=reply.attempts) from None
        return text, body.get("prompt_eval_count"), body.get("eval_count"), reply.attempts


class OpenAIBackend(PromptedBackend):
    """Any OpenAI-compatible `/v1/chat/completions`, the answer's schema as `response_format`
    `json_schema`; for a server that refuses it, `json_object` with the schema (llama.cpp
    honours it), then plain `json_object`."""

    def _formats(self, prompt, schema):
        schema = dict(schema)
        return [{"type": "json_schema", "json_schema": {"name": prompt.purpose, "schema": schema}},
                {"type": "json_object", "schema": schema}, {"type": "json_object"}]

    def _chat(self, prompt, messages, schema):
        base = self.config.base_url
        url = f"{base}/chat/completions" if base.endswith("/v1") else f"{base}/v1/chat/completions"
        reply = self._post_with_format(prompt, schema, url, lambda answer_format: {
            "model": self.model, "temperature": 0, "max_tokens": self.config.max_output_tokens,
            "response_format": answer_format, "messages": messages})
        body = reply.body
        try:
            text = body["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError):
            raise HttpCallError(f"unexpected OpenAI-compatible reply: {str(body)[:200]}", attempts=reply.attempts) from None
        usage = body.get("usage") or {}
        return text, usage.get("prompt_tokens"), usage.get("completion_tokens"), reply.attempts


def build_backend(config: ModelConfig, spent: Callable[[], int] | None = None) -> ModelBackend:
    return {"rules": RulesBackend, "ollama": OllamaBackend, "openai": OpenAIBackend}[config.backend](config, spent)
