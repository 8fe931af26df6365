"""The foundation every app may import, and which imports no app (tests/test_layers.py).

JSON and keys: `canonical` (RFC 8785 and the protocol's ids), `strictjson` (the one parser for
untrusted JSON), `signing` (HMAC with key ids), `row_signing` (the MAC of a row that decides
approval). People and tenants: `tenancy` (scoping and membership checks), `audit` (the
hash-chained audit log). Time and queues: `clock` (database time), `queues` (the execution
queue's Redis client), `counters` (worker event counters). Metrics: `rollup` (counts kept by
triggers), `prometheus` (the text format and who may scrape). What may be read or logged:
`redaction` (errors without secrets or addresses), `log_redaction` (no decision token in a
log). Settings: `env` (typed readers of the environment).
"""
