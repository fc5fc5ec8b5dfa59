"""The test suite as a CPU without AVX-512 sees pgvector, on any machine.

The embedded server's pgvector runs AVX-512 instructions in most of its `vector` functions;
on a CPU without them a call kills the backend (SIGILL), on the machines tests usually run on
it answers. `install_vector_traps` makes every pgvector function the project does not list
as portable (memory_pipelines.db.selftest.PGVECTOR_FUNCTIONS) raise instead, in the test
template database every test's database is cloned from: a query that strays fails its test
here instead of crashing a user's server. `evex_functions` reads the library's machine code
for the functions that hold AVX-512 instructions, to check that the portable list holds none.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import psycopg
from psycopg import sql

from memory_pipelines.db.selftest import PGVECTOR_FUNCTIONS

TRAPPED = "pgvector function {function} is not portable: on a CPU without AVX-512 it may kill the server (issue 36)"
# Functions of pseudo types cannot be written in PL/pgSQL: the types' I/O and the index
# access methods' handlers. The schema test checks that no index uses an access method.
_PSEUDO_TYPES = ("cstring", "internal", "index_am_handler")


def pgvector_functions(conn: psycopg.Connection) -> list[tuple[str, str, str, str, str]]:
    """(regprocedure, identity arguments, result, language, C symbol) of every pgvector function."""
    return conn.execute(
        "SELECT p.oid::regprocedure::text, pg_get_function_identity_arguments(p.oid), "
        "pg_get_function_result(p.oid), l.lanname, p.prosrc "
        "FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang "
        "JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e' "
        "JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'vector' ORDER BY 1").fetchall()


def install_vector_traps(url: str) -> list[str]:
    """Replace every pgvector C function outside the portable list (and not of a pseudo type)
    by one that raises; returns the trapped functions."""
    trapped = []
    with psycopg.connect(url, autocommit=True) as conn:
        for signature, arguments, result, language, _ in pgvector_functions(conn):
            if (signature in PGVECTOR_FUNCTIONS or language != "c"
                    or any(t in f"{arguments} {result}" for t in _PSEUDO_TYPES)):
                continue
            name = signature.split("(", 1)[0]
            message = TRAPPED.format(function=signature)
            conn.execute(sql.SQL("CREATE OR REPLACE FUNCTION {name}({arguments}) RETURNS {result} "
                                 "LANGUAGE plpgsql AS {body}").format(
                name=sql.Identifier(name), arguments=sql.SQL(arguments), result=sql.SQL(result),
                body=sql.Literal(f"BEGIN RAISE EXCEPTION {sql.quote(message)}; END")))
            trapped.append(signature)
    return trapped


_FUNCTION = re.compile(r"^[0-9a-f]+ <([^>]+)>:$")


def evex_functions(library: Path) -> set[str]:
    """The functions of `library` holding an EVEX-encoded (AVX-512) instruction: one whose
    first byte, after an optional address-size prefix, is 0x62 (`objdump -d`)."""
    listing = subprocess.run(["objdump", "-d", str(library)], capture_output=True, text=True, check=True).stdout
    found, current = set(), None
    for line in listing.splitlines():
        if match := _FUNCTION.match(line):
            current = match.group(1)
            continue
        fields = line.split("\t")
        if current is None or len(fields) < 3:
            continue
        opcode = fields[1].split()
        if opcode and (opcode[0] == "62" or opcode[:2] == ["67", "62"]):
            found.add(current)
    return found
