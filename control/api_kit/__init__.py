"""The agent API's plumbing, shared by every app's router; control/api.py composes the API.

`tokens`: bearer-token authentication, one tenant per token. `parsing`: every body through the
strict JSON parser, and no undeclared query parameter. `problems`: every error as
`application/problem+json` with a stable type. `idempotency`: the `Idempotency-Key` of every
POST. `limits`: each token's request rate and concurrent long-polls, counted in Redis.
"""
