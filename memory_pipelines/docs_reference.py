"""The reference pages generated from the code: `docs/settings.md` from the settings
registry (`memory_pipelines.config.SPECS`) and `docs/cli.md` from the command-line parser
(`memory_pipelines.cli.build_parser()`, walked recursively through its subcommands).

`python -m memory_pipelines.docs_reference` rewrites both files (`--check` only compares
them); `tests/unit/test_docs.py` fails when they differ from what the code generates.
"""

from __future__ import annotations

import argparse
import fnmatch
import sys
from collections.abc import Iterator
from pathlib import Path

from memory_pipelines import config

REPO = Path(__file__).resolve().parents[1]
SETTINGS_PATH = REPO / "docs" / "settings.md"
CLI_PATH = REPO / "docs" / "cli.md"
REGENERATE = "python -m memory_pipelines.docs_reference"

# Settings by topic: (title, name patterns, where the topic is explained). A setting is
# listed under the first group with a matching pattern; one no pattern matches, under "Other".
SETTING_GROUPS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("State and database", ("MEMORY_HOME", "MEMORY_DATABASE_URL"),
     "[operations.md, The database](operations.md#the-database)"),
    ("Transcripts", ("MEMORY_TRANSCRIPT*", "MEMORY_FORMAT_*", "MEMORY_SOURCE_*", "MEMORY_S3_*", "MEMORY_TIMEZONE",
                     "MEMORY_MAX_MESSAGE_BYTES", "MEMORY_PARTITION_START"),
     "[ingestion.md](ingestion.md) and [formats.md](formats.md)"),
    ("Chat model", ("MEMORY_LLM_*", "MEMORY_PRICE_TABLE", "MEMORY_RUN_TOKEN_BUDGET"),
     "[models.md](models.md)"),
    ("Decision model", ("MEMORY_DECISION_*",),
     "[models.md](models.md) and [pipeline.md, conversation_segments](pipeline.md#conversation_segments); "
     "an unset one follows the chat model's when both use the same back end"),
    ("Distillation", ("MEMORY_SUMMARY_*", "MEMORY_STALE_MINUTES", "MEMORY_CONTEXT_MESSAGES", "MEMORY_PII_SANITIZE",
                      "MEMORY_ENTRY_TTL_SECONDS", "MEMORY_CONSENT_BASIS"),
     "[pipeline.md](pipeline.md)"),
    ("Decay", ("MEMORY_DECAY_*", "MEMORY_PII_RETENTION_DAYS"),
     "[pipeline.md, memory_decay](pipeline.md#memory_decay)"),
    ("Embedder", ("MEMORY_EMBED_*",),
     "[models.md, Embedders](models.md#embedders) and [search.md, A changed embedder](search.md#a-changed-embedder)"),
    ("Runs, automation and scale", ("MEMORY_RETRY_*", "MEMORY_SCHEDULE_CRON", "MEMORY_AUTOMATION", "MEMORY_SHARDS",
                                    "MEMORY_MAX_CONCURRENT_RUNS", "MEMORY_EXECUTOR", "MEMORY_DASK_SCHEDULER"),
     "[operations.md](operations.md) and [pipeline.md, Schedule, sensor and lineage views]"
     "(pipeline.md#schedule-sensor-and-lineage-views)"),
    ("Serving", ("MEMORY_API_*",), "[serving.md](serving.md)"),
)

SETTINGS_INTRO = f"""\
# Settings

<!-- Generated from memory_pipelines/config.py (SPECS) by `{REGENERATE}`: do not edit by hand. -->

Every `MEMORY_*` variable is parsed once, by its entry in `memory_pipelines/config.py`
(`SPECS`: type, range, default), before any command does anything: a bad value is one line
naming the variable, the value and what is accepted, exit 2 —

```
$ MEMORY_STALE_MINUTES=ten memory-pipelines run
memory-pipelines: error: MEMORY_STALE_MINUTES='ten' is not valid: expected an integer >= 1
```

A `MEMORY_*` variable no setting has (a typo) is named in a warning. `memory-pipelines
config` prints every setting's effective value (secrets masked) and where it came from
(environment, default, or derived from another setting). The Dagster code location builds
its resources from the same validated values, so a Dagster config error never reaches the
user.

Beside these: `DAGSTER_HOME` (default `$MEMORY_HOME/dagster`, see
[operations.md](operations.md#one-machine-the-default)) and, for `s3://` transcripts, the
`AWS_*` credentials ([ingestion.md](ingestion.md#transcript-sources)).
"""


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _code(text: str) -> str:
    text = str(text)
    fence = "``" if "`" in text else "`"
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _shown_default(spec: config.Spec) -> str:
    value = spec.default
    if value is None:
        return f"unset: {spec.derived}" if spec.derived else "unset"
    if isinstance(value, bool):
        return _code("1" if value else "0")
    if isinstance(value, float):
        return _code(format(value, "g"))
    text = str(value)
    package = str(config.PACKAGE_DIR)
    if text.startswith(package):  # a path inside the package: shown relative, never this machine's
        text = "memory_pipelines" + text[len(package):].replace("\\", "/")
    return _code(text)


def _group_of(name: str) -> int:
    for index, (_, patterns, _) in enumerate(SETTING_GROUPS):
        if any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns):
            return index
    return len(SETTING_GROUPS)


