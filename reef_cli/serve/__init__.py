"""`reef serve`: an OpenAI/Anthropic-compatible gateway that relays model calls to an upstream and records each
exchange in the scenario's ledger with a receipt. The only package that imports aiohttp and httptools; import it
lazily.

Modules: `app` (routes, auth edge, drain; aiohttp's low-level server), `upstream_http` (the upstream HTTP/1.1 client:
pooled connections, TLS, timeouts), `relay` (upstream URL, headers, credentials), `recording` (exchanges,
durable records, the provenance hooks), `sse` (stream events and in-band receipts), `inject` (--inject system),
`auth` (tokens, bind policy).
"""
