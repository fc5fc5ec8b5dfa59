"""Where a served row came from: its source messages, the run and partition that made it,
the model and prompt version, the model calls and their tokens, and what superseded or
merged it (`memory-pipelines lineage fact|chunk|entry|turn|summary ID`)."""

from __future__ import annotations

from typing import Any

import psycopg

from memory_pipelines.db import lineage as lineage_db

# the query of each kind, and the purpose of the calls that wrote its rows before calls had ids
KINDS = {"fact": ("lineage_fact", "extract_facts"), "chunk": ("lineage_chunk", None),
         "entry": ("lineage_entry", "synthesize_knowledge"), "turn": ("lineage_turn", None)}
EXCERPT_CHARS = 160


def lineage(conn: psycopg.Connection, kind: str, ident: str) -> dict[str, Any]:
    """The lineage of one row: `ident` is a row id, or a session id for `summary`."""
    if kind == "summary":
        versions = lineage_db.lineage_rows(conn, "lineage_summary", {"session_id": ident})
        if not versions:
            raise LookupError(f"no summary for session {ident!r}")
        first = min((v["seq_start"] for v in versions if v["seq_start"] is not None), default=0)
        calls = []
        for run_id in sorted({v["run_id"] for v in versions}):
            calls += lineage_db.lineage_rows(conn, "lineage_calls", {"call_id": None, "run_id": run_id, "session_id": ident,
                                                   "purpose": None})
        return {"kind": kind, "row": versions[-1], "versions": versions, "calls": calls,
                "messages": lineage_db.lineage_rows(conn, "lineage_messages", {"session_id": ident, "first": first,
                                                             "last": versions[-1]["cursor_seq"],
                                                             "chars": EXCERPT_CHARS})}
    if kind not in KINDS:
        raise ValueError(f"kind must be fact, chunk, entry, turn or summary, not {kind!r}")
    try:
        row_id = int(ident)
    except ValueError:
        raise ValueError(f"{kind} ids are numbers, got {ident!r}") from None
    name, purpose = KINDS[kind]
    found = lineage_db.lineage_rows(conn, name, {"id": row_id})
    if not found:
        raise LookupError(f"no {kind} with id {row_id} (archived rows are in memory_archive)")
    row = found[0]
    report: dict[str, Any] = {"kind": kind, "row": row, "messages": lineage_db.lineage_rows(conn, "lineage_messages", {
        "session_id": row["session_id"], "first": row["seq_start"], "last": row["seq_end"], "chars": EXCERPT_CHARS})}
    report["calls"] = lineage_db.lineage_rows(conn, "lineage_calls", {
        "call_id": row["call_id"], "run_id": row["run_id"], "session_id": row["session_id"],
        "purpose": purpose}) if purpose else []
    if kind == "fact":
        report["merged"] = [r for r in lineage_db.lineage_rows(conn, "lineage_fact_merged",
                                              {"id": row_id, "merged_into": row["merged_into"]}) if r["id"] != row_id]
    if kind == "entry":
        report["versions"] = lineage_db.lineage_rows(conn, "lineage_entry_versions", {"entry_key": row["entry_key"]})
    return report


def render(report: dict[str, Any]) -> str:
    row = report["row"]
    lines = [f"{report['kind']} lineage"]
    lines += [f"  {k}: {v}" for k, v in row.items() if v is not None and k not in ("breadcrumbs", "trimmed")]
    lines.append(f"source messages ({len(report['messages'])}):")
    lines += [f"  [{m['seq']}] {m['role']} {m['ts']:%Y-%m-%d %H:%M} ({m['source_file']}:{m['source_line']}): "
              f"{' '.join(m['excerpt'].split())}" for m in report["messages"]]
    lines.append(f"model calls ({len(report['calls'])}):")
    lines += [f"  #{c['id']} {c['asset']} {c['purpose']} via {c['backend']}/{c['model']} prompt {c['prompt_version']}: "
              f"{c['input_tokens']} in / {c['output_tokens']} out tokens"
              f"{' (estimated)' if c['tokens_estimated'] else ''}, {c['latency_ms']:.1f} ms, {c['status']}"
              for c in report["calls"]]
    for merged in report.get("merged", []):
        relation = "merged into this" if merged["merged_into"] == row["id"] else "this is merged into"
        lines.append(f"{relation}: #{merged['id']} {merged['key']} = {merged['value']}")
    if report["kind"] == "entry":
        lines.append(f"versions ({len(report['versions'])}):")
        lines += [f"  {v['observed_at']:%Y-%m-%d %H:%M} {v['session_id']} [{v['seq_start']}-{v['seq_end']}]: "
                  f"{v['content']}" for v in report["versions"]]
    if report["kind"] == "summary":
        lines.append(f"versions ({len(report['versions'])}):")
        lines += [f"  v{v['version']} {v['partition_key']} {v['kind']} step {v['step']}/{v['step_count']} "
                  f"cursor {v['cursor_seq']} run {v['run_id']}" for v in report["versions"]]
    return "\n".join(lines)