def render_settings() -> str:
    """docs/settings.md: every setting of `SPECS`, by topic, in registry order."""
    groups: dict[int, list[config.Spec]] = {}
    for spec in config.SPECS.values():
        groups.setdefault(_group_of(spec.name), []).append(spec)
    titles = [(title, more) for title, _, more in SETTING_GROUPS] + [("Other", "")]
    out = [SETTINGS_INTRO]
    out.append(f"{len(config.SPECS)} settings: "
               + ", ".join(f"[{titles[i][0]}](#{_slug(titles[i][0])})" for i in sorted(groups)) + ".\n")
    for index in sorted(groups):
        title, more = titles[index]
        out.append(f"## {title}\n")
        if more:
            out.append(f"More: {more}.\n")
        out.append("| variable | default | accepted | meaning |")
        out.append("|---|---|---|---|")
        for spec in groups[index]:
            meaning = spec.help + (" (a secret: never shown)" if spec.secret else "")
            out.append(f"| `{spec.name}` | {_cell(_shown_default(spec))} | {_cell(spec.kind.accepted)} "
                       f"| {_cell(meaning)} |")
        out.append("")
    return "\n".join(out).rstrip("\n") + "\n"


# --- the CLI ---------------------------------------------------------------------------------

def _subcommands(parser: argparse.ArgumentParser) -> Iterator[tuple[str, str, argparse.ArgumentParser]]:
    """(name, help, parser) of each subcommand, in the order --help lists them."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            for name, sub in action.choices.items():
                yield name, helps.get(name, ""), sub


def _walk(parser: argparse.ArgumentParser, help_text: str = "") -> Iterator[tuple[argparse.ArgumentParser, str]]:
    yield parser, help_text
    for _, sub_help, sub in _subcommands(parser):
        yield from _walk(sub, sub_help)


def _formatter(parser: argparse.ArgumentParser) -> argparse.HelpFormatter:
    # a fixed, wide formatter: the output must not depend on the terminal it is generated in
    return argparse.HelpFormatter(parser.prog, width=10_000, max_help_position=10_000)


def _usage(parser: argparse.ArgumentParser) -> str:
    formatter = _formatter(parser)
    formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups, prefix="")
    return " ".join(formatter.format_help().split())


def _options(parser: argparse.ArgumentParser) -> list[tuple[str, str, str]]:
    formatter = _formatter(parser)
    rows = []
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)) or action.help == argparse.SUPPRESS:
            continue
        invocation = formatter._format_action_invocation(action)
        help_text = formatter._expand_help(action) if action.help else ""
        default = ""
        if (action.option_strings and action.default not in (None, False, argparse.SUPPRESS)
                and action.nargs != 0):
            default = _code(action.default)
        if action.option_strings and action.required:
            help_text = "required; " + help_text
        rows.append((invocation, default, help_text))
    return rows


def _title(parser: argparse.ArgumentParser) -> str:
    return parser.prog


def _slug(heading: str) -> str:
    """The anchor GitHub gives a heading (see tests/unit/test_docs.py for the full rule)."""
    text = heading.strip().lower().replace("`", "")
    return "".join(ch for ch in text if ch.isalnum() or ch in "-_ ").replace(" ", "-")


def render_cli() -> str:
    """docs/cli.md: every command and subcommand of `memory-pipelines`, with its options."""
    from memory_pipelines.cli import build_parser

    root = build_parser()
    parsers = list(_walk(root))
    out = ["# CLI reference", "",
           f"<!-- Generated from memory_pipelines.cli.build_parser() by `{REGENERATE}`: do not edit by hand. -->",
           "",
           "Every command of `memory-pipelines` with its options, as `--help` gives them. What each "
           "command does, its exit status and examples: [commands.md](commands.md); the settings "
           "every command reads: [settings.md](settings.md).", ""]
    if root.description:
        out += [" ".join(root.description.split()), ""]
    out += ["```", _usage(root), "```", ""]
    rows = _options(root)
    if rows:
        out += ["Options of every command (before the command's name):", ""]
        out += _option_table(rows)
    out += ["## Commands", ""]
    for parser, help_text in parsers[1:]:
        depth = parser.prog.count(" ") - root.prog.count(" ") - 1
        out.append(f"{'  ' * depth}- [`{_title(parser)}`](#{_slug(_title(parser))})"
                   + (f": {' '.join(help_text.split())}" if help_text else ""))
    out.append("")
    for parser, help_text in parsers[1:]:
        out += [f"## `{_title(parser)}`", ""]
        if help_text:
            out += [" ".join(help_text.split()), ""]
        if parser.description:
            out += [" ".join(parser.description.split()), ""]
        out += ["```", _usage(parser), "```", ""]
        subs = list(_subcommands(parser))
        if subs:
            out += ["Subcommands: " + ", ".join(f"[`{name}`](#{_slug(sub.prog)})" for name, _, sub in subs) + ".", ""]
        rows = _options(parser)
        if rows:
            out += _option_table(rows)
        if parser.epilog:
            out += [" ".join(parser.epilog.split()), ""]
    return "\n".join(out).rstrip("\n") + "\n"


def _option_table(rows: list[tuple[str, str, str]]) -> list[str]:
    lines = ["| argument | default | meaning |", "|---|---|---|"]
    for invocation, default, help_text in rows:
        lines.append(f"| {_cell(_code(invocation))} | {_cell(default)} | {_cell(help_text)} |")
    return lines + [""]


def generated() -> dict[Path, str]:
    """Each generated file and the text the code gives it now."""
    return {SETTINGS_PATH: render_settings(), CLI_PATH: render_cli()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m memory_pipelines.docs_reference", description=__doc__)
    parser.add_argument("--check", action="store_true", help="only compare: exit 1 when a file is out of date")
    args = parser.parse_args(argv)
    stale = []
    for path, text in generated().items():
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current == text:
            continue
        stale.append(path)
        if not args.check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    for path in stale:
        print(f"{'out of date' if args.check else 'wrote'}: {path.relative_to(REPO)}")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
