"""`bench search`: latency and recall of the query module at scale, on a synthetic database.

A separate database on the configured server (`memory_bench_search_u<users>_c<chunks>_f<facts>_s<seed>`,
never the pipeline's own) holds N chunks and M facts over U users, written by a seeded word
model (Zipf over function words, the generator's developer vocabulary and a long tail of
made-up words, each user with topic words of their own) and embedded with the benchmark's
embedder; rows arrive in time order with users interleaved, as the pipeline writes them. The
database is reused while its parameters (recorded in `bench_search_meta`) match.

Over a seeded query set drawn from the data (a user, and 2-4 content words of one of their
chunks or facts, in a question template), each search path is timed once per query, a pass
per path (so a query rarely finds its user's rows in shared buffers, as on a server serving
many users), one search object per request, with the query embedding precomputed (without)
and computed in the call (with); recall@10 of the vector queries is measured against an
exact search in numpy over that user's rows.

The tables other searches read (messages, sketches, knowledge entries) stay empty.

Modules: `generate` (the word model and the bulk hashing embedder), `build` (the database),
`queries` (the query set), `timing` (the measurement and its result), `report` (markdown, JSON).
"""
