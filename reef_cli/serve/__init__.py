"""`reef serve`: an OpenAI/Anthropic-compatible gateway that relays model calls to an upstream and records each
exchange in the scenario's ledger with a receipt. The only package that imports httptools and uvloop; import it
lazily.

Modules: `app` (routes, auth edge, drain), `http_server` (the HTTP/1.1 server: one protocol per connection, llhttp's
parser, keep-alive, limits), `upstream_http` (the upstream HTTP/1.1 client on the same parser: pooled connections,
TLS, timeouts), `relay` (upstream URL, headers, credentials), `recording` (exchanges,
durable records, the provenance hooks), `sse` (stream events and in-band receipts), `inject` (--inject system),
`auth` (tokens, bind policy).
"""
